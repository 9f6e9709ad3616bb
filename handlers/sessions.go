package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/sse"
)

// sessionIDPattern keeps caller-chosen session ids safe in paths and logs.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	agents, err := s.sessions.Agents(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.Agent]{Items: agents})
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request) {
	var req api.OpenSessionRequest
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
	if err := s.checkPermissionWebhook(req.PermissionDefault, "permissionDefault"); err != nil {
		writeError(w, r, err)
		return
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

// sessionResource is a session as the API shows it: times in UTC, empty
// lists rather than absent ones.
func sessionResource(s gateway.Session) api.Session {
	out := api.Session{
		ID: s.ID, VMID: s.VMID, Agent: s.Agent, Cwd: s.Cwd, AdditionalDirectories: s.AdditionalDirectories,
		PermissionPolicy: s.PermissionPolicy, PermissionDefault: s.PermissionDefault, State: s.State,
		PendingPermissions: permissionResources(s.PendingPermissions), LatestSequence: s.LatestSequence,
		CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC(),
	}
	if out.AdditionalDirectories == nil {
		out.AdditionalDirectories = []string{}
	}
	return out
}

// permissionResources are permission requests as the API shows them:
// options and tool call null when the agent sent none, times in UTC.
func permissionResources(ps []gateway.Permission) []gateway.Permission {
	out := make([]gateway.Permission, len(ps))
	for i, p := range ps {
		p.Options, p.ToolCall, p.AskedAt = nullIfEmpty(p.Options), nullIfEmpty(p.ToolCall), p.AskedAt.UTC()
		out[i] = p
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
	items := make([]api.Session, len(page.Items))
	for i, ses := range page.Items {
		items[i] = sessionResource(ses)
	}
	writeJSON(w, http.StatusOK, api.List[api.Session]{Items: items, NextCursor: page.NextCursor})
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

// prompt runs a turn. It answers at the end of the turn, or at once (202)
// with Prefer: respond-async, the turn then being followed through events.
func (s *Server) prompt(w http.ResponseWriter, r *http.Request) {
	// Images and audio are base64 blocks: prompts have a limit of their
	// own, larger than other JSON bodies' and within the engine's frames.
	var req api.PromptRequest
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
		writeJSON(w, http.StatusAccepted, api.PromptAccepted{Status: "accepted"})
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

func (s *Server) cancelPrompt(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	status, err := s.sessions.Cancel(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.CancelResult{Status: status})
}

func (s *Server) listPermissions(w http.ResponseWriter, r *http.Request) {
	tenantID, vmID, id := sessionPath(r)
	ps, err := s.sessions.Permissions(r.Context(), tenantID, vmID, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.List[gateway.Permission]{Items: permissionResources(ps)})
}

func (s *Server) answerPermission(w http.ResponseWriter, r *http.Request) {
	var req api.AnswerPermissionRequest
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

// configResource is an agent's configuration as the API shows it: options
// null when the agent has none.
func configResource(c sessions.SessionConfig) api.SessionConfig {
	return api.SessionConfig{Revision: c.Revision, Options: nullIfEmpty(c.Options)}
}

func (s *Server) setSessionConfig(w http.ResponseWriter, r *http.Request) {
	var req api.SetConfigRequest
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
	out := api.SessionHistory{Events: make([]json.RawMessage, len(page.Events)), HasMoreBefore: page.HasMoreBefore, HasMoreAfter: page.HasMoreAfter}
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
	after, _, err := sse.LastEventID(r)
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
	s.sse.Serve(w, r, after, func(ctx context.Context, emit func(sse.Event) error) error {
		err := s.sessions.Follow(ctx, tenantID, vmID, id, after, func(ev sessions.Event) error {
			out := sse.Event{Event: ev.Type, Data: ev.Data}
			if ev.Type == sessions.TypeDurable {
				out.ID = strconv.FormatUint(ev.Sequence, 10)
			}
			return emit(out)
		})
		if err != nil && ctx.Err() == nil {
			_ = emit(sse.Event{Event: "error", Data: problemData(err)})
		}
		return err
	})
}

func problemData(err error) []byte {
	b, _ := json.Marshal(api.ErrorEvent{Code: gateway.ErrorCode(err), Detail: gateway.ErrorMessage(err)})
	return b
}
