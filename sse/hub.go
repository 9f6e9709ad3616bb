// Package sse serves Server-Sent Events for the gateway: Hub runs every
// event stream (heartbeats, resumption with Last-Event-ID, a final event
// when the gateway shuts down), over r3labs/sse for a stream of its own per
// connection, and its shared feeds serve all the clients of one
// streamlog.Log from one pump, off the request and without a goroutine per
// client, so that an idle client costs little more than its socket.
//
// It knows nothing of VMs or tenants: a stream is a pump function, and a
// shared feed is a log with a function that renders its entries as events.
// Keeping this machinery apart from the routes lets the HTTP handlers stay
// endpoint code, and lets the streams be tested on their own.
package sse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"time"

	r3labs "github.com/r3labs/sse/v2"
	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Event is one event to send. An empty ID sends no id line; the events
// the gateway sends always carry one so a client's Last-Event-ID stays a
// position it can resume from.
type Event struct {
	ID    string
	Event string
	Data  []byte
}

// Hub serves Server-Sent Events through r3labs/sse, configured against
// its defaults: no replay log (resume comes from the gateway's own bounded
// logs and sequence numbers), non-blocking publishes, and heartbeats. A
// stream of its own serves each connection, so a slow client can only ever
// slow itself, except for the shared feeds (see feed.go), whose clients
// share one pump per source and are served off the request.
type Hub struct {
	srv       *r3labs.Server
	heartbeat time.Duration
	onCount   func(delta int)
	refuse    func(w http.ResponseWriter, r *http.Request, err error)
	log       zerolog.Logger
	// drainCtx is cancelled when the gateway shuts down: every stream ends
	// with a final error event.
	drainCtx context.Context
	drain    context.CancelFunc
	draining <-chan struct{} // drainCtx.Done()

	mu      sync.Mutex
	closing bool                  // close was called: no shared feed starts
	topics  map[any]*sseTopic     // the shared feeds' live topics, by source
	conns   map[*sseConn]struct{} // the shared feeds' clients
	wg      sync.WaitGroup        // the shared feeds' pumps and clients
	// hangups is started with the first connection taken over; nil after
	// a failed start (a goroutine per connection watches its socket).
	hangups        *hangups
	hangupsStarted bool
}

// shutdownEventData is the data of the final error event of every stream
// when the gateway shuts down.
const shutdownEventData = `{"code":"unavailable","detail":"the gateway is shutting down"}`

// sseBuffer is how many events may wait between the gateway and one client's
// socket before the gateway stops reading ahead for it.
const sseBuffer = 64

// Config configures a Hub.
type Config struct {
	// Heartbeat is the period of the comment lines that keep idle streams
	// open through proxies and tell a client its stream is alive.
	Heartbeat time.Duration
	// OnCount, when set, is told of every stream that opens (+1) and
	// closes (-1), for the subscriber gauge.
	OnCount func(delta int)
	// Refuse answers a request for a stream the hub will not start because
	// the gateway is shutting down (gateway.ErrShuttingDown): the HTTP
	// layer writes its errors in one place, so the hub hands them back
	// (nil: a plain-text 503).
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
	// Log receives the hub's own warnings.
	Log zerolog.Logger
}

// NewHub returns a hub that serves streams until Close.
func NewHub(cfg Config) *Hub {
	heartbeat, onCount, log := cfg.Heartbeat, cfg.OnCount, cfg.Log
	srv := r3labs.New()
	srv.AutoReplay = false
	srv.AutoStream = false
	srv.BufferSize = sseBuffer
	srv.EncodeBase64 = false
	srv.SplitData = false
	srv.Headers = map[string]string{"X-Accel-Buffering": "no"}
	if onCount == nil {
		onCount = func(int) {}
	}
	if cfg.Refuse == nil {
		cfg.Refuse = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, gateway.ErrorMessage(err), http.StatusServiceUnavailable)
		}
	}
	h := &Hub{srv: srv, heartbeat: heartbeat, onCount: onCount, refuse: cfg.Refuse, log: log,
		topics: map[any]*sseTopic{}, conns: map[*sseConn]struct{}{}}
	// drain ends every stream with a final "error" event saying the
	// gateway is shutting down, so clients know to reconnect elsewhere or
	// later.
	h.drainCtx, h.drain = context.WithCancel(context.Background())
	h.draining = h.drainCtx.Done()
	return h
}

// Drain ends every open stream with a final event saying the gateway is
// shutting down, so that clients know to reconnect elsewhere or later and
// the handlers serving streams return; shared feeds asked for after it are
// refused. Call it when shutdown begins, before the HTTP server waits for
// its requests.
func (h *Hub) Drain() { h.drain() }

// Draining is closed once Drain was called: the other long-lived
// connections (WebSockets, proxied streams) end on it too.
func (h *Hub) Draining() <-chan struct{} { return h.draining }

// Close ends every stream (after Drain, with its final event) and waits, up
// to sseCloseTimeout, for the shared feeds' clients to be over; no shared
// feed starts after it. Clients get sseFinalGrace to take their final
// events before the sockets of those still being written to are cut.
func (h *Hub) Close() {
	h.drain()
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(sseFinalGrace):
		// The drain ended every stream; the clients left are being written
		// to and do not read (or read too slowly to take their ends).
		h.mu.Lock()
		for c := range h.conns {
			_ = c.conn.SetWriteDeadline(time.Now())
			c.end()
			c.stop()
		}
		h.mu.Unlock()
		select {
		case <-done:
		case <-time.After(sseCloseTimeout):
			// What is still ending keeps the hang-up watch and r3labs's streams.
			h.log.Warn().Msg("event streams still ending after the close timeout")
			return
		}
	}
	h.mu.Lock()
	hu := h.hangups
	h.mu.Unlock()
	if hu != nil {
		hu.close()
	}
	h.srv.Close()
}

// hangupWatch returns the hang-up watch, started on first use, or nil where
// it cannot run.
func (h *Hub) hangupWatch() *hangups {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.hangupsStarted {
		h.hangupsStarted = true
		hu, err := newHangups()
		if err != nil {
			h.log.Warn().Err(err).Msg("event streams watch their sockets with one goroutine each")
		}
		h.hangups = hu
	}
	return h.hangups
}

// Serve streams the events produced by pump until pump returns (the stream's
// end: its final events are delivered first) or the client goes away (pump's
// context is cancelled). Every resource of the connection is freed when it
// returns.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, resumeID uint64, pump func(ctx context.Context, emit func(Event) error) error) {
	id := newStreamID()
	stream := h.srv.CreateStream(id)
	stream.AutoReplay = false
	// Events published before r3labs registers the subscriber would be
	// dropped, so pumping starts only once it has.
	subscribed := make(chan struct{})
	stream.OnSubscribe = func(string, *r3labs.Subscriber) { close(subscribed) }
	// r3labs deregisters a subscriber from a goroutine of its own once the
	// request context ends; removing the stream before that has happened
	// would leave that goroutine blocked for ever, so removal waits for it.
	unsubscribed := make(chan struct{})
	stream.OnUnsubscribe = func(string, *r3labs.Subscriber) { close(unsubscribed) }
	h.onCount(1)
	defer h.onCount(-1)
	defer func() {
		select {
		case <-unsubscribed:
		case <-time.After(5 * time.Second):
		}
		h.srv.RemoveStream(id)
	}()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	publish := func(ev *r3labs.Event) error {
		// TryPublish never blocks; a full buffer means this client reads
		// slowly, and only this connection's pump waits for it.
		for !h.srv.TryPublish(id, ev) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	// lastID is only touched by the pump goroutine (see repeatID).
	var lastID string
	if resumeID > 0 {
		lastID = strconv.FormatUint(resumeID, 10)
	}
	emit := func(e Event) error {
		e = repeatID(&lastID, e)
		return publish(&r3labs.Event{ID: []byte(e.ID), Event: []byte(e.Event), Data: e.Data})
	}
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		select {
		case <-subscribed:
		case <-ctx.Done():
			return
		}
		hb := time.NewTicker(h.heartbeat)
		defer hb.Stop()
		pumpDone := make(chan struct{})
		go func() {
			defer close(pumpDone)
			pctx, cancelPump := context.WithCancel(ctx)
			defer cancelPump()
			go func() {
				select {
				case <-h.draining:
					cancelPump()
				case <-pctx.Done():
				}
			}()
			_ = pump(pctx, emit)
			select {
			case <-h.draining:
				if ctx.Err() == nil {
					_ = emit(Event{Event: "error", Data: []byte(shutdownEventData)})
				}
			default:
			}
			// An empty event makes r3labs end the response after everything
			// published before it was written.
			_ = publish(&r3labs.Event{})
		}()
		for {
			select {
			case <-pumpDone:
				return
			case <-hb.C:
				_ = publish(&r3labs.Event{Comment: []byte("heartbeat")})
			}
		}
	}()

	r2 := r.WithContext(ctx)
	q := r2.URL.Query()
	q.Set("stream", id)
	u := *r2.URL
	u.RawQuery = q.Encode()
	r2.URL = &u
	// Resume positions are the gateway's own; r3labs must not see them.
	r2.Header = r.Header.Clone()
	r2.Header.Del("Last-Event-ID")
	h.srv.ServeHTTP(w, r2)
	cancel()
	<-pumped
}

// repeatID gives an event without an id the id of the one before it (last,
// which it updates): r3labs writes an id line for every event, and an empty
// one would reset the client's resume position.
func repeatID(last *string, e Event) Event {
	if e.ID == "" {
		e.ID = *last
	}
	*last = e.ID
	return e
}

func newStreamID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LastEventID parses Last-Event-ID (header, or the lastEventId query
// parameter for clients that cannot set headers) as a sequence number: the
// position a client resumes from. ok is false when the client gave none.
func LastEventID(r *http.Request) (uint64, bool, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, gateway.Wrap(gateway.CodeInvalidArgument, err, "Last-Event-ID must be an event id: a non-negative integer").WithDetail("field", "Last-Event-ID")
	}
	return n, true, nil
}
