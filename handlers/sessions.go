package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/sessions"
)

// openSessionRequest is the body of POST /v1/vms/{vm}/sessions.
type openSessionRequest struct {
	SessionID              string                     `json:"sessionId" validate:"omitempty,max=128"`
	Agent                  string                     `json:"agent" validate:"required,max=64"`
	Cwd                    string                     `json:"cwd" validate:"omitempty,startswith=/,max=4096,nonul"`
	Env                    map[string]string          `json:"env" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
	AdditionalDirectories  []string                   `json:"additionalDirectories" validate:"omitempty,max=64,dive,startswith=/,max=4096,nonul"`
	MCPServers             json.RawMessage            `json:"mcpServers"`
	PermissionPolicy       string                     `json:"permissionPolicy" validate:"omitempty,oneof=ask allow_all reject_all"`
	PermissionDefault      *gateway.PermissionDefault `json:"permissionDefault"`
	AdditionalInstructions string                     `json:"additionalInstructions" validate:"max=65536,nonul"`
}

// sessionIDPattern keeps caller-chosen session ids safe in paths and logs.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	agents, err := s.sessions.Agents(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listJSON[sessions.Agent]{Items: agents})
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request) {
	var req openSessionRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.SessionID != "" && !sessionIDPattern.MatchString(req.SessionID) {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "sessionId must be 1 to 128 letters, digits and . _ : - and start with a letter or digit").WithDetail("field", "sessionId"))
		return
	}
	if len(req.MCPServers) > 0 && string(req.MCPServers) != "null" {
		var servers []json.RawMessage
		if json.Unmarshal(req.MCPServers, &servers) != nil {
			writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "mcpServers must be an array of ACP MCP server objects").WithDetail("field", "mcpServers"))
			return
		}
	} else {
		req.MCPServers = nil
	}
	p := principalFrom(r.Context())
	vmID := pathParam(r, "vm")
	sess, err := s.sessions.Open(r.Context(), p.tenant, vmID, sessions.OpenRequest{
		SessionID: req.SessionID, Agent: req.Agent, Cwd: req.Cwd, Env: req.Env,
		AdditionalDirectories: req.AdditionalDirectories, MCPServers: req.MCPServers,
		PermissionPolicy: req.PermissionPolicy, PermissionDefault: req.PermissionDefault,
		AdditionalInstructions: req.AdditionalInstructions,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vmID+"/sessions/"+sess.ID)
	writeJSON(w, http.StatusCreated, sessionResource(sess))
}

// sessionJSON is a session as the API shows it.
type sessionJSON struct {
	ID                    string                     `json:"id"`
	VMID                  string                     `json:"vmId"`
	Agent                 string                     `json:"agent"`
	Cwd                   string                     `json:"cwd"`
	AdditionalDirectories []string                   `json:"additionalDirectories"`
	PermissionPolicy      string                     `json:"permissionPolicy"`
	PermissionDefault     *gateway.PermissionDefault `json:"permissionDefault"`
	State                 gateway.SessionState       `json:"state"`
	PendingPermissions    []permissionJSON           `json:"pendingPermissions"`
	LatestSequence        uint64                     `json:"latestSequence"`
	CreatedAt             string                     `json:"createdAt"`
	UpdatedAt             string                     `json:"updatedAt"`
}

func sessionResource(s gateway.Session) sessionJSON {
	out := sessionJSON{
		ID: s.ID, VMID: s.VMID, Agent: s.Agent, Cwd: s.Cwd, AdditionalDirectories: s.AdditionalDirectories,
		PermissionPolicy: s.PermissionPolicy, PermissionDefault: s.PermissionDefault, State: s.State,
		PendingPermissions: permissionResources(s.PendingPermissions), LatestSequence: s.LatestSequence,
		CreatedAt: rfc3339(s.CreatedAt), UpdatedAt: rfc3339(s.UpdatedAt),
	}
	if out.AdditionalDirectories == nil {
		out.AdditionalDirectories = []string{}
	}
	return out
}

// permissionJSON is a permission request as the API shows it.
type permissionJSON struct {
	RequestID string                      `json:"requestId"`
	Options   json.RawMessage             `json:"options"`
	ToolCall  json.RawMessage             `json:"toolCall"`
	AskedAt   string                      `json:"askedAt"`
	Status    string                      `json:"status"`
	Decision  *gateway.PermissionDecision `json:"decision"`
}

func permissionResources(ps []gateway.Permission) []permissionJSON {
	out := make([]permissionJSON, len(ps))
	for i, p := range ps {
		out[i] = permissionJSON{RequestID: p.RequestID, Options: nullIfEmpty(p.Options), ToolCall: nullIfEmpty(p.ToolCall),
			AskedAt: rfc3339(p.AskedAt), Status: p.Status, Decision: p.Decision}
	}
	return out
}

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.sessions.List(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]sessionJSON, len(page.Items))
	for i, ses := range page.Items {
		items[i] = sessionResource(ses)
	}
	writeJSON(w, http.StatusOK, listJSON[sessionJSON]{Items: items, NextCursor: page.NextCursor})
}

// sessionPath is the tenant and the {vm} and {session} of a request.
func sessionPath(r *http.Request) (tenantID, vmID, id string) {
	return principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "session")
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	sess, err := s.sessions.Get(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionResource(sess))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	if err := s.sessions.Delete(r.Context(), tenantID, vmID, id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) unloadSession(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	sess, err := s.sessions.Unload(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionResource(sess))
}

// promptRequest is the body of POST .../sessions/{session}/prompt.
type promptRequest struct {
	Content        json.RawMessage `json:"content"`
	IdempotencyKey string          `json:"idempotencyKey" validate:"max=255,nonul"`
}

// promptAcceptedJSON answers an asynchronous prompt.
type promptAcceptedJSON struct {
	Status string `json:"status"` // "accepted"
}

// prompt runs a turn. It answers at the end of the turn, or at once (202)
// with Prefer: respond-async, the turn then being followed through events.
func (s *Server) prompt(w http.ResponseWriter, r *http.Request) {
	// Images and audio are base64 blocks: prompts have a limit of their
	// own, larger than other JSON bodies' and within the engine's frames.
	var req promptRequest
	if err := decodeJSON(w, r, s.cfg.MaxPromptBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if len(req.Content) == 0 {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "content is required").WithDetail("field", "content"))
		return
	}
	async := preferAsync(r)
	tenantID, vmID, id := sessionPath(r)
	out, err := s.sessions.Prompt(r.Context(), tenantID, vmID, id, sessions.PromptRequest{Content: req.Content, IdempotencyKey: req.IdempotencyKey, Async: async})
	if out.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if out.Accepted {
		w.Header().Set("Preference-Applied", "respond-async")
		w.Header().Set("Location", "/v1/vms/"+vmID+"/sessions/"+id)
		writeJSON(w, http.StatusAccepted, promptAcceptedJSON{Status: "accepted"})
		return
	}
	writeJSON(w, http.StatusOK, out.Result)
}

// preferAsync reports whether the Prefer header (RFC 7240) asks for
// respond-async.
func preferAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for _, pref := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(pref), ";")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// cancelJSON answers a cancel.
type cancelJSON struct {
	Status string `json:"status"`
}

func (s *Server) cancelPrompt(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	status, err := s.sessions.Cancel(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cancelJSON{Status: status})
}

func (s *Server) listPermissions(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	ps, err := s.sessions.Permissions(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listJSON[permissionJSON]{Items: permissionResources(ps)})
}

// answerPermissionRequest is the body of POST .../permissions/{request}.
type answerPermissionRequest struct {
	OptionID string `json:"optionId" validate:"required,max=256,nonul"`
}

func (s *Server) answerPermission(w http.ResponseWriter, r *http.Request) {
	var req answerPermissionRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	tenantID, vmID, id := sessionPath(r)
	a, err := s.sessions.RespondPermission(r.Context(), tenantID, p.key.ID, vmID, id, pathParam(r, "request"), req.OptionID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) getSessionConfig(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	c, err := s.sessions.Config(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, configResource(c))
}

// configJSON is an agent's configuration.
type configJSON struct {
	Revision uint64          `json:"revision"`
	Options  json.RawMessage `json:"options"`
}

func configResource(c sessions.SessionConfig) configJSON {
	return configJSON{Revision: c.Revision, Options: nullIfEmpty(c.Options)}
}

// setConfigRequest is the body of PUT .../config/{config}.
type setConfigRequest struct {
	Value json.RawMessage `json:"value"`
}

func (s *Server) setSessionConfig(w http.ResponseWriter, r *http.Request) {
	var req setConfigRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if len(req.Value) == 0 {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "value is required").WithDetail("field", "value"))
		return
	}
	tenantID, vmID, id := sessionPath(r)
	c, err := s.sessions.SetConfig(r.Context(), tenantID, vmID, id, pathParam(r, "config"), req.Value)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, configResource(c))
}

func (s *Server) sessionCapabilities(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	c, err := s.sessions.Capabilities(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeRawJSON(w, c)
}

func (s *Server) sessionAgentInfo(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	c, err := s.sessions.AgentInfo(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeRawJSON(w, c)
}

func writeRawJSON(w http.ResponseWriter, raw json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(nullIfEmpty(raw))
	_, _ = w.Write([]byte("\n"))
}

// historyJSON is a page of durable session events.
type historyJSON struct {
	Events        []json.RawMessage `json:"events"`
	HasMoreBefore bool              `json:"hasMoreBefore"`
	HasMoreAfter  bool              `json:"hasMoreAfter"`
}

func (s *Server) sessionHistory(w http.ResponseWriter, r *http.Request) {
	q, err := historyQuery(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	tenantID, vmID, id := sessionPath(r)
	page, err := s.sessions.History(r.Context(), tenantID, vmID, id, q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := historyJSON{Events: make([]json.RawMessage, len(page.Events)), HasMoreBefore: page.HasMoreBefore, HasMoreAfter: page.HasMoreAfter}
	for i, e := range page.Events {
		out.Events[i] = e.Data
	}
	writeJSON(w, http.StatusOK, out)
}

func historyQuery(r *http.Request) (gateway.HistoryQuery, error) {
	var q gateway.HistoryQuery
	for name, dst := range map[string]*uint64{"after": &q.After, "before": &q.Before} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return q, gateway.Errorf(gateway.CodeInvalidArgument, "%s must be a sequence number", name).WithDetail("field", name)
		}
		*dst = n
	}
	if q.Before > 0 && q.After >= q.Before {
		return q, gateway.Errorf(gateway.CodeInvalidArgument, "after must be lower than before").WithDetail("field", "after")
	}
	limit, err := queryInt(r, "limit", 100, 1, 1000)
	q.Limit = limit
	return q, err
}

// sessionEvents streams a session's events: durable ones with their
// sequence as id (Last-Event-ID resumes after it, from the store), streamed
// deltas, agent stderr and exits, and a final end event when the session
// ends.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) {
	after, _, err := lastEventID(r)
	if err != nil {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID must be a sequence number"))
		return
	}
	tenantID, vmID, id := sessionPath(r)
	// The session's existence is checked before the stream starts, so an
	// unknown one is a 404, not an event stream that fails.
	sess, err := s.sessions.Get(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if after > sess.LatestSequence {
		// A position beyond the record is a client's mistake, not a
		// reason to wait for events that may never be numbered so.
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Last-Event-ID %d is beyond the session's latest sequence %d", after, sess.LatestSequence).
			WithDetail("field", "Last-Event-ID").WithDetail("latestSequence", sess.LatestSequence))
		return
	}
	s.sse.serve(w, r, after, func(ctx context.Context, emit func(sseEvent) error) error {
		err := s.sessions.Follow(ctx, tenantID, vmID, id, after, func(ev sessions.Event) error {
			out := sseEvent{Event: ev.Kind, Data: ev.Data}
			if ev.Kind == sessions.KindDurable {
				out.ID = strconv.FormatUint(ev.Sequence, 10)
			}
			return emit(out)
		})
		if err != nil && ctx.Err() == nil {
			_ = emit(sseEvent{Event: "error", Data: problemData(err)})
		}
		return err
	})
}

func problemData(err error) []byte {
	b, _ := json.Marshal(map[string]any{"code": gateway.ErrorCode(err), "detail": gateway.ErrorMessage(err)})
	return b
}
