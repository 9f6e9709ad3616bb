package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/cluster"
)

// forwardedKey marks, in a request's context, a request another node
// forwarded and signed: it is served here, never forwarded again, and was
// rate-limited by the node the client called.
const forwardedKey ctxKey = 100

func isForwarded(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey).(bool)
	return v
}

// newProxyTransport is the transport of calls to other nodes: a dead node
// is found out by a short dial timeout, while answers may take as long as
// the operation they answer (an exec) and are streamed.
func newProxyTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
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
		ctx := context.WithValue(log.WithContext(r.Context()), forwardedKey, true)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// proxying reports whether requests may go to other nodes.
func (s *Server) proxying(r *http.Request) bool {
	return s.cfg.Cluster != nil && s.cfg.Cluster.Shared() && !isForwarded(r.Context())
}

// toOwner serves a request for a VM on the node that runs it: here when
// this node does (or nobody does any more: the record answers), through a
// proxy to the owner when it is another live node. The VMs of a node that
// stopped heartbeating are marked lost first, so they answer lost rather
// than a proxy error.
func (s *Server) toOwner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := pathParam(r, "vm")
		if !s.proxying(r) || s.vms.Runs(id) {
			next.ServeHTTP(w, r)
			return
		}
		vm, err := s.vms.Get(r.Context(), principalFrom(r.Context()).tenant.ID, id)
		if err != nil || vm.Node == "" || vm.Node == s.cfg.Cluster.ID() || vm.State.Final() {
			next.ServeHTTP(w, r)
			return
		}
		peer, err := s.cfg.Cluster.Peer(r.Context(), vm.Node)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if !peer.Alive {
			if err := s.cfg.Cluster.ReapNow(r.Context()); err != nil {
				writeError(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		s.proxy(w, r, peer, func(w http.ResponseWriter, r *http.Request, since time.Time) {
			// The owner did not answer. Once it is known dead its VMs are
			// lost in the store and the local handler says so.
			if s.cfg.Cluster.AwaitVerdict(r.Context(), peer.ID, since) {
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
			s.proxy(w, r, cluster.Peer{ID: c.ID, AdvertiseAddr: c.AdvertiseAddr, Alive: true, State: c.State}, func(http.ResponseWriter, *http.Request, time.Time) {
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
	// are this node's: the owner does not limit forwarded requests.
	for k := range w.Header() {
		if !strings.HasPrefix(k, "Ratelimit-") && k != "Retry-After" {
			w.Header().Del(k)
		}
	}
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
// When the stream breaks off (the owner's connection ends without the
// stream's end) and the owner turns out dead, the stream ends with a
// "lost" event, as if the VM had been lost here; when the owner is alive
// the stream just ends and the client resumes with Last-Event-ID.
type streamGuard struct {
	body io.ReadCloser
	ctx  context.Context
	lost func(context.Context) bool
	node string

	last2   [2]byte
	tail    []byte
	pending error
}

func (g *streamGuard) Read(p []byte) (int, error) {
	if g.tail != nil {
		n := copy(p, g.tail)
		g.tail = g.tail[n:]
		if len(g.tail) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	if g.pending != nil {
		return g.verdict()
	}
	n, err := g.body.Read(p)
	switch {
	case n >= 2:
		g.last2 = [2]byte{p[n-2], p[n-1]}
	case n == 1:
		g.last2 = [2]byte{g.last2[1], p[0]}
	}
	if err == nil || errors.Is(err, io.EOF) || g.ctx.Err() != nil {
		return n, err
	}
	g.pending = err
	if n > 0 {
		return n, nil
	}
	return g.verdict()
}

// verdict decides how a broken stream ends.
func (g *streamGuard) verdict() (int, error) {
	err := g.pending
	if !g.lost(g.ctx) {
		return 0, err
	}
	data, _ := json.Marshal(map[string]string{
		"code": string(gateway.CodeConflict), "state": string(gateway.VMLost), "node": g.node,
		"detail": "the VM is lost: its node " + g.node + " stopped answering",
	})
	var b bytes.Buffer
	if g.last2 != [2]byte{'\n', '\n'} {
		// End the event the owner was writing when it died.
		b.WriteString("\n\n")
	}
	b.WriteString("event: lost\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	g.tail = b.Bytes()
	return 0, nil
}

func (g *streamGuard) Close() error { return g.body.Close() }
