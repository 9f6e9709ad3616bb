package handlers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/cluster"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// MaxGuestRequestBytes bounds the body of a request to a guest port: the
// engine takes a request body whole, in one frame, and refuses one larger
// than the VM's socket buffers (4 MiB on 0.2.21, headers included), so the
// gateway refuses bodies over 2 MiB with 413 before the engine sees them.
// Response bodies stream and have no bound.
const MaxGuestRequestBytes = 2 << 20

// guestMethods are the methods a guest port is forwarded for: all that
// OpenAPI can describe (CONNECT, which asks for a tunnel, is not one).
var guestMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// guestCopyBuffer is the size of one read of a guest's response body; each
// read is written and flushed at once, so an event stream arrives event by
// event.
const guestCopyBuffer = 64 << 10

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, which are
// about one connection and never forwarded, and WebSocket handshake
// headers: the engine's fetch is request and response, with no upgrade.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions",
}

// guestTarget says where a request goes in a VM and how it came: through
// the API (ports) or a preview, path- or host-based.
type guestTarget struct {
	tenantID string
	vmID     string
	port     uint16
	// path is the escaped path and query the guest sees.
	path string
	// prefix is what the gateway's URL adds before path (X-Forwarded-Prefix),
	// so that a guest app may build its own links.
	prefix string
	// preview is how a preview reached it; none for /ports/.
	preview previewKind
}

type previewKind int

const (
	previewNone previewKind = iota
	previewPath
	previewHost
)

// portRoutes routes the guest ports of a VM, in its /v1/vms/{vm} subrouter.
func (s *Server) portRoutes(r chi.Router) {
	for _, m := range guestMethods {
		r.Method(m, "/ports/{port}/*", http.HandlerFunc(s.guestPort))
	}
}

// guestPort forwards ANY /v1/vms/{vm}/ports/{port}/{path} to the server on
// that port inside the VM.
func (s *Server) guestPort(w http.ResponseWriter, r *http.Request) {
	portText := chi.URLParam(r, "port")
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "port must be a number from 1 to 65535, not %q", portText).WithDetail("field", "port"))
		return
	}
	vmID := pathParam(r, "vm")
	marker := "/ports/" + portText + "/"
	escaped := r.URL.EscapedPath()
	i := strings.Index(escaped, marker)
	if i < 0 {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "the path does not name a guest port"))
		return
	}
	s.forwardToGuest(w, r, guestTarget{
		tenantID: principalFrom(r.Context()).tenant.ID, vmID: vmID, port: uint16(port),
		path: withQuery(escaped[i+len(marker)-1:], r.URL.RawQuery), prefix: escaped[:i+len(marker)-1],
	})
}

func withQuery(path, query string) string {
	if query == "" {
		return path
	}
	return path + "?" + query
}

// forwardToGuest sends r to a server in a VM through the engine's streamed
// fetch and streams its answer back, status, headers and body, each chunk
// of the body flushed as it comes.
func (s *Server) forwardToGuest(w http.ResponseWriter, r *http.Request, t guestTarget) {
	if r.ContentLength > MaxGuestRequestBytes {
		writeError(w, r, guestBodyTooLarge())
		return
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxGuestRequestBytes+1))
		if err != nil {
			writeError(w, r, gateway.Wrap(gateway.CodeInvalidArgument, err, "the request body could not be read"))
			return
		}
		if len(b) > MaxGuestRequestBytes {
			writeError(w, r, guestBodyTooLarge())
			return
		}
		if len(b) > 0 {
			body = b
		}
	}
	// Event streams from the guest end when this gateway shuts down, as its
	// own do.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-s.sse.Draining():
			cancel()
		case <-stop:
		}
	}()
	defer wg.Wait()
	defer close(stop)

	res, err := s.vms.Fetch(ctx, t.tenantID, t.vmID, vms.FetchRequest{
		Port: t.port, Method: r.Method, Path: t.path, Header: guestRequestHeader(r, t), Body: body,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer func() {
		if err := res.Close(); err != nil {
			zerolog.Ctx(r.Context()).Warn().Err(err).Msg("close a guest response")
		}
	}()
	if res.Status < 200 || res.Status > 599 {
		// An informational or out-of-range status would not end the
		// response as the guest meant; the engine's fetch has no upgrade.
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "the server on port %d answered with status %d, which the gateway does not forward", t.port, res.Status))
		return
	}
	h := w.Header()
	copyGuestHeader(h, res.Header, t.preview)
	if t.preview == previewPath {
		// A path-based preview shares the gateway's origin, and with it the
		// console's sessionStorage (where the console keeps its API key):
		// the sandbox gives the guest's page an opaque origin of its own,
		// while scripts, forms and popups work.
		// Added to the guest's own policies, which all apply.
		h.Add("Content-Security-Policy", previewSandbox)
	}
	if t.preview != previewNone {
		h.Set("Referrer-Policy", "no-referrer")
	}
	w.WriteHeader(res.Status)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, guestCopyBuffer)
	for {
		n, err := res.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			// The head is sent: all there is left to do is to end the
			// body early, which the client sees as a cut response.
			if ctx.Err() == nil {
				zerolog.Ctx(r.Context()).Warn().Err(err).Msg("guest response cut")
			}
			return
		}
	}
}

func guestBodyTooLarge() error {
	return gateway.Errorf(gateway.CodePayloadTooLarge, "a request body to a guest port may be at most %d bytes", MaxGuestRequestBytes).
		WithDetail("limit", MaxGuestRequestBytes)
}

// previewSandbox is the Content-Security-Policy of a path-based preview's
// responses (see forwardToGuest). It says nothing of framing: a preview is
// meant for an iframe.
const previewSandbox = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

// guestRequestHeader is what the guest sees of r's header: no hop-by-hop
// header, none of the gateway's credentials (the API key, the cluster's
// signature, a preview's cookie), and, through a path-based preview, no
// cookie at all (those of the gateway's origin are the console's).
func guestRequestHeader(r *http.Request, t guestTarget) http.Header {
	h := r.Header.Clone()
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	h.Del("Authorization")
	h.Del(cluster.ForwardedHeader)
	h.Del("Content-Length")
	switch t.preview {
	case previewPath:
		h.Del("Cookie")
	case previewHost:
		dropCookie(h, previewCookie)
	}
	h.Set("X-Forwarded-Host", r.Host)
	h.Set("X-Forwarded-Proto", requestScheme(r))
	if t.prefix != "" {
		h.Set("X-Forwarded-Prefix", t.prefix)
	}
	return h
}

// originWideHeaders are response headers that act on a whole origin, not
// one document: a path-based preview shares the gateway's, so the guest
// may not set cookies there, widen a service worker's scope, or clear the
// console's storage.
var originWideHeaders = []string{"Set-Cookie", "Service-Worker-Allowed", "Clear-Site-Data"}

// copyGuestHeader copies a guest's response header, without hop-by-hop
// headers; through a path-based preview, without originWideHeaders.
func copyGuestHeader(dst, src http.Header, kind previewKind) {
	for k, v := range src {
		dst[http.CanonicalHeaderKey(k)] = v
	}
	for _, f := range src.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		dst.Del(name)
	}
	if kind == previewPath {
		for _, name := range originWideHeaders {
			dst.Del(name)
		}
	}
}

// dropCookie removes one cookie from a request header, keeping the others.
func dropCookie(h http.Header, name string) {
	r := http.Request{Header: http.Header{"Cookie": h.Values("Cookie")}}
	var keep []string
	for _, c := range r.Cookies() {
		if c.Name != name {
			keep = append(keep, c.Name+"="+c.Value)
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// requestScheme is the scheme the client used: https when this server or
// the proxy in front of it terminated TLS.
func requestScheme(r *http.Request) string {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return "https"
	}
	return "http"
}
