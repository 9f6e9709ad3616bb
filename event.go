package gateway

import (
	"encoding/json"
	"slices"
	"time"
)

// EventType names an event a webhook subscription receives.
type EventType string

// The events webhooks receive.
const (
	// EventVMState is every change of a VM's state, hibernation included.
	EventVMState EventType = "vm.state"
	// EventProcessExit is the end of a spawned process.
	EventProcessExit EventType = "process.exit"
	// EventExecDone is the end of an exec made with an Idempotency-Key.
	EventExecDone EventType = "exec.done"
	// EventSessionTurnEnd is the end of an agent session's turn.
	EventSessionTurnEnd EventType = "session.turn_end"
	// EventSessionPermissionRequested is an agent's request for a
	// permission, waiting for an answer.
	EventSessionPermissionRequested EventType = "session.permission_requested"
	// EventScheduleRun is a finished run of a schedule.
	EventScheduleRun EventType = "schedule.run"
	// EventSnapshotReady is a snapshot stored and ready to use.
	EventSnapshotReady EventType = "snapshot.ready"
	// EventWebhookDisabled is a subscription the gateway disabled after
	// its deliveries failed for the whole retry window.
	EventWebhookDisabled EventType = "webhook.disabled"
)

// EventTypes are the events a subscription may name ("*" names them all).
var EventTypes = []EventType{EventVMState, EventProcessExit, EventExecDone, EventSessionTurnEnd,
	EventSessionPermissionRequested, EventScheduleRun, EventSnapshotReady, EventWebhookDisabled}

// KnownEventType reports whether t is an event webhooks receive.
func KnownEventType(t EventType) bool { return slices.Contains(EventTypes, t) }

// Event is something that happened to a tenant, told to the webhooks that
// subscribed to it: Data is the event's fields (with "vmId" for a VM's
// event), as JSON.
type Event struct {
	Type     EventType
	TenantID string
	// VMID is the VM the event is of (empty for none); a VM's events are
	// delivered in order.
	VMID string
	Time time.Time
	Data json.RawMessage
}

// WebhookState is whether a subscription receives events.
type WebhookState string

// The states of a subscription.
const (
	WebhookActive   WebhookState = "active"
	WebhookDisabled WebhookState = "disabled"
)

// Webhook is a tenant's subscription: the events it names (of one VM, or
// of all) are delivered to URL, signed with the tenant's webhook secret.
type Webhook struct {
	ID          string
	TenantID    string
	URL         string
	Events      []EventType // or "*"
	VMID        string      // empty for every VM
	Description string
	State       WebhookState
	// DisabledReason says why the gateway disabled it.
	DisabledReason string
	// FailingSince is the first failed attempt since the last success.
	FailingSince time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Wants reports whether the subscription receives ev.
func (w Webhook) Wants(ev Event) bool {
	if w.State != WebhookActive || (w.VMID != "" && w.VMID != ev.VMID) {
		return false
	}
	return slices.Contains(w.Events, "*") || slices.Contains(w.Events, ev.Type)
}

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// The statuses of a delivery.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Delivery is one event on its way to one subscription. Every attempt
// sends the same body, made of its fields, with its ID as the
// Agentos-Webhook-Id header.
type Delivery struct {
	ID             string
	SubscriptionID string
	TenantID       string
	VMID           string
	Type           EventType
	// Sequence numbers the subscription's deliveries from 1.
	Sequence      int64
	Data          json.RawMessage // the event's fields
	URL           string          // the subscription's, when claimed for sending
	Status        DeliveryStatus
	Attempts      int
	LastStatus    int    // the receiver's last HTTP status (0: none)
	LastError     string // why the last attempt failed
	CreatedAt     time.Time
	WindowStart   time.Time // retries stop the retry window after it
	NextAttemptAt time.Time
	DoneAt        time.Time
	// TraceParent is the W3C trace context of the change the event tells
	// of (empty: none): every attempt is a span of that trace.
	TraceParent string
}

// DeliveryFilter selects a subscription's deliveries: of a status (empty:
// all), created at or after a time, a page at a time.
type DeliveryFilter struct {
	Status DeliveryStatus
	After  time.Time
	Cursor string
	Limit  int
}

// NewEvent is an event of type t with data, encoded, as its fields.
func NewEvent(t EventType, tenantID, vmID string, at time.Time, data any) Event {
	b, err := json.Marshal(data)
	if err != nil {
		// The data types below always encode; a failure is a bug here.
		panic("gateway: event data: " + err.Error())
	}
	return Event{Type: t, TenantID: tenantID, VMID: vmID, Time: at, Data: b}
}

// The data of each event, as its webhooks receive it.
type (
	// VMStateData is the data of vm.state.
	VMStateData struct {
		VMID   string  `json:"vmId"`
		State  VMState `json:"state"`
		Reason string  `json:"reason,omitempty"`
	}
	// ProcessExitData is the data of process.exit: Signal names the
	// signal that ended the process, if one did.
	ProcessExitData struct {
		VMID     string `json:"vmId"`
		Pid      uint32 `json:"pid"`
		Command  string `json:"command"`
		ExitCode int    `json:"exitCode"`
		Signal   Signal `json:"signal,omitempty"`
	}
	// ExecDoneData is the data of exec.done: the exec's result, or the
	// problem it ended with, as a retry with its key would replay them
	// (Result is left out, with OutputOmitted, past 64 KiB of output:
	// GET .../exec/{key} has it).
	ExecDoneData struct {
		VMID           string          `json:"vmId"`
		IdempotencyKey string          `json:"idempotencyKey"`
		ExitCode       *int            `json:"exitCode,omitempty"`
		Signal         Signal          `json:"signal,omitempty"`
		Result         json.RawMessage `json:"result,omitempty"`
		OutputOmitted  bool            `json:"outputOmitted,omitempty"`
		Error          *EventProblem   `json:"error,omitempty"`
	}
	// EventProblem is the problem an operation ended with.
	EventProblem struct {
		Code   Code   `json:"code"`
		Detail string `json:"detail"`
	}
	// SessionTurnEndData is the data of session.turn_end.
	SessionTurnEndData struct {
		VMID       string `json:"vmId"`
		SessionID  string `json:"sessionId"`
		StopReason string `json:"stopReason,omitempty"`
		Error      string `json:"error,omitempty"`
	}
	// SessionPermissionRequestedData is the data of
	// session.permission_requested: what the agent asks to do.
	SessionPermissionRequestedData struct {
		VMID      string          `json:"vmId"`
		SessionID string          `json:"sessionId"`
		RequestID string          `json:"requestId"`
		ToolCall  json.RawMessage `json:"toolCall,omitempty"`
	}
	// ScheduleRunData is the data of schedule.run.
	ScheduleRunData struct {
		VMID       string `json:"vmId"`
		ScheduleID string `json:"scheduleId"`
		RunID      string `json:"runId"`
		Outcome    string `json:"outcome"`
		ExitCode   *int   `json:"exitCode,omitempty"`
	}
	// SnapshotReadyData is the data of snapshot.ready.
	SnapshotReadyData struct {
		VMID       string `json:"vmId,omitempty"`
		SnapshotID string `json:"snapshotId"`
		Bytes      int64  `json:"bytes"`
	}
	// WebhookDisabledData is the data of webhook.disabled.
	WebhookDisabledData struct {
		WebhookID string `json:"webhookId"`
		URL       string `json:"url"`
		Reason    string `json:"reason"`
	}
)

// WebhookBody is the body of every event delivery: the event's name, the
// delivery (the same at every attempt), its place in its subscription's
// sequence, and the event's data.
type WebhookBody struct {
	Type           EventType       `json:"type"`
	DeliveryID     string          `json:"deliveryId"`
	SubscriptionID string          `json:"subscriptionId"`
	Sequence       int64           `json:"sequence"`
	CreatedAt      time.Time       `json:"createdAt"`
	TenantID       string          `json:"tenantId"`
	Data           json.RawMessage `json:"data"`
}

// Body is the body every attempt at d sends.
func (d Delivery) Body() ([]byte, error) {
	return json.Marshal(WebhookBody{Type: d.Type, DeliveryID: d.ID, SubscriptionID: d.SubscriptionID, Sequence: d.Sequence,
		CreatedAt: d.CreatedAt.UTC(), TenantID: d.TenantID, Data: d.Data})
}
