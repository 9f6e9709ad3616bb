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

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Agent is an agent a VM knows.
type Agent = gateway.Agent

// SessionState is the state of an agent session.
type SessionState = gateway.SessionState

// Session states. Closed and lost are final.
const (
	SessionIdle     = gateway.SessionIdle
	SessionRunning  = gateway.SessionRunning
	SessionWaiting  = gateway.SessionWaiting
	SessionUnloaded = gateway.SessionUnloaded
	SessionClosed   = gateway.SessionClosed
	SessionLost     = gateway.SessionLost
	// SessionDeleted is the state the final end event of a deleted
	// session's stream carries.
	SessionDeleted = gateway.SessionDeleted
)

// PermissionDefault is the decision taken for a permission request nobody
// answered in time: Decision ("reject" or "allow") after TimeoutSeconds
// (see its Timeout).
type PermissionDefault = gateway.PermissionDefault

// SessionSettings are a tenant's defaults for its agent sessions.
type SessionSettings = gateway.SessionSettings

// SessionSettingsUpdate changes the settings whose field is set;
// ClearPermissionDefault goes back to the gateway's default decision.
type SessionSettingsUpdate struct {
	// Retention is how long the record of a session whose VM ended is
	// kept, rounded up to whole days (0: until it is deleted).
	Retention              *time.Duration
	PermissionDefault      *PermissionDefault
	ClearPermissionDefault bool
}

// MarshalJSON encodes the SessionSettingsUpdate schema.
func (u SessionSettingsUpdate) MarshalJSON() ([]byte, error) {
	w, err := u.wire()
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

func (u *SessionSettingsUpdate) wire() (api.SessionSettingsUpdate, error) {
	var w api.SessionSettingsUpdate
	if u == nil {
		return w, nil
	}
	if u.Retention != nil {
		days := int(ceilUnit(*u.Retention, 24*time.Hour))
		w.RetentionDays = &days
	}
	switch {
	case u.ClearPermissionDefault:
		w.PermissionDefault = json.RawMessage("null")
	case u.PermissionDefault != nil:
		b, err := json.Marshal(u.PermissionDefault)
		if err != nil {
			return w, err
		}
		w.PermissionDefault = b
	}
	return w, nil
}

// The permission policies of OpenSessionRequest.PermissionPolicy.
const (
	// PolicyAsk leaves each request to the API (see AnswerPermission) or,
	// unanswered, to the PermissionDefault.
	PolicyAsk       = "ask"
	PolicyAllowAll  = "allow_all"
	PolicyRejectAll = "reject_all"
)

// OpenSessionRequest says which agent to start and how.
type OpenSessionRequest = api.OpenSessionRequest

// Session is an agent session.
type Session = api.Session

// PermissionOption is one answer a permission request offers.
type PermissionOption = gateway.PermissionOption

// PermissionOptions decodes the options of a permission request
// (Permission.Options, SessionEvent.Options).
func PermissionOptions(raw json.RawMessage) ([]PermissionOption, error) {
	return gateway.DecodePermissionOptions(raw)
}

// Permission is a permission request of a session's agent.
type Permission = gateway.Permission

// PermissionDecision says who settled a permission request, how and when.
type PermissionDecision = gateway.PermissionDecision

// PermissionAnswer is the outcome of AnswerPermission: "accepted", or
// "not_pending" with a reason.
type PermissionAnswer = gateway.PermissionAnswer

// PromptResult is the end of a turn.
type PromptResult struct {
	gateway.PromptResult
	// Replayed is set when the result was recorded under the idempotency
	// key by an earlier request.
	Replayed bool
}

// SessionConfig is an agent's configuration options.
type SessionConfig = api.SessionConfig

// SessionEvent is a durable session event.
type SessionEvent = gateway.SessionEventData

// EphemeralEvent is a streamed delta, not stored.
type EphemeralEvent = gateway.EphemeralEvent

// History is a page of durable session events.
type History struct {
	Events                      []SessionEvent
	HasMoreBefore, HasMoreAfter bool
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
type PromptRequest = api.PromptRequest

// TextPrompt is prompt content of one text block.
func TextPrompt(text string) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return b
}

// Prompt runs a turn and waits for its end.
func (s *SessionHandle) Prompt(ctx context.Context, req PromptRequest) (*PromptResult, error) {
	out, resp, err := call[gateway.PromptResult](ctx, s.c, http.MethodPost, s.path("prompt"), req, nil)
	if err != nil {
		return nil, err
	}
	return &PromptResult{PromptResult: *out, Replayed: replayed(resp)}, nil
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
	var out gateway.PromptResult
	if err := decodeJSONBody(resp, &out); err != nil {
		return nil, err
	}
	return &PromptResult{PromptResult: out, Replayed: replayed(resp)}, nil
}

// CancelResult is what Cancel did.
type CancelResult string

// Cancel results.
const (
	Cancelled      CancelResult = "cancelled"
	NoActivePrompt CancelResult = "no_active_prompt"
)

// Cancel cancels the running turn.
func (s *SessionHandle) Cancel(ctx context.Context) (CancelResult, error) {
	out, _, err := call[api.CancelResult](ctx, s.c, http.MethodPost, s.path("cancel"), nil, nil)
	if err != nil {
		return "", err
	}
	return CancelResult(out.Status), nil
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
		api.AnswerPermissionRequest{OptionID: optionID}, nil)
	return out, err
}

// Config returns the session's configuration options.
func (s *SessionHandle) Config(ctx context.Context) (*SessionConfig, error) {
	return get[SessionConfig](ctx, s.c, s.path("config"), nil)
}

// SetConfig sets one configuration option to value (any JSON).
func (s *SessionHandle) SetConfig(ctx context.Context, configID string, value any) (*SessionConfig, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("client: encode config value: %w", err)
	}
	out, _, err := call[SessionConfig](ctx, s.c, http.MethodPut, s.path("config", esc(configID)), api.SetConfigRequest{Value: raw}, nil)
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
	page, err := get[api.SessionHistory](ctx, s.c, s.path("history"), v)
	if err != nil {
		return nil, err
	}
	h := &History{Events: make([]SessionEvent, len(page.Events)), HasMoreBefore: page.HasMoreBefore, HasMoreAfter: page.HasMoreAfter}
	for i, raw := range page.Events {
		if err := json.Unmarshal(raw, &h.Events[i]); err != nil {
			return nil, fmt.Errorf("client: decode history event: %w", err)
		}
	}
	return h, nil
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
