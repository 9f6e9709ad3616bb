package handlers

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/attach"
)

// Tokens are short-lived credentials a tenant mints for a browser or an end
// user (POST /v1/tokens). A token acts for its tenant, within its scopes, on
// its VM and session only. What each route needs of a token is in one
// table, tokenScopes, checked before routing by authorizeToken: a route the
// table does not name is for tenant keys only, so a new route is closed to
// tokens until someone decides otherwise.

// accessTokenParam is the query parameter a token may come in, for the
// requests a browser cannot add a header to (EventSource).
const accessTokenParam = "access_token"

// DefaultTokenTTL is a token's life when its request sets none.
const DefaultTokenTTL = 15 * time.Minute

// DefaultTokenMaxTTL bounds a token's life (--token-max-ttl).
const DefaultTokenMaxTTL = 24 * time.Hour

// anyToken marks the routes every token may call, whatever its scopes.
const anyToken gateway.Scope = ""

// tokenScopes is what a token needs for each route, by "METHOD /path" as
// api/openapi.yaml spells it (HEAD as its GET).
var tokenScopes = map[string]gateway.Scope{
	"GET /v1/me":  anyToken,
	"GET /v1/vms": gateway.ScopeVMRead,

	"GET /v1/vms/{vm}":                           gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/events":                    gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/usage":                     gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/processes":                 gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/processes/{pid}":           gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/shells":                    gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/shells/{shell}":            gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/sessions":                  gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/sessions/{session}":        gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/dirs":                      gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/fs/stat":                   gateway.ScopeVMRead,
	"HEAD /v1/vms/{vm}/files":                    gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/agents":                    gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/mounts":                    gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/software":                  gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/schedules":                 gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/schedules/{schedule}":      gateway.ScopeVMRead,
	"GET /v1/vms/{vm}/schedules/{schedule}/runs": gateway.ScopeVMRead,

	"DELETE /v1/vms/{vm}":          gateway.ScopeVMWrite,
	"PATCH /v1/vms/{vm}":           gateway.ScopeVMWrite,
	"POST /v1/vms/{vm}/hibernate":  gateway.ScopeVMWrite,
	"POST /v1/vms/{vm}/wake":       gateway.ScopeVMWrite,
	"POST /v1/vms/{vm}/checkpoint": gateway.ScopeVMWrite,

	"POST /v1/vms/{vm}/exec":                        gateway.ScopeExec,
	"POST /v1/vms/{vm}/processes":                   gateway.ScopeExec,
	"GET /v1/vms/{vm}/processes/{pid}/output":       gateway.ScopeExec,
	"GET /v1/vms/{vm}/exec/{key}":                   gateway.ScopeExec,
	"POST /v1/vms/{vm}/processes/{pid}/stdin":       gateway.ScopeExec,
	"POST /v1/vms/{vm}/processes/{pid}/stdin/close": gateway.ScopeExec,
	"POST /v1/vms/{vm}/processes/{pid}/signal":      gateway.ScopeExec,
	"GET /v1/vms/{vm}/processes/{pid}/wait":         gateway.ScopeExec,
	"GET /v1/vms/{vm}/processes/{pid}/attach":       gateway.ScopeExec,

	"POST /v1/vms/{vm}/shells":                gateway.ScopeShells,
	"GET /v1/vms/{vm}/shells/{shell}/attach":  gateway.ScopeShells,
	"POST /v1/vms/{vm}/shells/{shell}/input":  gateway.ScopeShells,
	"POST /v1/vms/{vm}/shells/{shell}/resize": gateway.ScopeShells,
	"GET /v1/vms/{vm}/shells/{shell}/output":  gateway.ScopeShells,
	"DELETE /v1/vms/{vm}/shells/{shell}":      gateway.ScopeShells,

	"GET /v1/vms/{vm}/files":   gateway.ScopeFilesRead,
	"GET /v1/vms/{vm}/archive": gateway.ScopeFilesRead,
	"GET /v1/vms/{vm}/watch":   gateway.ScopeFilesRead,

	"PUT /v1/vms/{vm}/files":    gateway.ScopeFilesWrite,
	"DELETE /v1/vms/{vm}/files": gateway.ScopeFilesWrite,
	"PUT /v1/vms/{vm}/archive":  gateway.ScopeFilesWrite,
	"POST /v1/vms/{vm}/dirs":    gateway.ScopeFilesWrite,
	"POST /v1/vms/{vm}/fs/move": gateway.ScopeFilesWrite,

	"POST /v1/vms/{vm}/sessions":                                 gateway.ScopeSessions,
	"DELETE /v1/vms/{vm}/sessions/{session}":                     gateway.ScopeSessions,
	"POST /v1/vms/{vm}/sessions/{session}/unload":                gateway.ScopeSessions,
	"POST /v1/vms/{vm}/sessions/{session}/prompt":                gateway.ScopeSessions,
	"POST /v1/vms/{vm}/sessions/{session}/cancel":                gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/permissions":            gateway.ScopeSessions,
	"POST /v1/vms/{vm}/sessions/{session}/permissions/{request}": gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/config":                 gateway.ScopeSessions,
	"PUT /v1/vms/{vm}/sessions/{session}/config/{config}":        gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/capabilities":           gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/agent-info":             gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/history":                gateway.ScopeSessions,
	"GET /v1/vms/{vm}/sessions/{session}/events":                 gateway.ScopeSessions,

	"POST /v1/vms/{vm}/previews":             gateway.ScopePreviews,
	"GET /v1/vms/{vm}/previews":              gateway.ScopePreviews,
	"GET /v1/vms/{vm}/previews/{preview}":    gateway.ScopePreviews,
	"DELETE /v1/vms/{vm}/previews/{preview}": gateway.ScopePreviews,
}

// guestPortRoute is the pattern of the guest port proxy, which takes every
// method: a token needs the previews scope for it.
const guestPortRoute = "/v1/vms/{vm}/ports/{port}/{path}"

// tokenSecret returns the secret if it is a token's (a subprotocol may
// carry it base64url-encoded, as a key), or "".
func tokenSecret(secret string, fromProtocol bool) string {
	if strings.HasPrefix(secret, gateway.TokenPrefix) {
		return secret
	}
	if fromProtocol {
		if decoded, err := base64.RawURLEncoding.DecodeString(secret); err == nil && strings.HasPrefix(string(decoded), gateway.TokenPrefix) {
			return string(decoded)
		}
	}
	return ""
}

// streamsOrUpgrades reports whether r is a GET that asks for an event
// stream or upgrades to a WebSocket: the requests a token may authenticate
// in the query.
func streamsOrUpgrades(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	return attach.IsUpgrade(r) || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// authenticateToken resolves a token, checks the request's Origin against
// its origins and the tenant's rate limit, and serves r as the token.
func (s *Server) authenticateToken(w http.ResponseWriter, r *http.Request, secret string, next http.Handler) {
	note := noteOf(r.Context())
	note.token, note.forwarded = true, isForwarded(r.Context())
	tok, tenant, err := s.store.LookupToken(r.Context(), secret)
	if err != nil {
		s.noteRoute(r)
		if gateway.ErrorCode(err) == gateway.CodeUnauthenticated {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentos-gateway", error="invalid_token"`)
		}
		writeError(w, r, err)
		return
	}
	note.tenantID, note.tokenID = tenant.ID, tok.ID
	if origin := r.Header.Get("Origin"); origin != "" && len(tok.Origins) > 0 && !slices.Contains(tok.Origins, origin) {
		s.noteRoute(r)
		writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "token %s may not be used from origin %s", tok.ID, origin).WithDetail("origin", origin))
		return
	}
	if !s.admit(w, r, tenant) {
		return
	}
	log := zerolog.Ctx(r.Context()).With().Str("tenant", tenant.ID).Str("token", tok.ID).Logger()
	ctx := context.WithValue(r.Context(), principalKey, principal{tenant: tenant, token: &tok})
	next.ServeHTTP(w, r.WithContext(log.WithContext(ctx)))
}

// authorizeToken lets a token through to the routes tokenScopes gives it,
// with the scope they need, and on its own VM and session only: another VM
// or session is not found, as another tenant's would be.
func (s *Server) authorizeToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := principalFrom(r.Context()).token
		if tok == nil {
			next.ServeHTTP(w, r)
			return
		}
		route, rctx := s.noteRoute(r)
		if route == "" {
			// No such route: the router answers 404 or 405.
			next.ServeHTTP(w, r)
			return
		}
		need, ok := byOperation(tokenScopes, r.Method, route)
		if !ok && route == guestPortRoute {
			need, ok = gateway.ScopePreviews, true
		}
		if !ok {
			writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "a token cannot call %s %s; it needs a tenant key", r.Method, route).WithDetail("route", route))
			return
		}
		if need != anyToken && !tok.Allows(need) {
			writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "token %s lacks the scope %s", tok.ID, need).WithDetail("scope", string(need)))
			return
		}
		if vm := rctx.URLParam("vm"); tok.VMID != "" && vm != "" && vm != tok.VMID {
			writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "vm %s not found", vm))
			return
		}
		if sess := rctx.URLParam("session"); tok.SessionID != "" && sess != "" && sess != tok.SessionID {
			writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "session %s not found", sess))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The token routes are for tenant keys: tokenScopes does not name them,
// so authorizeToken refuses a token before these handlers run.

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTokenRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	for i, sc := range req.Scopes {
		if !gateway.Scope(sc).Valid() {
			writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "unknown scope %q; the scopes are %s", sc, scopeList()).
				WithDetail("field", "scopes["+strconv.Itoa(i)+"]"))
			return
		}
	}
	ttl := DefaultTokenTTL
	if req.TTLSeconds != nil {
		ttl = time.Duration(*req.TTLSeconds) * time.Second
	}
	if ttl > s.cfg.TokenMaxTTL {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "ttlSeconds %d is above the gateway's --token-max-ttl of %d s",
			int64(ttl/time.Second), int64(s.cfg.TokenMaxTTL/time.Second)).WithDetail("field", "ttlSeconds"))
		return
	}
	if req.Session != "" && req.VM == "" {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "a token bound to a session is bound to its VM too: set vm").WithDetail("field", "vm"))
		return
	}
	p := principalFrom(r.Context())
	if req.VM != "" {
		if _, err := s.vms.Get(r.Context(), p.tenant.ID, req.VM); err != nil {
			writeError(w, r, gateway.Wrap(gateway.ErrorCode(err), err, "vm %s not found", req.VM).WithDetail("field", "vm"))
			return
		}
	}
	scopes := make([]gateway.Scope, 0, len(req.Scopes))
	for _, sc := range req.Scopes {
		if !slices.Contains(scopes, gateway.Scope(sc)) {
			scopes = append(scopes, gateway.Scope(sc))
		}
	}
	tok, secret, err := s.store.CreateToken(r.Context(), gateway.Token{TenantID: p.tenant.ID, Scopes: scopes, VMID: req.VM,
		SessionID: req.Session, Origins: req.Origins, Label: req.Label}, ttl)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.CreatedToken{Token: tokenResource(tok), Secret: secret}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	toks, err := s.store.ListTokens(r.Context(), principalFrom(r.Context()).tenant.ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.List[api.Token]{Items: make([]api.Token, 0, len(toks))}
	for _, t := range toks {
		out.Items = append(out.Items, tokenResource(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request) {
	if err := s.store.DeleteToken(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "token")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// tokenResource is a token as the API shows it, without its secret.
func tokenResource(t gateway.Token) api.Token {
	scopes := make([]string, len(t.Scopes))
	for i, sc := range t.Scopes {
		scopes[i] = string(sc)
	}
	origins := t.Origins
	if origins == nil {
		origins = []string{}
	}
	return api.Token{ID: t.ID, Scopes: scopes, VM: t.VMID, Session: t.SessionID, Origins: origins, Label: t.Label,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: t.ExpiresAt.UTC()}
}

func scopeList() string {
	names := make([]string, len(gateway.Scopes))
	for i, sc := range gateway.Scopes {
		names[i] = string(sc)
	}
	return strings.Join(names, ", ")
}
