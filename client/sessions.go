package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// Session states.
const (
	SessionIdle     = "idle"
	SessionRunning  = "running"
	SessionWaiting  = "waiting"
	SessionUnloaded = "unloaded"
	SessionClosed   = "closed"
	SessionLost     = "lost"
)

// PermissionDefault is the decision taken for a permission request nobody
// answered in time: "reject" or "allow" after TimeoutSeconds.
type PermissionDefault struct {
	Decision       string `json:"decision"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
}

// SessionSettings are a tenant's defaults for its agent sessions.
type SessionSettings struct {
	RetentionDays     int                `json:"retentionDays"`
	PermissionDefault *PermissionDefault `json:"permissionDefault,omitempty"`
}

// SessionSettingsUpdate changes the settings whose field is set;
// ClearPermissionDefault goes back to the gateway's default decision.
type SessionSettingsUpdate struct {
	RetentionDays          *int
	PermissionDefault      *PermissionDefault
	ClearPermissionDefault bool
}

// MarshalJSON writes permissionDefault null when it is to be cleared.
func (u SessionSettingsUpdate) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if u.RetentionDays != nil {
		m["retentionDays"] = *u.RetentionDays
	}
	switch {
	case u.ClearPermissionDefault:
		m["permissionDefault"] = nil
	case u.PermissionDefault != nil:
		m["permissionDefault"] = u.PermissionDefault
	}
	return json.Marshal(m)
}

// OpenSessionRequest is the body of POST /v1/vms/{vm}/sessions.
type OpenSessionRequest struct {
	SessionID              string             `json:"sessionId,omitempty"`
	Agent                  string             `json:"agent"`
	Cwd                    string             `json:"cwd,omitempty"`
	Env                    map[string]string  `json:"env,omitempty"`
	AdditionalDirectories  []string           `json:"additionalDirectories,omitempty"`
	MCPServers             json.RawMessage    `json:"mcpServers,omitempty"`
	PermissionPolicy       string             `json:"permissionPolicy,omitempty"` // ask, allow_all, reject_all
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
	PermissionPolicy      string             `json:"permissionPolicy"`
	PermissionDefault     *PermissionDefault `json:"permissionDefault"`
	State                 string             `json:"state"`
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

// Session SSE event names.
const (
	EventDurable     = "durable"
	EventEphemeral   = "ephemeral"
	EventAgentStderr = "agent_stderr"
	EventAgentExit   = "agent_exit"
	EventOverflow    = "overflow"
)

// SessionEvent decodes a "durable" event.
func (e Event) SessionEvent() (SessionEvent, error) {
	var v SessionEvent
	if err := e.want(EventDurable); err != nil {
		return v, err
	}
	return v, e.Decode(&v)
}

// EphemeralEvent decodes an "ephemeral" event.
func (e Event) EphemeralEvent() (EphemeralEvent, error) {
	var v EphemeralEvent
	if err := e.want(EventEphemeral); err != nil {
		return v, err
	}
	return v, e.Decode(&v)
}

func sessionPath(vm, session string, rest ...string) string {
	return vmPath(vm, append([]string{"sessions", esc(session)}, rest...)...)
}

// Agents lists the agents a VM knows.
func (c *Client) Agents(ctx context.Context, vm string) (*List[Agent], error) {
	var out List[Agent]
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "agents"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// OpenSession starts an agent in a VM and opens a session with it.
func (c *Client) OpenSession(ctx context.Context, vm string, req OpenSessionRequest) (*Session, error) {
	var out Session
	if _, err := c.do(ctx, http.MethodPost, vmPath(vm, "sessions"), nil, req, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSession returns a session with its current state.
func (c *Client) GetSession(ctx context.Context, vm, session string) (*Session, error) {
	var out Session
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSessions lists a VM's sessions, one page at a time.
func (c *Client) ListSessions(ctx context.Context, vm string, opts ListOptions) (*List[Session], error) {
	q := url.Values{}
	setPage(q, opts.Cursor, opts.Limit)
	var out List[Session]
	if _, err := c.do(ctx, http.MethodGet, vmPath(vm, "sessions"), q, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSession deletes a session and its history.
func (c *Client) DeleteSession(ctx context.Context, vm, session string) error {
	_, err := c.do(ctx, http.MethodDelete, sessionPath(vm, session), nil, nil, nil, nil)
	return err
}

// UnloadSession stops a session's agent; a later prompt starts it again.
func (c *Client) UnloadSession(ctx context.Context, vm, session string) (*Session, error) {
	var out Session
	if _, err := c.do(ctx, http.MethodPost, sessionPath(vm, session, "unload"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// PromptRequest is the body of a prompt: Content is a JSON array of ACP
// content blocks (see TextPrompt).
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
func (c *Client) Prompt(ctx context.Context, vm, session string, req PromptRequest) (*PromptResult, error) {
	var out PromptResult
	resp, err := c.do(ctx, http.MethodPost, sessionPath(vm, session, "prompt"), nil, req, &out, nil)
	if err != nil {
		return nil, err
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// PromptAsync starts a turn and returns at once (Prefer: respond-async);
// follow the turn with the session's events. A retry with the idempotency
// key of a finished turn gets its recorded result instead (non-nil).
func (c *Client) PromptAsync(ctx context.Context, vm, session string, req PromptRequest) (*PromptResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode prompt: %w", err)
	}
	resp, err := c.send(ctx, request{method: http.MethodPost, path: sessionPath(vm, session, "prompt"), body: bytes.NewReader(b),
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
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// CancelPrompt cancels the running turn: "cancelled" or "no_active_prompt".
func (c *Client) CancelPrompt(ctx context.Context, vm, session string) (string, error) {
	var out struct {
		Status string `json:"status"`
	}
	if _, err := c.do(ctx, http.MethodPost, sessionPath(vm, session, "cancel"), nil, nil, &out, nil); err != nil {
		return "", err
	}
	return out.Status, nil
}

// Permissions lists a session's pending permission requests.
func (c *Client) Permissions(ctx context.Context, vm, session string) (*List[Permission], error) {
	var out List[Permission]
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session, "permissions"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// AnswerPermission answers a pending permission request with one of its
// options.
func (c *Client) AnswerPermission(ctx context.Context, vm, session, requestID, optionID string) (*PermissionAnswer, error) {
	var out PermissionAnswer
	body := map[string]string{"optionId": optionID}
	if _, err := c.do(ctx, http.MethodPost, sessionPath(vm, session, "permissions", esc(requestID)), nil, body, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionConfig returns a session's configuration options.
func (c *Client) SessionConfig(ctx context.Context, vm, session string) (*SessionConfig, error) {
	var out SessionConfig
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session, "config"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetSessionConfig sets one configuration option to value (any JSON).
func (c *Client) SetSessionConfig(ctx context.Context, vm, session, configID string, value any) (*SessionConfig, error) {
	var out SessionConfig
	body := map[string]any{"value": value}
	if _, err := c.do(ctx, http.MethodPut, sessionPath(vm, session, "config", esc(configID)), nil, body, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionCapabilities returns the agent's ACP capabilities (JSON).
func (c *Client) SessionCapabilities(ctx context.Context, vm, session string) (json.RawMessage, error) {
	var out json.RawMessage
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session, "capabilities"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// SessionAgentInfo returns the agent's description of itself (JSON).
func (c *Client) SessionAgentInfo(ctx context.Context, vm, session string) (json.RawMessage, error) {
	var out json.RawMessage
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session, "agent-info"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// SessionHistory pages a session's durable events.
func (c *Client) SessionHistory(ctx context.Context, vm, session string, q HistoryQuery) (*History, error) {
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
	var out History
	if _, err := c.do(ctx, http.MethodGet, sessionPath(vm, session, "history"), v, nil, &out, nil); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionEvents opens a session's event stream.
func (c *Client) SessionEvents(ctx context.Context, vm, session string, opts StreamOptions) (*Stream, error) {
	return c.openStream(ctx, http.MethodGet, sessionPath(vm, session, "events"), nil, opts)
}

// FollowSessionEvents streams a session's events to fn, reconnecting with
// Last-Event-ID after a dropped connection so that every durable event is
// seen exactly once, in order. It returns nil after the session's "end"
// event (its VM ended or it was deleted), the *Error of an "error" event,
// fn's error, ctx's error, or the last error once the RetryPolicy gives up.
func (c *Client) FollowSessionEvents(ctx context.Context, vm, session string, fn func(Event) error) error {
	return c.follow(ctx, func(ctx context.Context, last string) (*Stream, error) {
		return c.SessionEvents(ctx, vm, session, StreamOptions{LastEventID: last, IdleTimeout: c.retry.IdleTimeout})
	}, fn)
}
