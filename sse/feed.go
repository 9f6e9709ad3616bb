package sse

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	r3labs "github.com/r3labs/sse/v2"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// A shared feed serves every client of one source (a VM's events, a
// process's or a shell's output) from one r3labs stream, so that an idle
// client costs what r3labs keeps for a subscriber (its goroutine, its
// channel, the goroutine that waits for its request to end) and its socket,
// and nothing more:
//
//   - On HTTP/1.1 the connection is taken over from net/http once the
//     response head is written, which frees the request goroutine's deep
//     stack, its bufio reader and writers and its request state. r3labs
//     serves the client in a goroutine of its own, writing its frames to an
//     sseConn that sends each as one chunk.
//   - One pump per source follows its log and publishes each event once for
//     all its clients; one heartbeat timer per source.
//   - A client's backlog (what it asked for with Last-Event-ID, or the
//     log's retained events) is written by the client itself once r3labs
//     has registered it, so that it misses nothing published meanwhile;
//     the live events its backlog already had are dropped by their id
//     (final events share the id of the last entry, and come only live
//     unless the backlog had the end). So every client gets each event
//     exactly once and in order, from wherever it resumed.
//   - A client never slows the others: its frames go to a bounded queue
//     that a goroutine writes to its socket while there is something to
//     write. A client that leaves sseQueueLimit bytes unread falls behind:
//     it leaves the topic, and its writer follows the log itself from the
//     last event it queued, at the client's pace, as a stream of its own
//     would (a gap event where the log dropped what it had not read).
//   - One goroutine for all clients waits in epoll for clients hanging up
//     (Linux; elsewhere a goroutine per client reads its socket).
//
// Other protocols (HTTP/2, HTTP/1.0) get a stream of their own in the
// request, as every other stream does.

// Feed is an event source that many clients can follow at once. LogFeed is
// the one there is; its methods are the hub's business, so they are not
// exported.
type Feed interface {
	// source identifies what the feed follows: the clients of one source
	// share one stream.
	source() any
	// position is the id of the newest event now.
	position() uint64
	// follow emits the events after cursor until the source ends (its
	// final events included) or ctx ends.
	follow(ctx context.Context, after uint64, emit func(Event) error) error
	// backlog returns the events after cursor that follow would emit now,
	// without waiting, and whether they include the source's end.
	backlog(after uint64) (events []Event, done bool)
}

// LogFeed is the feed of a streamlog.Log, rendered as FollowLog renders it:
// the clients following one log share one stream.
type LogFeed[T any] struct {
	// Log is the source; its clients share one stream.
	Log *streamlog.Log[T]
	// Render makes the event of an entry.
	Render func(streamlog.Entry[T]) Event
	// OnEnd renders the final events once the log is closed (nil: EndEvent).
	OnEnd func(last uint64, err error) []Event
}

func (f LogFeed[T]) source() any      { return f.Log }
func (f LogFeed[T]) position() uint64 { return f.Log.LastSeq() }

func (f LogFeed[T]) follow(ctx context.Context, after uint64, emit func(Event) error) error {
	return FollowLog(ctx, f.Log, after, emit, f.Render, f.OnEnd)
}

func (f LogFeed[T]) backlog(after uint64) ([]Event, bool) {
	b := f.Log.Peek(after)
	var events []Event
	_, _ = emitBatch(b, after, func(e Event) error {
		events = append(events, e)
		return nil
	}, f.Render, f.OnEnd)
	return events, b.Done
}

const (
	// sseQueueLimit bounds the frames waiting for one client of a shared
	// feed before it falls behind.
	sseQueueLimit = 1 << 20
	// sseWriteTimeout bounds one write to a client's socket.
	sseWriteTimeout = 30 * time.Second
	// sseCloseTimeout bounds how long close waits for the shared feeds'
	// clients and pumps to end once they are cancelled.
	sseCloseTimeout = 10 * time.Second
)

// sseTopic is the r3labs stream of one source and the pump that feeds it.
type sseTopic struct {
	id     string
	source any
	cancel context.CancelFunc // ends the pump
	done   chan struct{}      // closed when the pump returned
	beat   *sseBeat

	// Under the hub's mu.
	clients map[*url.URL]*sseConn // by the URL r3labs keeps for each subscriber
	ended   bool                  // no client joins any more
}

// ServeFeed streams feed to the client of r from after. release (never
// nil) frees what the feed holds for this client; it runs when the stream
// is over. On HTTP/1.1 ServeFeed returns as soon as the stream started,
// and the stream goes on without the request.
func (h *Hub) ServeFeed(w http.ResponseWriter, r *http.Request, after uint64, feed Feed, release func()) {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		defer release()
		h.Serve(w, r, after, func(ctx context.Context, emit func(Event) error) error {
			return feed.follow(ctx, after, emit)
		})
		return
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing || h.drainCtx.Err() != nil {
		release()
		h.refuse(w, r, gateway.ErrShuttingDown)
		return
	}
	// The head r3labs would write; the connection is not net/http's to
	// reuse after the stream, so it says so.
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Connection", "close")
	for k, v := range h.srv.Headers {
		hdr.Set(k, v)
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var conn net.Conn
	err := rc.Flush()
	if err == nil {
		conn, _, err = rc.Hijack()
	}
	if err != nil {
		// The client left before the head was out, or the writer cannot be
		// taken over (a test's recorder): the head is sent either way, so
		// a private stream goes on through w, if anything can.
		defer release()
		h.serveAfterHead(w, r, after, feed)
		return
	}

	// The stream outlives the request, whose context net/http cancels when
	// the handler returns; it keeps nothing of it either (chi reuses its
	// routing context, and the rest would only cost memory).
	ctx, cancel := context.WithCancel(context.Background())
	followCtx, stop := context.WithCancel(h.drainCtx)
	c := &sseConn{hub: h, conn: conn, cancel: cancel, followCtx: followCtx, stop: stop, feed: feed, after: after, unsubscribed: make(chan struct{})}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		cancel()
		stop()
		_ = conn.Close()
		release()
		return
	}
	t := h.topicLocked(feed)
	c.topic = t
	u := &url.URL{RawQuery: "stream=" + t.id}
	t.clients[u] = c
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	h.onCount(1)
	go func() {
		defer h.wg.Done()
		defer h.onCount(-1)
		defer release()
		c.run(ctx, t, u)
	}()
}

// serveAfterHead is a private stream of feed through w, whose head was
// already written.
func (h *Hub) serveAfterHead(w http.ResponseWriter, r *http.Request, after uint64, feed Feed) {
	h.Serve(headSent{w}, r, after, func(ctx context.Context, emit func(Event) error) error {
		return feed.follow(ctx, after, emit)
	})
}

// headSent is a ResponseWriter whose head is already written.
type headSent struct{ http.ResponseWriter }

func (w headSent) WriteHeader(int) {}
func (w headSent) Flush()          { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// topicLocked returns the live topic of feed's source, started if there is
// none (h.mu held).
func (h *Hub) topicLocked(feed Feed) *sseTopic {
	if t, ok := h.topics[feed.source()]; ok {
		return t
	}
	ctx, cancel := context.WithCancel(h.drainCtx)
	t := &sseTopic{id: newStreamID(), source: feed.source(), cancel: cancel, done: make(chan struct{}),
		clients: map[*url.URL]*sseConn{}}
	stream := h.srv.CreateStream(t.id)
	stream.AutoReplay = false
	stream.OnUnsubscribe = func(_ string, sub *r3labs.Subscriber) {
		h.mu.Lock()
		c := t.clients[sub.URL]
		h.mu.Unlock()
		if c != nil {
			close(c.unsubscribed)
		}
	}
	h.topics[t.source] = t
	t.beat = newSSEBeat(h.heartbeat, func() { h.srv.TryPublish(t.id, &r3labs.Event{Comment: []byte("heartbeat")}) })
	h.wg.Add(1)
	go h.pump(ctx, t, feed, feed.position())
	return t
}

// pump publishes feed's events after from to t's clients until the source
// ends or t is stopped, then ends every client's stream.
func (h *Hub) pump(ctx context.Context, t *sseTopic, feed Feed, from uint64) {
	defer h.wg.Done()
	defer close(t.done)
	lastID := strconv.FormatUint(from, 10)
	publish := func(e Event) error {
		e = repeatID(&lastID, e)
		// Publish waits for r3labs's stream goroutine, which hands the
		// event to each client's r3labs goroutine; those only move frames
		// to their client's queue, so no client's socket holds the others.
		h.srv.Publish(t.id, &r3labs.Event{ID: []byte(e.ID), Event: []byte(e.Event), Data: e.Data})
		return ctx.Err()
	}
	_ = feed.follow(ctx, from, publish)
	h.mu.Lock()
	t.ended = true
	if h.topics[t.source] == t {
		delete(h.topics, t.source)
	}
	h.mu.Unlock()
	// No heartbeat may follow the end: a client whose r3labs loop ended
	// reads no more, and r3labs would wait for it.
	t.beat.stop()
	if h.drainCtx.Err() != nil {
		h.srv.Publish(t.id, &r3labs.Event{ID: []byte(lastID), Event: []byte("error"), Data: []byte(shutdownEventData)})
	}
	// An empty event makes r3labs end every client's response.
	h.srv.Publish(t.id, &r3labs.Event{})
}

// leave takes c off t; the last client out stops t's pump and removes its
// stream.
func (h *Hub) leave(t *sseTopic, u *url.URL, c *sseConn) {
	h.mu.Lock()
	delete(t.clients, u)
	delete(h.conns, c)
	last := len(t.clients) == 0
	if last {
		t.ended = true
		if h.topics[t.source] == t {
			delete(h.topics, t.source)
		}
	}
	h.mu.Unlock()
	if !last {
		return
	}
	t.cancel()
	// The pump may be waiting in Publish for the stream's goroutine, which
	// runs until RemoveStream.
	<-t.done
	t.beat.stop()
	h.srv.RemoveStream(t.id)
}

// sseConn is one client of a shared feed on a connection taken over from
// net/http: the http.ResponseWriter r3labs writes its frames to. Each frame
// (r3labs writes one in several Writes and then flushes) is sent as one
// HTTP/1.1 chunk.
type sseConn struct {
	hub    *Hub
	conn   net.Conn
	cancel context.CancelFunc // ends the client's r3labs subscription
	// followCtx is the context of the writer's own following of the log
	// once the client fell behind; stop cancels it.
	followCtx context.Context
	stop      context.CancelFunc
	feed      Feed
	topic     *sseTopic
	after     uint64
	// unsubscribed is closed when r3labs has removed the subscriber.
	unsubscribed chan struct{}

	// Only touched by the r3labs goroutine serving the client.
	registered bool // r3labs registered the client (it called WriteHeader)
	header     http.Header
	frame      *bytes.Buffer // the frame being written, until Flush
	skip       uint64        // live frames with an id up to this came in the backlog
	ended      bool          // the backlog had the source's end: no live frame is sent

	mu      sync.Mutex
	queue   []byte // chunks waiting to be written
	writing bool   // a writer goroutine runs
	through uint64 // the id of the last event queued
	final   bool   // a final event was queued: the stream's end is in the queue
	behind  bool   // the queue overflowed: the writer follows the log itself
	failed  bool   // a write failed: nothing more is sent
	gone    bool   // the client hung up
	closed  bool   // run is finishing: no writer starts
	writers sync.WaitGroup
}

var framePool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// run serves c until its stream ends, then frees everything it holds.
func (c *sseConn) run(ctx context.Context, t *sseTopic, u *url.URL) {
	h := c.hub
	stop := c.watch()
	req := (&http.Request{Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	h.srv.ServeHTTP(c, req)
	// r3labs's goroutine that waits for the request's end deregisters the
	// subscriber; only then may the topic's stream go.
	c.cancel()
	if c.registered {
		<-c.unsubscribed
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.writers.Wait()
	c.stop()
	c.mu.Lock()
	clean := !c.failed && !c.gone
	c.mu.Unlock()
	if clean {
		_ = c.conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		_, _ = c.conn.Write([]byte("0\r\n\r\n"))
	}
	stop()
	_ = c.conn.Close()
	h.leave(t, u, c)
}

// watch arranges for c to end when its client hangs up, and returns what
// stops that.
func (c *sseConn) watch() (stop func()) {
	hangUp := func() {
		c.mu.Lock()
		c.gone = true
		c.mu.Unlock()
		_ = c.conn.SetWriteDeadline(time.Now())
		c.cancel()
		c.stop()
	}
	if hu := c.hub.hangupWatch(); hu != nil {
		if stop, err := hu.watch(c.conn, hangUp); err == nil {
			return stop
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A client sends nothing on an event stream: a read returns when
		// it closes the connection, or when run closes it.
		var b [16]byte
		for {
			if _, err := c.conn.Read(b[:]); err != nil {
				hangUp()
				return
			}
		}
	}()
	return func() {
		_ = c.conn.SetReadDeadline(time.Now())
		<-done
	}
}

// Header is where r3labs sets the head it would write; the head is already
// out.
func (c *sseConn) Header() http.Header {
	if c.header == nil {
		c.header = http.Header{}
	}
	return c.header
}

// WriteHeader is called by r3labs once it has registered the client: from
// then on, every event published reaches it. The client's backlog is sent
// first, and the live events it covers are dropped.
func (c *sseConn) WriteHeader(int) {
	c.registered = true
	c.header = nil
	c.skip = c.after
	// Whether the topic's pump had ended is read before the backlog: a
	// pump ends after its source did, or when the gateway drains, and in
	// either case it may have published its last events before r3labs
	// registered this client.
	c.hub.mu.Lock()
	pumpEnded := c.topic.ended
	c.hub.mu.Unlock()
	events, done := c.feed.backlog(c.after)
	for _, e := range events {
		c.event(e)
		if n, err := strconv.ParseUint(e.ID, 10, 64); err == nil && n > c.skip {
			c.skip = n
		}
	}
	switch {
	case done:
		// The source ended before the client came: its backlog ends with
		// the final events, which the topic may publish again.
		c.ended = true
		c.cancel()
	case pumpEnded:
		// The gateway drains: the topic's shutdown event may have gone out
		// before the client was registered.
		c.event(Event{ID: strconv.FormatUint(c.skip, 10), Event: "error", Data: []byte(shutdownEventData)})
		c.ended = true
		c.cancel()
	}
}

// event queues e, a frame of the client's backlog.
func (c *sseConn) event(e Event) {
	writeFrame(c.buffer(), e)
	c.send(false)
}

// writeFrame writes e to f as r3labs writes an event without replay, base64
// or data splitting.
func writeFrame(f *bytes.Buffer, e Event) {
	f.WriteString("id: ")
	f.WriteString(e.ID)
	f.WriteString("\ndata: ")
	f.Write(e.Data)
	f.WriteByte('\n')
	if e.Event != "" {
		f.WriteString("event: ")
		f.WriteString(e.Event)
		f.WriteByte('\n')
	}
	f.WriteByte('\n')
}

func (c *sseConn) buffer() *bytes.Buffer {
	if c.frame == nil {
		c.frame = framePool.Get().(*bytes.Buffer)
	}
	return c.frame
}

func (c *sseConn) Write(b []byte) (int, error) { return c.buffer().Write(b) }

// Flush ends the frame r3labs wrote.
func (c *sseConn) Flush() { c.send(true) }

// send queues the frame written since the last one as a chunk; live frames
// the backlog already had are dropped.
func (c *sseConn) send(live bool) {
	f := c.frame
	if f == nil {
		return
	}
	c.frame = nil
	defer func() {
		f.Reset()
		framePool.Put(f)
	}()
	if f.Len() == 0 || (live && c.covered(f.Bytes())) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed || c.gone || c.behind {
		return
	}
	if len(c.queue)+f.Len() > sseQueueLimit {
		// The client reads slower than its source produces. It leaves the
		// topic, and its writer (running, since the queue is not empty)
		// goes on from the log once the queue is written.
		c.behind = true
		c.cancel()
		return
	}
	if id, event, ok := frameHead(f.Bytes()); ok {
		c.through = id
		c.final = c.final || finalEvents[event]
	}
	c.queue = appendChunk(c.queue, f.Bytes())
	if !c.writing && !c.closed {
		c.writing = true
		c.writers.Add(1)
		go c.write()
	}
}

// appendChunk appends frame to b as one HTTP/1.1 chunk.
func appendChunk(b, frame []byte) []byte {
	b = strconv.AppendInt(b, int64(len(frame)), 16)
	b = append(b, "\r\n"...)
	b = append(b, frame...)
	return append(b, "\r\n"...)
}

// write sends the queue to the socket until it is empty, then, if the
// client fell behind, follows the log from there.
func (c *sseConn) write() {
	defer c.writers.Done()
	for {
		c.mu.Lock()
		buf := c.queue
		c.queue = nil
		if c.failed || len(buf) == 0 {
			follow := c.behind && !c.final && !c.failed && !c.gone
			c.writing = false
			c.mu.Unlock()
			if follow {
				c.followBehind()
			}
			return
		}
		c.mu.Unlock()
		if !c.writeNow(buf) {
			return
		}
	}
}

// writeNow writes b to the socket; a failed write ends the client.
func (c *sseConn) writeNow(b []byte) bool {
	_ = c.conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.mu.Lock()
		c.failed = true
		c.mu.Unlock()
		c.cancel()
		c.stop()
		return false
	}
	return true
}

// followBehind streams the log to a client that fell behind from the last
// event it was sent, at its pace, until the log ends, the client goes or
// the gateway drains.
func (c *sseConn) followBehind() {
	c.mu.Lock()
	from := c.through
	c.mu.Unlock()
	lastID := strconv.FormatUint(from, 10)
	var chunk []byte
	emit := func(e Event) error {
		e = repeatID(&lastID, e)
		f := framePool.Get().(*bytes.Buffer)
		defer func() {
			f.Reset()
			framePool.Put(f)
		}()
		writeFrame(f, e)
		chunk = appendChunk(chunk[:0], f.Bytes())
		if !c.writeNow(chunk) {
			return errStreamWrite
		}
		return nil
	}
	err := c.feed.follow(c.followCtx, from, emit)
	if err != nil && !errors.Is(err, errStreamWrite) && c.hub.drainCtx.Err() != nil {
		_ = emit(Event{Event: "error", Data: []byte(shutdownEventData)})
	}
}

// errStreamWrite ends a client's own following of the log when a write to
// it failed.
var errStreamWrite = errors.New("write to the event stream failed")

// covered reports whether the backlog already had the live frame f.
func (c *sseConn) covered(f []byte) bool {
	if c.ended {
		return true
	}
	id, event, ok := frameHead(f)
	return ok && id <= c.skip && !finalEvents[event]
}

// finalEvents are the events a log feed ends with (EndEvent, a process's
// exit); they carry the id of the last entry before them.
var finalEvents = map[string]bool{"end": true, "error": true, "exit": true}

// frameHead returns the id and the event name of an event frame as r3labs
// writes it ("id: 42\ndata: ...\nevent: exit\n\n"); ok is false for a
// frame without an id (a heartbeat).
func frameHead(f []byte) (id uint64, event string, ok bool) {
	rest, found := bytes.CutPrefix(f, []byte("id: "))
	if !found {
		return 0, "", false
	}
	line, rest, _ := bytes.Cut(rest, []byte("\n"))
	id, err := strconv.ParseUint(string(line), 10, 64)
	if err != nil {
		return 0, "", false
	}
	// The data is JSON on one line, so the first event line is the event's.
	if _, after, found := bytes.Cut(rest, []byte("\nevent: ")); found {
		name, _, _ := bytes.Cut(after, []byte("\n"))
		event = string(name)
	}
	return id, event, true
}

// sseBeat publishes heartbeats from a timer, so that a topic needs no
// goroutine for them; stop waits for a beat in progress.
type sseBeat struct {
	mu      sync.Mutex
	timer   *time.Timer
	every   time.Duration
	publish func()
	stopped bool
	running sync.WaitGroup
}

func newSSEBeat(every time.Duration, publish func()) *sseBeat {
	b := &sseBeat{every: every, publish: publish}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running.Add(1)
	b.timer = time.AfterFunc(every, b.fire)
	return b
}

func (b *sseBeat) fire() {
	defer b.running.Done()
	b.publish()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		b.running.Add(1)
		b.timer.Reset(b.every)
	}
}

// stop ends the heartbeats; none is published after it returns.
func (b *sseBeat) stop() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		if b.timer.Stop() {
			b.running.Done()
		}
	}
	b.mu.Unlock()
	b.running.Wait()
}
