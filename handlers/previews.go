package handlers

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// previewCookie carries a host-based preview's token after its first
// request, for the requests of the page it opened.
const previewCookie = "agentos_preview"

// previewTokenQuery is the query parameter of a host-based preview URL that
// carries the token; the gateway moves it into previewCookie and redirects
// to the same URL without it, so the guest never sees it.
const previewTokenQuery = "agentos_preview"

// previewRoutes routes a VM's previews, in its /v1/vms/{vm} subrouter.
func (s *Server) previewRoutes(r chi.Router) {
	r.Post("/previews", s.createPreview)
	r.Get("/previews", s.listPreviews)
	r.Get("/previews/{preview}", s.getPreview)
	r.Delete("/previews/{preview}", s.deletePreview)
}

// previewPathRoutes routes the path-based preview URLs, outside /v1: they
// carry their token, not the API key.
func (s *Server) previewPathRoutes(r chi.Router) {
	for _, m := range guestMethods {
		r.Method(m, "/p/{token}/*", http.HandlerFunc(s.servePathPreview))
	}
	r.Get("/p/{token}", previewRootRedirect)
}

// previewRootRedirect sends /p/{token} to /p/{token}/, where the guest's
// root is, so that the page's relative links resolve under the preview.
// It says nothing of the token, which the next request checks.
func previewRootRedirect(w http.ResponseWriter, r *http.Request) {
	loc := url.URL{Path: "/p/" + chi.URLParam(r, "token") + "/", RawQuery: r.URL.RawQuery}
	http.Redirect(w, r, loc.String(), http.StatusPermanentRedirect)
}

func (s *Server) previewsOff(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Previews == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "previews do not run on this gateway"))
		return true
	}
	return false
}

func (s *Server) createPreview(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w, r) {
		return
	}
	var req api.CreatePreviewRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	vmID := pathParam(r, "vm")
	p, token, err := s.cfg.Previews.Create(r.Context(), principalFrom(r.Context()).tenant.ID, vmID, req.Port, time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := previewResource(p)
	out.URL = requestScheme(r) + "://" + r.Host + "/p/" + token + "/"
	if d := s.cfg.PreviewDomain; d != "" {
		host := strconv.Itoa(p.Port) + "-" + p.VMID + "." + d
		if _, port, err := net.SplitHostPort(r.Host); err == nil {
			host = net.JoinHostPort(host, port)
		}
		out.HostURL = requestScheme(r) + "://" + host + "/?" + previewTokenQuery + "=" + token
	}
	w.Header().Set("Location", "/v1/vms/"+vmID+"/previews/"+p.ID)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listPreviews(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w, r) {
		return
	}
	list, err := s.cfg.Previews.List(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.Preview, len(list))
	for i, p := range list {
		items[i] = previewResource(p)
	}
	writeJSON(w, http.StatusOK, api.List[api.Preview]{Items: items})
}

func (s *Server) getPreview(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w, r) {
		return
	}
	p, err := s.cfg.Previews.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "preview"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, previewResource(p))
}

func (s *Server) deletePreview(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w, r) {
		return
	}
	if err := s.cfg.Previews.Revoke(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), pathParam(r, "preview")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func previewResource(p gateway.Preview) api.Preview {
	return api.Preview{ID: p.ID, VMID: p.VMID, Port: p.Port, CreatedAt: p.CreatedAt.UTC(), ExpiresAt: p.ExpiresAt.UTC()}
}

// servePathPreview serves /p/{token}/{path}: the preview's port, reached
// without the API key, on the node that runs the VM.
func (s *Server) servePathPreview(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w, r) {
		return
	}
	token := chi.URLParam(r, "token")
	p, err := s.cfg.Previews.Resolve(r.Context(), token)
	if err != nil {
		writeError(w, r, err)
		return
	}
	marker := "/p/" + token
	escaped := r.URL.EscapedPath()
	s.previewOnOwner(w, r, p, guestTarget{
		tenantID: p.TenantID, vmID: p.VMID, port: uint16(p.Port), preview: previewPath,
		path: withQuery(strings.TrimPrefix(escaped, marker), r.URL.RawQuery), prefix: marker,
	})
}

// previewHost serves the requests whose Host is a host-based preview,
// {port}-{vm}.{--preview-domain}, whatever their path; other requests go
// on to the API. The first request carries the token in the query; it is
// moved into a cookie of that host, and later requests carry the cookie.
func (s *Server) previewHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port, vmID, ok := parsePreviewHost(r.Host, s.cfg.PreviewDomain)
		if !ok || s.cfg.Previews == nil {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if token := q.Get(previewTokenQuery); token != "" {
			if _, err := s.previewFor(r, token, port, vmID); err != nil {
				writeError(w, r, err)
				return
			}
			c := &http.Cookie{Name: previewCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
			if requestScheme(r) == "https" {
				// In an iframe of another site, only a SameSite=None
				// cookie is sent, and browsers take those over TLS only.
				c.Secure, c.SameSite = true, http.SameSiteNoneMode
			}
			http.SetCookie(w, c)
			q.Del(previewTokenQuery)
			loc := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: q.Encode()}
			http.Redirect(w, r, loc.String(), http.StatusSeeOther)
			return
		}
		c, err := r.Cookie(previewCookie)
		if err != nil {
			writeError(w, r, gateway.Errorf(gateway.CodeNotFound, "this preview does not exist, has expired or was revoked"))
			return
		}
		p, err := s.previewFor(r, c.Value, port, vmID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		s.previewOnOwner(w, r, p, guestTarget{
			tenantID: p.TenantID, vmID: p.VMID, port: uint16(p.Port), preview: previewHost,
			path: withQuery(r.URL.EscapedPath(), r.URL.RawQuery),
		})
	})
}

// previewFor resolves a token that must open port of vmID: a token of
// another preview is refused as an unknown one.
func (s *Server) previewFor(r *http.Request, token string, port int, vmID string) (gateway.Preview, error) {
	p, err := s.cfg.Previews.Resolve(r.Context(), token)
	if err != nil {
		return p, err
	}
	if p.Port != port || p.VMID != vmID {
		return gateway.Preview{}, gateway.Errorf(gateway.CodeNotFound, "this preview does not exist, has expired or was revoked")
	}
	return p, nil
}

// parsePreviewHost reads "{port}-{vm}.{domain}" (with or without a
// :port) from a Host header; ok is false for any other host. It is fed
// untrusted bytes, so it is fuzzed.
func parsePreviewHost(host, domain string) (port int, vmID string, ok bool) {
	if domain == "" {
		return 0, "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, found := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(domain))
	if !found || strings.Contains(label, ".") {
		return 0, "", false
	}
	portText, vmID, found := strings.Cut(label, "-")
	if !found || vmID == "" || portText == "" || portText[0] == '0' {
		return 0, "", false
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, vmID, true
}

// previewOnOwner serves a preview on the node that runs its VM, as toOwner
// does for the API's VM routes: here when this node runs it, or nobody
// does (the guest request then fails as the VM's state says), through the
// node proxy otherwise. The owner resolves the token again from the shared
// store.
func (s *Server) previewOnOwner(w http.ResponseWriter, r *http.Request, p gateway.Preview, t guestTarget) {
	// Preview traffic counts against its tenant's rate limit, as the API
	// calls that would do the same do.
	tenant, err := s.store.GetTenant(r.Context(), p.TenantID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !s.admit(w, r, tenant) {
		return
	}
	peer, remote, err := s.remoteOwner(r, p.TenantID, p.VMID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !remote {
		s.forwardToGuest(w, r, t)
		return
	}
	s.proxy(w, r, peer, func(w http.ResponseWriter, r *http.Request, _ time.Time) {
		if r.Context().Err() != nil {
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "node %s, which runs VM %s, does not answer", peer.ID, p.VMID).WithDetail("node", peer.ID))
	})
}
