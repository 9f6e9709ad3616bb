package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/attach"
	"github.com/agentos-gateway/agentos-gateway/cluster"
)

// forwardedKey marks, in a request's context, a request another node
// forwarded and signed: it is served here, never forwarded again, and was
// rate-limited by the node the client called.
type forwardedKey struct{}

func isForwarded(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey{}).(bool)
	return v
}

// shutdownEventData is the data of the final error event of a proxied
// stream when this gateway shuts down: the event its own streams end with.
var shutdownEventData = func() string {
	b, _ := json.Marshal(api.ErrorEvent{Code: gateway.ErrorCode(gateway.ErrShuttingDown), Detail: gateway.ErrorMessage(gateway.ErrShuttingDown)})
	return string(b)
}()

// newProxyTransport is the transport of calls to other nodes: a dead node
// is found out by a short dial timeout, while answers may take as long as
// the operation they answer (an exec) and are streamed.
func newProxyTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// nodeHeader names this node on every response, and checks the signature
// of requests other nodes forward: a request claiming to be forwarded that
// is not signed with the cluster secret is refused.
func (s *Server) nodeHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Cluster == nil {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set(cluster.NodeHeader, s.cfg.Cluster.ID())
		if !cluster.Forwarded(r) {
			next.ServeHTTP(w, r)
			return
		}
		from, err := s.cfg.Cluster.Verify(r)
		if err != nil {
			zerolog.Ctx(r.Context()).Warn().Err(err).Msg("refused a forwarded request")
			writeError(w, r, gateway.Wrap(gateway.CodeUnauthenticated, err, "the request claims to come from another gateway node but is not signed with the cluster secret"))
			return
		}
		log := zerolog.Ctx(r.Context()).With().Str("forwardedBy", from).Logger()
		ctx := context.WithValue(log.WithContext(r.Context()), forwardedKey{}, true)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// proxying reports whether requests may go to other nodes.
func (s *Server) proxying(r *http.Request) bool {
	return s.cfg.Cluster != nil && s.cfg.Cluster.Shared() && !isForwarded(r.Context())
}

// toOwner serves a request for a VM on the node that runs it: here when
// this node does (or nobody does any more: the record answers), through a
// proxy to the owner when it is another live node (remoteOwner).
func (s *Server) toOwner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := pathParam(r, "vm")
		peer, remote, err := s.remoteOwner(r, principalFrom(r.Context()).tenant.ID, id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if !remote {
			next.ServeHTTP(w, r)
			return
		}
		s.proxy(w, r, peer, func(w http.ResponseWriter, r *http.Request, since time.Time) {
			// The owner did not answer. Once it is known dead its VMs are
			// lost in the store: a read is answered from there; anything
			// else gets the lost VM's conflict, as the body may be spent.
			if s.cfg.Cluster.AwaitVerdict(r.Context(), peer.ID, since) {
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					next.ServeHTTP(w, r)
					return
				}
				if err := s.vms.Usable(r.Context(), principalFrom(r.Context()).tenant.ID, id); err != nil {
					writeError(w, r, err)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "node %s, which runs VM %s, does not answer", peer.ID, id).WithDetail("node", peer.ID))
		})
	})
}

// remoteOwner returns the node that runs a tenant's VM when the request is
// to be proxied there: another live node. remote is false when this node
// serves it: it runs the VM, or nobody does any more (the record answers).
// The VMs of a node that stopped heartbeating are marked lost first, so
// they answer lost rather than a proxy error.
func (s *Server) remoteOwner(r *http.Request, tenantID, vmID string) (peer cluster.Peer, remote bool, err error) {
	if !s.proxying(r) || s.vms.Runs(vmID) {
		return cluster.Peer{}, false, nil
	}
	vm, err := s.vms.Get(r.Context(), tenantID, vmID)
	if err != nil || vm.Node == "" || vm.Node == s.cfg.Cluster.ID() || vm.State.Final() {
		return cluster.Peer{}, false, nil
	}
	peer, err = s.cfg.Cluster.Peer(r.Context(), vm.Node)
	if err != nil {
		return cluster.Peer{}, false, err
	}
	if !peer.Alive {
		return cluster.Peer{}, false, s.cfg.Cluster.ReapNow(r.Context())
	}
	return peer, true, nil
}

// placeCreate sends POST /v1/vms to the least-loaded live node that is not
// draining (cluster.Rank): served here when that is this node, proxied
// otherwise; a node that does not answer is skipped for the next one.
func (s *Server) placeCreate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.proxying(r) {
			next.ServeHTTP(w, r)
			return
		}
		candidates, err := s.cfg.Cluster.Candidates(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		if len(candidates) == 0 {
			writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "no live gateway node takes new VMs (all are draining or dead)"))
			return
		}
		// The body is small (MaxBodyBytes) and may be sent more than once.
		body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
		if err != nil {
			writeError(w, r, gateway.Wrap(gateway.CodeInvalidArgument, err, "the request body could not be read"))
			return
		}
		reset := func() {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		for _, c := range candidates {
			reset()
			if c.ID == s.cfg.Cluster.ID() {
				next.ServeHTTP(w, r)
				return
			}
			answered := true
			s.proxy(w, r, cluster.Peer{ID: c.ID, AdvertiseAddr: c.AdvertiseAddr, Alive: true}, func(http.ResponseWriter, *http.Request, time.Time) {
				answered = false
			})
			if answered || r.Context().Err() != nil {
				return
			}
			zerolog.Ctx(r.Context()).Warn().Str("node", c.ID).Msg("node does not answer; placing the VM on the next one")
		}
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "no live gateway node answered the create"))
	})
}

// proxy forwards r to peer and streams the answer back: bodies both ways
// without buffering, every write of an event stream flushed at once, and
// WebSocket upgrades passed through (httputil.ReverseProxy). failed is
// called, with nothing written yet, when the peer gives no answer.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, peer cluster.Peer, failed func(http.ResponseWriter, *http.Request, time.Time)) {
	target, err := url.Parse(peer.AdvertiseAddr)
	if err != nil || target.Host == "" {
		writeError(w, r, gateway.Errorf(gateway.CodeInternal, "node %s advertises an invalid address", peer.ID))
		return
	}
	since := time.Now()
	// The owner names itself and gives the request id and CORS answers;
	// what this node set already would be repeated. The rate-limit headers
	// are this node's: the owner does not limit forwarded requests. When
	// the owner gives no answer, this node answers with its own again.
	own := w.Header().Clone()
	for k := range w.Header() {
		if !strings.HasPrefix(k, "Ratelimit-") && k != "Retry-After" {
			w.Header().Del(k)
		}
	}
	// Streams and WebSockets end when this gateway shuts down, as its own
	// do; other requests get the shutdown's grace period to finish.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	var streaming atomic.Bool
	upgrade := attach.IsUpgrade(r)
	if upgrade {
		if !s.attach.Begin() {
			writeError(w, r, gateway.ErrShuttingDown)
			return
		}
		defer s.attach.End()
		streaming.Store(true)
	}
	go func() {
		select {
		case <-s.sse.Draining():
			if streaming.Load() {
				cancel(gateway.ErrShuttingDown)
			}
		case <-ctx.Done():
		}
	}()
	r = r.WithContext(ctx)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The Host the client used: the owner's same-origin checks of
			// WebSocket upgrades compare Origin with it.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Request-ID", requestID(pr.In.Context()))
			s.cfg.Cluster.Sign(pr.Out)
		},
		Transport:     s.proxyTransport,
		FlushInterval: -1,
		BufferPool:    proxyBuffers,
		ErrorLog:      stdlog.New(zerologWriter{zerolog.Ctx(r.Context())}, "", 0),
		ModifyResponse: func(res *http.Response) error {
			if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				streaming.Store(true)
				res.Body = &streamGuard{body: res.Body, ctx: res.Request.Context(), lost: func(ctx context.Context) bool {
					return s.cfg.Cluster.AwaitVerdict(ctx, peer.ID, since)
				}, node: peer.ID}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			zerolog.Ctx(r.Context()).Warn().Err(err).Str("node", peer.ID).Msg("proxy to the owner node")
			maps.Copy(w.Header(), own)
			failed(w, r, since)
		},
	}
	rp.ServeHTTP(w, r)
}

// proxyBuffers are the copy buffers of proxied bodies: with every write of
// an event stream flushed, larger reads mean fewer, fuller writes when the
// owner sends faster than one event at a time.
var proxyBuffers = &bufferPool{size: 256 << 10}

// bufferPool is a sync.Pool of byte slices, as httputil.BufferPool wants.
type bufferPool struct {
	size int
	pool sync.Pool
}

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, p.size)
}

func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// zerologWriter lets the reverse proxy's log go to the request's logger.
type zerologWriter struct{ l *zerolog.Logger }

func (z zerologWriter) Write(p []byte) (int, error) {
	z.l.Warn().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// streamGuard is the body of an event stream proxied from another node.
// It passes on whole events only (up to each blank line), holding back an
// event still arriving. When the stream breaks off (the owner's connection
// ends without the stream's end) and the owner turns out dead, the event in
// flight is dropped and the stream ends with a "lost" event, as if the VM
// had been lost here; when the owner is alive the stream just breaks, and
// the client resumes with Last-Event-ID.
type streamGuard struct {
	body io.ReadCloser
	ctx  context.Context
	lost func(context.Context) bool
	node string

	buf   []byte
	held  []byte // the start of an event not complete yet
	out   []byte // what is to be read before anything else
	final error  // once set, what Read returns after out
}

func (g *streamGuard) Read(p []byte) (int, error) {
	for {
		if len(g.out) > 0 {
			n := copy(p, g.out)
			g.out = g.out[n:]
			return n, nil
		}
		if g.final != nil {
			return 0, g.final
		}
		if len(g.held) == 0 && len(p) > 0 {
			// Nothing held back (the usual case: the owner writes whole
			// events): read into p and pass on its whole events as they are.
			n, err := g.body.Read(p)
			whole := afterLastEvent(p[:n])
			g.held = append(g.held, p[whole:n]...)
			if err != nil {
				g.end(err)
			}
			if whole > 0 {
				return whole, nil
			}
			continue
		}
		if g.buf == nil {
			g.buf = make([]byte, 32<<10)
		}
		n, err := g.body.Read(g.buf)
		g.held = append(g.held, g.buf[:n]...)
		if whole := afterLastEvent(g.held); whole > 0 {
			g.out = append(g.out[:0], g.held[:whole]...)
			g.held = append(g.held[:0], g.held[whole:]...)
		}
		if err != nil {
			g.end(err)
		}
	}
}

// end decides how the stream ends after the owner's body returned err.
func (g *streamGuard) end(err error) {
	switch {
	case errors.Is(context.Cause(g.ctx), gateway.ErrShuttingDown):
		// As this gateway's own streams end when it shuts down.
		g.out = append(g.out, "event: error\ndata: "+shutdownEventData+"\n\n"...)
		g.final = io.EOF
	case errors.Is(err, io.EOF) || g.ctx.Err() != nil:
		g.out = append(g.out, g.held...)
		g.final = err
	case g.lost(g.ctx):
		g.out = append(g.out, lostEvent(g.node)...)
		g.final = io.EOF
	default:
		g.final = err
	}
	g.held = nil
}

// afterLastEvent is the length of the whole events at the start of b: up to
// its last blank line.
func afterLastEvent(b []byte) int {
	if i := bytes.LastIndex(b, []byte("\n\n")); i >= 0 {
		return i + 2
	}
	return 0
}

// lostEvent is the final event of a stream whose owner node died.
func lostEvent(node string) []byte {
	data, _ := json.Marshal(api.LostEvent{
		Code: gateway.CodeConflict, State: gateway.VMLost, Node: node,
		Detail: "the VM is lost: its node " + node + " stopped answering",
	})
	return fmt.Appendf(nil, "event: lost\ndata: %s\n\n", data)
}

func (g *streamGuard) Close() error { return g.body.Close() }
