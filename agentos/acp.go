package agentos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// AgentEntry is an ACP agent a VM can run.
type AgentEntry struct {
	ID                string `json:"id"`
	Installed         bool   `json:"installed"`
	AdapterEntrypoint string `json:"adapterEntrypoint"`
}

// SessionEvent is an event of an ACP session. Durable events have a Sequence
// (per session, from 1, no gaps) and are kept by the sidecar; ephemeral ones
// (streamed deltas) have AfterSequence, the last durable sequence before them.
// Its fields keep the engine's words: Kind says which lane the event came by,
// and Type, of a durable event, what it records.
type SessionEvent struct {
	Kind          string          `json:"kind"` // "durable", "ephemeral", "notification", "agent_stderr", "agent_exit"
	SessionID     string          `json:"sessionId"`
	Sequence      uint64          `json:"sequence,omitempty"`
	AfterSequence uint64          `json:"afterSequence,omitempty"`
	Timestamp     string          `json:"timestamp,omitempty"`
	Type          string          `json:"type,omitempty"` // durable: "session_update", "permission_request", "permission_response"
	Update        json.RawMessage `json:"update,omitempty"`
	RequestID     string          `json:"requestId,omitempty"`
	Request       json.RawMessage `json:"request,omitempty"`
	Response      json.RawMessage `json:"response,omitempty"`
	Status        string          `json:"status,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Chunk         []byte          `json:"chunk,omitempty"`
	AgentType     string          `json:"agentType,omitempty"`
	ProcessID     string          `json:"processId,omitempty"`
	ExitCode      *int32          `json:"exitCode,omitempty"`
	Restart       string          `json:"restart,omitempty"`
}

// OpenSessionOptions configure a new ACP session.
type OpenSessionOptions struct {
	// SessionID is chosen by the caller; empty means a random one.
	SessionID              string
	Agent                  string
	Cwd                    string
	Env                    map[string]string
	AdditionalDirectories  []string
	MCPServers             json.RawMessage
	PermissionPolicy       string // "ask", "allow_all" (default), "reject_all"
	SkipOSInstructions     bool
	AdditionalInstructions string
	// EventBuffer bounds each subscription of the session (default 1024).
	EventBuffer int
}

// Session is an ACP agent session inside a VM.
type Session struct {
	vm     *VM
	id     string
	events hub[SessionEvent]
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Subscribe returns a bounded feed of the session's live events. Subscribe
// before prompting: live events are not replayed (History is).
func (s *Session) Subscribe(buffer int) *Subscription[SessionEvent] {
	return s.events.subscribe(buffer)
}

func (s *Session) end(err error) { s.events.close(err) }

// SubscribeACP returns a feed of every ACP event of the VM, whatever the
// session, e.g. to persist durable events.
func (vm *VM) SubscribeACP(buffer int) *Subscription[SessionEvent] {
	return vm.acpEvents.subscribe(buffer)
}

func (vm *VM) acpCall(ctx context.Context, req protocol.ACPRequest) (protocol.ACPResponse, error) {
	payload, err := protocol.MarshalACPRequest(req)
	if err != nil {
		return nil, fmt.Errorf("agentos: encode %s: %w", payloadName(req), err)
	}
	resp, err := vm.call(ctx, protocol.ExtEnvelope{Namespace: protocol.ACPNamespace, Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("agentos: acp %s: %w", payloadName(req), err)
	}
	env, ok := resp.(protocol.ExtEnvelope)
	if !ok || env.Namespace != protocol.ACPNamespace {
		return nil, unexpected(payloadName(req), resp)
	}
	r, err := protocol.UnmarshalACPResponse(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: acp response: %w", ErrProtocol, err)
	}
	if e, ok := r.(protocol.ACPErrorResponse); ok {
		return nil, &ACPError{Code: e.Code, Message: e.Message}
	}
	return r, nil
}

// acpExpect is acpCall with the expected response type checked.
func acpExpect[T protocol.ACPResponse](ctx context.Context, vm *VM, req protocol.ACPRequest) (T, error) {
	var zero T
	r, err := vm.acpCall(ctx, req)
	if err != nil {
		return zero, err
	}
	t, ok := r.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %s answered with %T", ErrProtocol, payloadName(req), r)
	}
	return t, nil
}

// ListAgents lists the ACP agents the VM knows.
func (vm *VM) ListAgents(ctx context.Context) ([]AgentEntry, error) {
	r, err := acpExpect[protocol.ACPListAgentsResponse](ctx, vm, protocol.ACPListAgentsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]AgentEntry, len(r.Agents))
	for i, a := range r.Agents {
		out[i] = AgentEntry{ID: a.ID, Installed: a.Installed, AdapterEntrypoint: a.AdapterEntrypoint}
	}
	return out, nil
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

func optJSON(v any) (*string, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// OpenSession starts an agent in the VM and opens a session with it. The
// session is registered before the request goes out, so no event of it is
// missed.
func (vm *VM) OpenSession(ctx context.Context, o OpenSessionOptions) (*Session, error) {
	if o.Agent == "" {
		return nil, fmt.Errorf("%w: agent is required", ErrInvalidArgument)
	}
	if o.SessionID == "" {
		o.SessionID = newSessionID()
	}
	req := protocol.ACPOpenSessionRequest{
		SessionID:              &o.SessionID,
		Agent:                  o.Agent,
		Cwd:                    optString(o.Cwd),
		PermissionPolicy:       optString(o.PermissionPolicy),
		AdditionalInstructions: optString(o.AdditionalInstructions),
	}
	var err error
	if len(o.AdditionalDirectories) > 0 {
		if req.AdditionalDirectories, err = optJSON(o.AdditionalDirectories); err != nil {
			return nil, err
		}
	}
	if len(o.Env) > 0 {
		if req.Env, err = optJSON(o.Env); err != nil {
			return nil, err
		}
	}
	if len(o.MCPServers) > 0 {
		s := string(o.MCPServers)
		req.MCPServers = &s
	}
	if o.SkipOSInstructions {
		t := true
		req.SkipOSInstructions = &t
	}
	vm.mu.Lock()
	_, known := vm.sessions[o.SessionID]
	vm.mu.Unlock()
	s := vm.session(o.SessionID)
	if _, err := acpExpect[protocol.ACPOpenSessionResponse](ctx, vm, req); err != nil {
		if !known {
			// Do not keep a handle per failed open (each would also be
			// unloaded at dispose).
			vm.mu.Lock()
			if vm.sessions[o.SessionID] == s {
				delete(vm.sessions, o.SessionID)
			}
			vm.mu.Unlock()
			s.end(err)
		}
		return nil, err
	}
	return s, nil
}

// Session returns a handle for a session id known to the VM's database, for
// example one opened earlier and unloaded.
func (vm *VM) Session(id string) *Session { return vm.session(id) }

func (vm *VM) session(id string) *Session {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if s, ok := vm.sessions[id]; ok {
		return s
	}
	s := &Session{vm: vm, id: id}
	if vm.state == VMLost || vm.state == VMDisposed {
		s.end(vm.stateErr)
	}
	vm.sessions[id] = s
	vm.guestRan()
	return s
}

// PromptResult is the end of a prompt turn.
type PromptResult struct {
	StopReason string          `json:"stopReason"`
	Message    json.RawMessage `json:"message"`
}

// Prompt sends content (a JSON array of ACP content blocks) and waits for the
// end of the turn. Permission requests raised meanwhile arrive as events and
// are answered with RespondPermission while Prompt waits.
func (s *Session) Prompt(ctx context.Context, content json.RawMessage, idempotencyKey string) (PromptResult, error) {
	if !json.Valid(content) {
		return PromptResult{}, fmt.Errorf("%w: prompt content is not JSON", ErrInvalidArgument)
	}
	r, err := acpExpect[protocol.ACPPromptResponse](ctx, s.vm, protocol.ACPPromptRequest{
		SessionID: &s.id, IdempotencyKey: optString(idempotencyKey), Content: string(content),
	})
	if err != nil {
		return PromptResult{}, err
	}
	res := PromptResult{StopReason: r.StopReason}
	if r.Message != nil {
		res.Message = json.RawMessage(*r.Message)
	}
	return res, nil
}

// Cancel cancels the running turn: "cancelled" or "no_active_prompt".
func (s *Session) Cancel(ctx context.Context) (string, error) {
	r, err := acpExpect[protocol.ACPCancelPromptResponse](ctx, s.vm, protocol.ACPCancelPromptRequest{SessionID: &s.id})
	return r.Status, err
}

// RespondPermission answers a pending permission request: status "accepted",
// or "not_pending" with a reason.
func (s *Session) RespondPermission(ctx context.Context, requestID, optionID string) (status, reason string, err error) {
	r, err := acpExpect[protocol.ACPRespondPermissionResponse](ctx, s.vm, protocol.ACPRespondPermissionRequest{
		SessionID: s.id, RequestID: requestID, OptionID: optionID,
	})
	if err != nil {
		return "", "", err
	}
	if r.Reason != nil {
		reason = *r.Reason
	}
	return r.Status, reason, nil
}

// HistoryQuery selects durable events by sequence.
type HistoryQuery struct {
	After, Before *uint64
	Limit         uint32
}

// HistoryPage is a page of durable events.
type HistoryPage struct {
	Events        []SessionEvent `json:"events"`
	HasMoreBefore bool           `json:"hasMoreBefore"`
	HasMoreAfter  bool           `json:"hasMoreAfter"`
}

// History reads durable events from the sidecar's session database.
func (s *Session) History(ctx context.Context, q HistoryQuery) (HistoryPage, error) {
	req := protocol.ACPReadHistoryRequest{SessionID: &s.id, After: q.After, Before: q.Before}
	if q.Limit > 0 {
		req.Limit = &q.Limit
	}
	r, err := acpExpect[protocol.ACPHistoryPageResponse](ctx, s.vm, req)
	if err != nil {
		return HistoryPage{}, err
	}
	page := HistoryPage{Events: make([]SessionEvent, len(r.Events)), HasMoreBefore: r.HasMoreBefore, HasMoreAfter: r.HasMoreAfter}
	for i, e := range r.Events {
		page.Events[i] = durableEvent(e.SessionID, e.Sequence, e.Timestamp, e.Event)
	}
	return page, nil
}

// DurableSessionInfo describes a session kept in the VM's database.
type DurableSessionInfo struct {
	SessionID             string          `json:"sessionId"`
	Agent                 string          `json:"agent"`
	Cwd                   string          `json:"cwd"`
	AdditionalDirectories json.RawMessage `json:"additionalDirectories"`
	State                 json.RawMessage `json:"state"`
	LatestSequence        uint64          `json:"latestSequence"`
	Title                 *string         `json:"title,omitempty"`
	Metadata              json.RawMessage `json:"metadata,omitempty"`
	CreatedAt             string          `json:"createdAt"`
	UpdatedAt             string          `json:"updatedAt"`
}

func durableInfo(i protocol.ACPDurableSessionInfo) DurableSessionInfo {
	d := DurableSessionInfo{
		SessionID: i.SessionID, Agent: i.Agent, Cwd: i.Cwd,
		AdditionalDirectories: json.RawMessage(i.AdditionalDirectories), State: json.RawMessage(i.State),
		LatestSequence: i.LatestSequence, Title: i.Title, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt,
	}
	if i.Metadata != nil {
		d.Metadata = json.RawMessage(*i.Metadata)
	}
	return d
}

// Info returns the session's durable record.
func (s *Session) Info(ctx context.Context) (DurableSessionInfo, error) {
	r, err := acpExpect[protocol.ACPGetDurableSessionResponse](ctx, s.vm, protocol.ACPGetDurableSessionRequest{SessionID: &s.id})
	if err != nil {
		return DurableSessionInfo{}, err
	}
	return durableInfo(r.Session), nil
}

// ListSessions lists the sessions in the VM's database.
func (vm *VM) ListSessions(ctx context.Context, cursor string, limit uint32) ([]DurableSessionInfo, string, error) {
	req := protocol.ACPListDurableSessionsRequest{Cursor: optString(cursor)}
	if limit > 0 {
		req.Limit = &limit
	}
	r, err := acpExpect[protocol.ACPListDurableSessionsResponse](ctx, vm, req)
	if err != nil {
		return nil, "", err
	}
	out := make([]DurableSessionInfo, len(r.Sessions))
	for i, x := range r.Sessions {
		out[i] = durableInfo(x)
	}
	next := ""
	if r.NextCursor != nil {
		next = *r.NextCursor
	}
	return out, next, nil
}

// Delete deletes the session and its history.
func (s *Session) Delete(ctx context.Context) error {
	_, err := acpExpect[protocol.ACPDeleteSessionResponse](ctx, s.vm, protocol.ACPDeleteSessionRequest{SessionID: &s.id})
	if err == nil {
		s.vm.mu.Lock()
		delete(s.vm.sessions, s.id)
		s.vm.mu.Unlock()
		s.end(nil)
	}
	return err
}

// Unload stops the session's agent; the session can be prompted again later.
func (s *Session) Unload(ctx context.Context) error {
	_, err := acpExpect[protocol.ACPUnloadSessionResponse](ctx, s.vm, protocol.ACPUnloadSessionRequest{SessionID: &s.id})
	return err
}

// SessionConfig is the agent's configuration options.
type SessionConfig struct {
	Revision uint64          `json:"revision"`
	Options  json.RawMessage `json:"options"`
}

// Config returns the session's configuration options.
func (s *Session) Config(ctx context.Context) (SessionConfig, error) {
	r, err := acpExpect[protocol.ACPSessionConfigResponse](ctx, s.vm, protocol.ACPGetSessionConfigRequest{SessionID: &s.id})
	return SessionConfig{Revision: r.Revision, Options: json.RawMessage(r.Options)}, err
}

// SetConfig sets one configuration option. Agents that cannot change it
// answer with an *ACPError.
func (s *Session) SetConfig(ctx context.Context, configID string, value json.RawMessage) (SessionConfig, error) {
	if !json.Valid(value) {
		return SessionConfig{}, fmt.Errorf("%w: config value is not JSON", ErrInvalidArgument)
	}
	r, err := acpExpect[protocol.ACPSessionConfigResponse](ctx, s.vm, protocol.ACPSetSessionConfigOptionRequest{SessionID: &s.id, ConfigID: configID, Value: string(value)})
	return SessionConfig{Revision: r.Revision, Options: json.RawMessage(r.Options)}, err
}

// Capabilities returns the agent's ACP capabilities (JSON; null if unknown).
func (s *Session) Capabilities(ctx context.Context) (json.RawMessage, error) {
	r, err := acpExpect[protocol.ACPSessionCapabilitiesResponse](ctx, s.vm, protocol.ACPGetSessionCapabilitiesRequest{SessionID: &s.id})
	if err != nil || r.Capabilities == nil {
		return json.RawMessage("null"), err
	}
	return json.RawMessage(*r.Capabilities), nil
}

// AgentInfo returns the agent's self-description (JSON; null if unknown).
func (s *Session) AgentInfo(ctx context.Context) (json.RawMessage, error) {
	r, err := acpExpect[protocol.ACPSessionAgentInfoResponse](ctx, s.vm, protocol.ACPGetSessionAgentInfoRequest{SessionID: &s.id})
	if err != nil || r.AgentInfo == nil {
		return json.RawMessage("null"), err
	}
	return json.RawMessage(*r.AgentInfo), nil
}

func durableEvent(sid string, seq uint64, ts string, ev protocol.ACPDurableEvent) SessionEvent {
	out := SessionEvent{Kind: "durable", SessionID: sid, Sequence: seq, Timestamp: ts}
	switch d := ev.(type) {
	case protocol.ACPDurableSessionUpdate:
		out.Type, out.Update = "session_update", json.RawMessage(d.Update)
	case protocol.ACPDurablePermissionRequest:
		out.Type, out.RequestID, out.Request = "permission_request", d.RequestID, json.RawMessage(d.Request)
	case protocol.ACPDurablePermissionResponse:
		out.Type, out.RequestID, out.Response, out.Status = "permission_response", d.RequestID, json.RawMessage(d.Response), d.Status
		if d.Reason != nil {
			out.Reason = *d.Reason
		}
	}
	return out
}

// handleACPEvent runs on the event lane.
func (vm *VM) handleACPEvent(payload []byte) {
	ev, err := protocol.UnmarshalACPEvent(payload)
	if err != nil {
		return // an undecodable extension event must not kill the connection
	}
	var out SessionEvent
	switch e := ev.(type) {
	case protocol.ACPDurableSessionEvent:
		out = durableEvent(e.SessionID, e.Sequence, e.Timestamp, e.Event)
	case protocol.ACPEphemeralSessionUpdateEvent:
		out = SessionEvent{Kind: "ephemeral", SessionID: e.SessionID, AfterSequence: e.AfterSequence, Update: json.RawMessage(e.Update)}
	case protocol.ACPSessionEvent:
		out = SessionEvent{Kind: "notification", SessionID: e.SessionID, Update: json.RawMessage(e.Notification)}
	case protocol.ACPAgentStderrEvent:
		out = SessionEvent{Kind: "agent_stderr", SessionID: e.SessionID, AgentType: e.AgentType, ProcessID: e.ProcessID, Chunk: e.Chunk}
	case protocol.ACPAgentExitedEvent:
		out = SessionEvent{Kind: "agent_exit", SessionID: e.SessionID, AgentType: e.AgentType, ProcessID: e.ProcessID, ExitCode: e.ExitCode, Restart: e.Restart}
	default:
		return
	}
	if out.Timestamp == "" {
		out.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	}
	vm.mu.Lock()
	s := vm.sessions[out.SessionID]
	vm.mu.Unlock()
	if s != nil {
		s.events.publish(out)
	}
	vm.acpEvents.publish(out)
}

// closeSessions unloads live agents before a dispose: the sidecar rejects a
// dispose after a 5 s teardown deadline while an agent is still alive.
func (vm *VM) closeSessions(ctx context.Context) {
	vm.mu.Lock()
	ids := make([]string, 0, len(vm.sessions))
	for id := range vm.sessions {
		ids = append(ids, id)
	}
	vm.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = acpExpect[protocol.ACPUnloadSessionResponse](ctx, vm, protocol.ACPUnloadSessionRequest{SessionID: &id})
		cancel()
	}
}
