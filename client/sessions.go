package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Agent is an agent a VM knows.
type Agent struct {
	ID        string `json:"id"`
	Installed bool   `json:"installed"`
}

// SessionState is the state of an agent session.
type SessionState string

// Session states. Closed and lost are final.
const (
	SessionIdle     SessionState = "idle"
	SessionRunning  SessionState = "running"
	SessionWaiting  SessionState = "waiting"
	SessionUnloaded SessionState = "unloaded"
	SessionClosed   SessionState = "closed"
	SessionLost     SessionState = "lost"
	// SessionDeleted is the state a session's final end event carries when
	// the session was deleted.
	SessionDeleted SessionState = "deleted"
)

// PermissionDefault is the decision taken for a permission request nobody
// answered in time: Decision ("reject" or "allow") after Timeout (rounded
// up to a second).
type PermissionDefault struct {
	Decision string
	Timeout  time.Duration
}

// wirePermissionDefault is the PermissionDefault schema.
type wirePermissionDefault struct {
	Decision       string `json:"decision"`
	TimeoutSeconds int64  `json:"timeoutSeconds"`
}

// MarshalJSON encodes the PermissionDefault schema.
func (d PermissionDefault) MarshalJSON() ([]byte, error) {
	return json.Marshal(wirePermissionDefault{Decision: d.Decision, TimeoutSeconds: ceilUnit(d.Timeout, time.Second)})
}

// UnmarshalJSON decodes the PermissionDefault schema.
func (d *PermissionDefault) UnmarshalJSON(b []byte) error {
	var w wirePermissionDefault
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*d = PermissionDefault{Decision: w.Decision, Timeout: time.Duration(w.TimeoutSeconds) * time.Second}
	return nil
}

// day is the unit of a session's retention.
const day = 24 * time.Hour

// SessionSettings are a tenant's defaults for its agent sessions.
type SessionSettings struct {
	// Retention is how long a session's record is kept after its VM ended,
	// in whole days (0: forever).
	Retention         time.Duration
	PermissionDefault *PermissionDefault
}

// wireSessionSettings is the SessionSettings schema.
type wireSessionSettings struct {
	RetentionDays     int                `json:"retentionDays"`
	PermissionDefault *PermissionDefault `json:"permissionDefault,omitempty"`
}

// UnmarshalJSON decodes the SessionSettings schema.
func (s *SessionSettings) UnmarshalJSON(b []byte) error {
	var w wireSessionSettings
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = SessionSettings{Retention: time.Duration(w.RetentionDays) * day, PermissionDefault: w.PermissionDefault}
	return nil
}

// SessionSettingsUpdate changes the settings whose field is set;
// ClearPermissionDefault goes back to the gateway's default decision.
type SessionSettingsUpdate struct {
	// Retention is rounded up to whole days.
	Retention              *time.Duration
	PermissionDefault      *PermissionDefault
	ClearPermissionDefault bool
}

// MarshalJSON writes permissionDefault null when it is to be cleared.
func (u SessionSettingsUpdate) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if u.Retention != nil {
		m["retentionDays"] = ceilUnit(*u.Retention, day)
	}
	switch {
	case u.ClearPermissionDefault:
		m["permissionDefault"] = nil
	case u.PermissionDefault != nil:
		m["permissionDefault"] = u.PermissionDefault
	}
	return json.Marshal(m)
}

// PermissionPolicy says how a session answers its agent's permission
// requests.
type PermissionPolicy string

// Permission policies.
const (
	// PolicyAsk leaves each request to the API (see AnswerPermission) or,
	// unanswered, to the PermissionDefault.
	PolicyAsk       PermissionPolicy = "ask"
	PolicyAllowAll  PermissionPolicy = "allow_all"
	PolicyRejectAll PermissionPolicy = "reject_all"
)

// OpenSessionRequest is the body of POST /v1/vms/{vm}/sessions.
type OpenSessionRequest struct {
	SessionID              string             `json:"sessionId,omitempty"`
	Agent                  string             `json:"agent"`
	Cwd                    string             `json:"cwd,omitempty"`
	Env                    map[string]string  `json:"env,omitempty"`
	AdditionalDirectories  []string           `json:"additionalDirectories,omitempty"`
	MCPServers             json.RawMessage    `json:"mcpServers,omitempty"`
	PermissionPolicy       PermissionPolicy   `json:"permissionPolicy,omitempty"`
	PermissionDefault      *PermissionDefault `json:"permissionDefault,omitempty"`
	AdditionalInstructions string             `json:"additionalInstructions,omitempty"`
}

// Session is an agent session.
type Session struct {
	ID                    string             `json:"id"`
	VMID                  string             `json:"vmId"`
	Agent                 string             `json:"agent"`
	Cwd                   string             `json:"cwd"`
	AdditionalDirectories []string           `json:"additionalDirectories"`
	PermissionPolicy      PermissionPolicy   `json:"permissionPolicy"`
	PermissionDefault     *PermissionDefault `json:"permissionDefault"`
	State                 SessionState       `json:"state"`
	PendingPermissions    []Permission       `json:"pendingPermissions"`
	LatestSequence        uint64             `json:"latestSequence"`
	CreatedAt             time.Time          `json:"createdAt"`
	UpdatedAt             time.Time          `json:"updatedAt"`
}

// PermissionOption is one answer a permission request offers.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Kind     string `json:"kind"` // allow_once, allow_always, reject_once, ...
	Name     string `json:"name"`
}

// Permission is a permission request of a session's agent.
type Permission struct {
	RequestID string              `json:"requestId"`
	Options   []PermissionOption  `json:"options"`
	ToolCall  json.RawMessage     `json:"toolCall"`
	AskedAt   time.Time           `json:"askedAt"`
	Status    string              `json:"status"` // pending, answered, dropped
	Decision  *PermissionDecision `json:"decision"`
}

// Option returns the id of the first option of kind, or "".
func (p Permission) Option(kind string) string {
	for _, o := range p.Options {
		if o.Kind == kind {
			return o.OptionID
		}
	}
	return ""
}

// PermissionDecision says who settled a permission request, how and when.
type PermissionDecision struct {
	By       string    `json:"by"` // api, timeout, agent
	KeyID    string    `json:"keyId,omitempty"`
	OptionID string    `json:"optionId,omitempty"`
	Status   string    `json:"status"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// PermissionAnswer is the outcome of AnswerPermission: "accepted", or
// "not_pending" with a reason.
type PermissionAnswer struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// PromptResult is the end of a turn.
type PromptResult struct {
	StopReason string          `json:"stopReason"`
	Message    json.RawMessage `json:"message"`
	// Replayed is true when the result was recorded under the idempotency
	// key by an earlier request.
	Replayed bool `json:"-"`
}

// SessionConfig is an agent's configuration options.
type SessionConfig struct {
	Revision uint64          `json:"revision"`
	Options  json.RawMessage `json:"options"`
}

// SessionEvent is a durable session event (the data of a "durable" SSE
// event, or an entry of History).
type SessionEvent struct {
	Sequence  uint64              `json:"sequence"`
	Timestamp time.Time           `json:"timestamp"`
	Type      string              `json:"type"`
	Update    json.RawMessage     `json:"update,omitempty"`
	RequestID string              `json:"requestId,omitempty"`
	Options   []PermissionOption  `json:"options,omitempty"`
	ToolCall  json.RawMessage     `json:"toolCall,omitempty"`
	Status    string              `json:"status,omitempty"`
	Reason    string              `json:"reason,omitempty"`
	Response  json.RawMessage     `json:"response,omitempty"`
	Decision  *PermissionDecision `json:"decision,omitempty"`
}

// EphemeralEvent is a streamed delta (the data of an "ephemeral" event).
type EphemeralEvent struct {
	AfterSequence uint64          `json:"afterSequence"`
	Type          string          `json:"type"`
	Update        json.RawMessage `json:"update"`
}

// History is a page of durable session events.
type History struct {
	Events        []SessionEvent `json:"events"`
	HasMoreBefore bool           `json:"hasMoreBefore"`
	HasMoreAfter  bool           `json:"hasMoreAfter"`
}

// HistoryQuery selects events by sequence (0: unbounded).
type HistoryQuery struct {
	After, Before uint64
	Limit         int
}

func sessionPath(vm, session string, rest ...string) string {
	return vmPath(vm, append([]string{"sessions", esc(session)}, rest...)...)
}

// Agents lists the agents the VM knows.
func (v *VMHandle) Agents(ctx context.Context) ([]Agent, error) {
	l, err := get[List[Agent]](ctx, v.c, vmPath(v.id, "agents"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// OpenSession starts an agent in the VM and opens a session with it.
func (v *VMHandle) OpenSession(ctx context.Context, req OpenSessionRequest) (*Session, error) {
	out, _, err := call[Session](ctx, v.c, http.MethodPost, vmPath(v.id, "sessions"), req, nil)
	return out, err
}

// ListSessions returns one page of the VM's sessions.
func (v *VMHandle) ListSessions(ctx context.Context, opts ListOptions) (*List[Session], error) {
	return get[List[Session]](ctx, v.c, vmPath(v.id, "sessions"), opts.query())
}

// Sessions iterates over all of the VM's sessions, page by page.
func (v *VMHandle) Sessions(ctx context.Context) iter.Seq2[Session, error] {
	return pages(ctx, ListOptions{}, v.ListSessions)
}

// Session returns the handle of one of the VM's sessions. It makes no call.
func (v *VMHandle) Session(id string) *SessionHandle {
	return &SessionHandle{c: v.c, vm: v.id, id: id}
}

// SessionHandle makes the calls about one agent session. It is safe for
// concurrent use.
type SessionHandle struct {
	c      *Client
	vm, id string
}

// ID returns the session's id.
func (s *SessionHandle) ID() string { return s.id }

func (s *SessionHandle) path(rest ...string) string { return sessionPath(s.vm, s.id, rest...) }

// Get returns the session with its current state.
func (s *SessionHandle) Get(ctx context.Context) (*Session, error) {
	return get[Session](ctx, s.c, s.path(), nil)
}

// Delete deletes the session and its history.
func (s *SessionHandle) Delete(ctx context.Context) error {
	_, err := s.c.do(ctx, http.MethodDelete, s.path(), nil, nil, nil, nil)
	return err
}

// Unload stops the session's agent; a later prompt starts it again.
func (s *SessionHandle) Unload(ctx context.Context) (*Session, error) {
	out, _, err := call[Session](ctx, s.c, http.MethodPost, s.path("unload"), nil, nil)
	return out, err
}

// PromptRequest is a prompt: Content is a JSON array of ACP content blocks
// (see TextPrompt). With an IdempotencyKey, a retry of the same prompt
// gets the recorded result of the first instead of a second turn.
type PromptRequest struct {
	Content        json.RawMessage `json:"content"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
}

// TextPrompt is prompt content of one text block.
func TextPrompt(text string) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return b
}

// Prompt runs a turn and waits for its end.
func (s *SessionHandle) Prompt(ctx context.Context, req PromptRequest) (*PromptResult, error) {
	out, resp, err := call[PromptResult](ctx, s.c, http.MethodPost, s.path("prompt"), req, nil)
	if err != nil {
		return nil, err
	}
	out.Replayed = replayed(resp)
	return out, nil
}

// PromptAsync starts a turn and returns at once (Prefer: respond-async),
// with a nil result; follow the turn with the session's events. A retry
// with the idempotency key of a finished turn gets its recorded result
// instead.
func (s *SessionHandle) PromptAsync(ctx context.Context, req PromptRequest) (*PromptResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode prompt: %w", err)
	}
	resp, err := s.c.send(ctx, request{method: http.MethodPost, path: s.path("prompt"), body: bytes.NewReader(b),
		ctype: "application/json", accept: "application/json", headers: http.Header{"Prefer": {"respond-async"}}})
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		return nil, nil
	}
	var out PromptResult
	if err := decodeJSONBody(resp, &out); err != nil {
		return nil, err
	}
	out.Replayed = replayed(resp)
	return &out, nil
}

// CancelResult is what Cancel did.
type CancelResult string

// Cancel results.
const (
	Cancelled      CancelResult = "cancelled"
	NoActivePrompt CancelResult = "no_active_prompt"
)

// wireCancelResult is the CancelResult schema.
type wireCancelResult struct {
	Status CancelResult `json:"status"`
}

// Cancel cancels the running turn.
func (s *SessionHandle) Cancel(ctx context.Context) (CancelResult, error) {
	out, _, err := call[wireCancelResult](ctx, s.c, http.MethodPost, s.path("cancel"), nil, nil)
	if err != nil {
		return "", err
	}
	return out.Status, nil
}

// Permissions lists the session's pending permission requests.
func (s *SessionHandle) Permissions(ctx context.Context) ([]Permission, error) {
	l, err := get[List[Permission]](ctx, s.c, s.path("permissions"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// AnswerPermission answers a pending permission request with one of its
// options.
func (s *SessionHandle) AnswerPermission(ctx context.Context, requestID, optionID string) (*PermissionAnswer, error) {
	out, _, err := call[PermissionAnswer](ctx, s.c, http.MethodPost, s.path("permissions", esc(requestID)),
		map[string]string{"optionId": optionID}, nil)
	return out, err
}

// Config returns the session's configuration options.
func (s *SessionHandle) Config(ctx context.Context) (*SessionConfig, error) {
	return get[SessionConfig](ctx, s.c, s.path("config"), nil)
}

// SetConfig sets one configuration option to value (any JSON).
func (s *SessionHandle) SetConfig(ctx context.Context, configID string, value any) (*SessionConfig, error) {
	out, _, err := call[SessionConfig](ctx, s.c, http.MethodPut, s.path("config", esc(configID)), map[string]any{"value": value}, nil)
	return out, err
}

// Capabilities returns the agent's ACP capabilities (JSON).
func (s *SessionHandle) Capabilities(ctx context.Context) (json.RawMessage, error) {
	out, err := get[json.RawMessage](ctx, s.c, s.path("capabilities"), nil)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// AgentInfo returns the agent's description of itself (JSON).
func (s *SessionHandle) AgentInfo(ctx context.Context) (json.RawMessage, error) {
	out, err := get[json.RawMessage](ctx, s.c, s.path("agent-info"), nil)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// History returns one page of the session's durable events.
func (s *SessionHandle) History(ctx context.Context, q HistoryQuery) (*History, error) {
	v := url.Values{}
	if q.After > 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	if q.Before > 0 {
		v.Set("before", strconv.FormatUint(q.Before, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return get[History](ctx, s.c, s.path("history"), v)
}

// Events opens the session's event stream: *SessionEvent (durable),
// *EphemeralEvent, *AgentStderr, *AgentExit and *Overflow events, then a
// final *SessionEnd.
func (s *SessionHandle) Events(ctx context.Context, opts StreamOptions) (*Stream, error) {
	return s.c.openStream(ctx, sessionStream, s.path("events"), opts)
}

// Follow iterates over the session's events (see Events), reconnecting
// with Last-Event-ID after a dropped connection so that every durable event
// is seen exactly once, in order. It ends after the final *SessionEnd; an
// error (a final error event as its *Error, or the last failure once the
// RetryPolicy gives up) is yielded last.
func (s *SessionHandle) Follow(ctx context.Context) iter.Seq2[Event, error] {
	return s.c.follow(ctx, func(ctx context.Context, opts StreamOptions) (*Stream, error) { return s.Events(ctx, opts) }, false)
}
