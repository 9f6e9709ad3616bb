// Package nodeproxy forwards a request to the gateway node that serves it,
// when gateways share a store: the answer is streamed back as it comes
// (event streams flushed event by event, WebSockets passed through), the
// request is signed with the cluster secret, and a proxied event stream
// whose owner node dies mid-stream ends with a "lost" event rather than a
// broken connection. Proxied streams and WebSockets end when this gateway
// shuts down, as its own do.
//
// Which node serves a request is the HTTP layer's decision; this package
// only carries the request there and the answer back, so it needs nothing
// of the cluster but a signature and a verdict on a node that stopped
// answering (Cluster).
package nodeproxy

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
	"github.com/agentos-gateway/agentos-gateway/tracing"
)

// Cluster is what the proxy needs of the node's cluster membership;
// *cluster.Node satisfies it.
type Cluster interface {
	// Sign marks a forwarded request as coming from a node of the
	// cluster, with the cluster secret.
	Sign(r *http.Request)
	// AwaitVerdict reports whether node id is dead, waiting until that is
	// known for a node that has not answered since the time given.
	AwaitVerdict(ctx context.Context, id string, since time.Time) bool
}

// Conns counts the connections that outlive their request (WebSockets),
// which net/http stops tracking once they are upgraded, so that shutdown
// waits for the proxied ones as for the node's own; *attach.Hub satisfies
// it.
type Conns interface {
	// Begin counts a connection, or reports false once the gateway is
	// closing.
	Begin() bool
	// End uncounts a connection Begin counted.
	End()
}

// Config configures a Proxy.
type Config struct {
	// Cluster signs forwarded requests and tells whether a node that does
	// not answer is dead.
	Cluster Cluster
	// Conns counts the WebSockets passed through.
	Conns Conns
	// IsUpgrade reports whether a request asks for a WebSocket.
	IsUpgrade func(r *http.Request) bool
	// Draining is closed when the gateway begins to shut down: proxied
	// streams and WebSockets end then, other requests get the shutdown's
	// grace period to finish.
	Draining <-chan struct{}
	// Refuse answers a request the proxy will not forward with its error:
	// the HTTP layer writes its errors in one place, so the proxy hands
	// them back.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
	// RequestID is the id of the request in ctx, passed on to the owner so
	// that both nodes log the request under one id.
	RequestID func(ctx context.Context) string
}

// Node is a node a request is forwarded to.
type Node struct {
	// ID names the node, for logs, errors and its verdict.
	ID string
	// Addr is the base URL the node advertises to the others.
	Addr string
}

// Proxy forwards requests to other nodes over one pool of connections.
type Proxy struct {
	cfg       Config
	transport *http.Transport
}

// New returns a proxy; Close frees its idle connections.
func New(cfg Config) *Proxy {
	return &Proxy{cfg: cfg, transport: newProxyTransport()}
}

// Close closes the connections to other nodes that are idle; call it once
// the HTTP server stopped.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

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

// Forward forwards r to peer and streams the answer back: bodies both ways
// without buffering, every write of an event stream flushed at once, and
// WebSocket upgrades passed through (httputil.ReverseProxy). failed is
// called, with nothing written yet, when the peer gives no answer, with the
// time the request was sent.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request, peer Node, failed func(w http.ResponseWriter, r *http.Request, since time.Time)) {
	target, err := url.Parse(peer.Addr)
	if err != nil || target.Host == "" {
		p.cfg.Refuse(w, r, gateway.Errorf(gateway.CodeInternal, "node %s advertises an invalid address", peer.ID))
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
	upgrade := p.cfg.IsUpgrade(r)
	if upgrade {
		if !p.cfg.Conns.Begin() {
			p.cfg.Refuse(w, r, gateway.ErrShuttingDown)
			return
		}
		defer p.cfg.Conns.End()
		streaming.Store(true)
	}
	go func() {
		select {
		case <-p.cfg.Draining:
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
			pr.Out.Header.Set("X-Request-ID", p.cfg.RequestID(pr.In.Context()))
			// The owner's span of the request is a child of this node's.
			tracing.Inject(pr.In.Context(), pr.Out.Header)
			p.cfg.Cluster.Sign(pr.Out)
		},
		Transport:     p.transport,
		FlushInterval: -1,
		BufferPool:    proxyBuffers,
		ErrorLog:      stdlog.New(zerologWriter{zerolog.Ctx(r.Context())}, "", 0),
		ModifyResponse: func(res *http.Response) error {
			if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				streaming.Store(true)
				res.Body = &streamGuard{body: res.Body, ctx: res.Request.Context(), lost: func(ctx context.Context) bool {
					return p.cfg.Cluster.AwaitVerdict(ctx, peer.ID, since)
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
