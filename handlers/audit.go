package handlers

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// The audit trail records every call that changed something (POST, PUT,
// PATCH, DELETE under /v1) and every refused call made with a token: who
// (tenant, key or token), what (method and route template, VM), how it
// ended (status) and the request id. observe hands the record to the audit
// writer (package audit) once the handler returned, which stores it off the
// request's path; authenticate tells it
// who called, through the note observe put in the request's context. A
// request another node forwarded is recorded by the node it came to.

// auditWriteTimeout bounds the purge of old records, and the wait for the
// queued records when the server closes.
const auditWriteTimeout = 5 * time.Second

// auditNote is who made a request, as authentication found out.
type auditNote struct {
	tenantID, keyID, tokenID string
	// token says the request came with a token, recognised or not.
	token     bool
	forwarded bool
	// route and vm are the route template and VM of a request refused
	// before routing finished (authorizeToken matched them itself).
	route, vm string
}

type auditNoteKey struct{}

func noteOf(ctx context.Context) *auditNote {
	n, _ := ctx.Value(auditNoteKey{}).(*auditNote)
	if n == nil {
		return &auditNote{}
	}
	return n
}

// audited reports whether a request is recorded.
func audited(method string, status int, n *auditNote) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return n.token && (status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound)
}

// noteRoute matches r's route (routeOf) and puts it, with its VM, in r's
// note: a request refused before routing ends is recorded with them.
func (s *Server) noteRoute(r *http.Request) (string, *chi.Context) {
	route, rctx := s.routeOf(r)
	if route != "" {
		n := noteOf(r.Context())
		n.route, n.vm = route, rctx.URLParam("vm")
	}
	return route, rctx
}

// recordAudit writes the record of r, if it is one to keep.
func (s *Server) recordAudit(r *http.Request, n *auditNote, pattern string, status int) {
	if n.forwarded || !strings.HasPrefix(r.URL.Path, "/v1/") || !audited(r.Method, status, n) {
		return
	}
	route, vm := n.route, n.vm
	if rctx := chi.RouteContext(r.Context()); route == "" && rctx != nil && pattern != "" {
		route, vm = normalizeRoute(pattern), rctx.URLParam("vm")
	}
	if route == "" {
		route = r.URL.Path
	}
	rec := gateway.AuditRecord{At: time.Now().UTC(), Node: s.nodeID(), TenantID: n.tenantID, KeyID: n.keyID, TokenID: n.tokenID,
		Method: r.Method, Route: route, VMID: vm, Status: status, RequestID: requestID(r.Context())}
	s.audit.Record(r.Context(), rec)
}

// nodeID names this node in audit records.
func (s *Server) nodeID() string {
	if s.cfg.Cluster != nil {
		return s.cfg.Cluster.ID()
	}
	return s.cfg.NodeID
}

// listAudit answers GET /v1/audit: the caller's tenant's records, or, for
// the admin key, every tenant's (or one's, with tenant=).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	f := gateway.AuditFilter{TenantID: p.tenant.ID, VMID: q.Get("vm"), Cursor: q.Get("cursor"), Limit: limit}
	if p.admin {
		f.TenantID = q.Get("tenant")
	} else if t := q.Get("tenant"); t != "" && t != p.tenant.ID {
		writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "only the admin key reads another tenant's audit records").WithDetail("field", "tenant"))
		return
	}
	if f.After, err = queryTime(r, "after"); err != nil {
		writeError(w, r, err)
		return
	}
	// The caller reads its own writes: the records this node queued before
	// this request are stored first. (Another node's are stored within
	// its own queue's delay.)
	if err := s.audit.Flush(r.Context()); err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.store.ListAudit(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.List[api.AuditRecord]{Items: make([]api.AuditRecord, len(page.Items)), NextCursor: page.NextCursor}
	for i, a := range page.Items {
		out.Items[i] = api.AuditRecord{ID: a.ID, At: a.At.UTC(), Node: a.Node, Tenant: a.TenantID, Key: a.KeyID, Token: a.TokenID,
			Method: a.Method, Route: a.Route, VM: a.VMID, Status: a.Status, RequestID: a.RequestID}
	}
	writeJSON(w, http.StatusOK, out)
}

// purgeAudit removes the records past the retention, every hour (or a
// tenth of the retention, when shorter), until stop closes.
func (s *Server) purgeAudit(stop <-chan struct{}) {
	every := min(max(s.cfg.AuditRetention/10, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
			if n, err := s.store.PurgeAudit(ctx, time.Now().Add(-s.cfg.AuditRetention)); err != nil {
				s.log.Error().Err(err).Msg("purge audit records")
			} else if n > 0 {
				s.log.Info().Int("records", n).Msg("purged audit records past their retention")
			}
			cancel()
		}
	}
}
