package gateway

import (
	"encoding/json"
	"fmt"
	"time"
)

// SessionState is the state of an agent session as the gateway reports it.
type SessionState string

// Session states. The gateway stores only idle and unloaded; running and
// waiting describe a live session's turn, closed and lost the end of its VM.
const (
	SessionIdle     SessionState = "idle"     // open, no turn running
	SessionRunning  SessionState = "running"  // a prompt turn is running
	SessionWaiting  SessionState = "waiting"  // a turn waits for permission answers
	SessionUnloaded SessionState = "unloaded" // its agent was stopped; a prompt restarts it
	SessionClosed   SessionState = "closed"   // its VM was disposed
	SessionLost     SessionState = "lost"     // its VM was lost with its sidecar
	// SessionDeleted is never a session's state: it is the state the final
	// end event of a deleted session's stream carries.
	SessionDeleted SessionState = "deleted"
)

// Permission decisions a default can take.
const (
	DecisionReject = "reject"
	DecisionAllow  = "allow"
)

// PermissionDefault is the decision the gateway takes for a permission
// request nobody answered in time, so that an unattended turn never hangs.
// With a WebhookURL, each request is first POSTed there, signed, and the
// webhook's answer decides it; no usable answer takes Decision at once.
type PermissionDefault struct {
	Decision       string `json:"decision" validate:"oneof=reject allow"`
	TimeoutSeconds int    `json:"timeoutSeconds" validate:"gte=1,lte=604800"`
	WebhookURL     string `json:"webhookUrl,omitempty" validate:"max=2048"`
}

// Timeout is TimeoutSeconds as a duration.
func (d PermissionDefault) Timeout() time.Duration {
	return time.Duration(d.TimeoutSeconds) * time.Second
}

// SessionSettings are a tenant's defaults for its agent sessions.
type SessionSettings struct {
	// RetentionDays is how long the record of a session whose VM has ended
	// is kept after its last event; 0 keeps it until it is deleted.
	RetentionDays int `json:"retentionDays" validate:"gte=0,lte=36500"`
	// PermissionDefault applies to sessions that do not set their own; nil
	// means the gateway's default.
	PermissionDefault *PermissionDefault `json:"permissionDefault,omitempty"`
}

// Retention is RetentionDays as a duration.
func (s SessionSettings) Retention() time.Duration {
	return time.Duration(s.RetentionDays) * 24 * time.Hour
}

// Session is the gateway's record of an agent session in a VM.
type Session struct {
	ID                    string             `json:"id"`
	TenantID              string             `json:"-"`
	VMID                  string             `json:"vmId"`
	Agent                 string             `json:"agent"`
	Cwd                   string             `json:"cwd"`
	AdditionalDirectories []string           `json:"additionalDirectories"`
	PermissionPolicy      string             `json:"permissionPolicy"`
	PermissionDefault     *PermissionDefault `json:"permissionDefault,omitempty"`
	State                 SessionState       `json:"state"`
	// PendingPermissions are the permission requests a waiting session's
	// turn waits for.
	PendingPermissions []Permission `json:"pendingPermissions"`
	LatestSequence     uint64       `json:"latestSequence"`
	CreatedAt          time.Time    `json:"createdAt"`
	UpdatedAt          time.Time    `json:"updatedAt"`
}

// SessionEvent is a durable event of a session as the gateway keeps it.
// Data is the event exactly as the API serves it (a JSON object with
// sequence, timestamp and type among its fields).
type SessionEvent struct {
	VMID      string
	SessionID string
	Sequence  uint64
	Time      time.Time
	Type      string
	Data      json.RawMessage
}

// HistoryQuery selects durable session events by sequence: those after
// After and before Before (both exclusive, 0 meaning unbounded), at most
// Limit of them. With only Before set, the latest ones before it are
// selected; otherwise the earliest ones after After.
type HistoryQuery struct {
	After  uint64
	Before uint64
	Limit  int
}

// HistoryPage is a page of durable session events, oldest first.
type HistoryPage struct {
	Events        []SessionEvent
	HasMoreBefore bool
	HasMoreAfter  bool
}

// Permission statuses.
const (
	PermissionPending  = "pending"
	PermissionAnswered = "answered" // an option was chosen
	PermissionDropped  = "dropped"  // the turn ended, was cancelled or the VM went away
)

// Permission is a permission request an agent raised in a session.
type Permission struct {
	RequestID string          `json:"requestId"`
	Options   json.RawMessage `json:"options"`
	ToolCall  json.RawMessage `json:"toolCall"`
	AskedAt   time.Time       `json:"askedAt"`
	// Status is pending, answered or dropped.
	Status string `json:"status"`
	// Decision is null until the request is settled.
	Decision *PermissionDecision `json:"decision"`
}

// Who can decide a permission request.
const (
	DecidedByAPI     = "api"     // a client, through the API
	DecidedByTimeout = "timeout" // the default decision, after its timeout
	DecidedByAgent   = "agent"   // the engine, e.g. when the turn was cancelled
	DecidedByWebhook = "webhook" // the VM's permission webhook
)

// PermissionOption is an answer a permission request offers, as ACP has
// it: Kind is allow_once, allow_always, reject_once or reject_always. Agents
// may add fields of their own, which the raw options of a Permission keep.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

// DecodePermissionOptions decodes the options of a permission request, as a
// Permission or a permission_request event carries them.
func DecodePermissionOptions(raw json.RawMessage) ([]PermissionOption, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var opts []PermissionOption
	if err := json.Unmarshal(raw, &opts); err != nil {
		return nil, fmt.Errorf("permission options: %w", err)
	}
	return opts, nil
}

// PermissionDecision is how a permission request was settled.
type PermissionDecision struct {
	// By is api, timeout or agent; KeyID names the API key that answered.
	By       string    `json:"by"`
	KeyID    string    `json:"keyId,omitempty"`
	OptionID string    `json:"optionId,omitempty"`
	Status   string    `json:"status"` // the engine's: accepted or not_pending
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}
