package sse

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// A shared feed serves every client of one source (a VM's events, a
// process's or a shell's output) from one pump, so that an idle client costs
// its socket and a few hundred bytes of state, and no goroutine:
//
//   - On HTTP/1.1 the connection is taken over from net/http once the
//     response head is written, which frees the request goroutine's deep
//     stack, its bufio reader and writers and its request state.
//   - One pump per source follows its log and renders each event once, as
//     one frame for all its clients, which it queues to each; one heartbeat
//     timer per source. A client's queue is written to its socket by a
//     goroutine that lives while there is something to write.
//   - A client's backlog (what it asked for with Last-Event-ID, or the
//     log's retained events) is queued when it joins, between two events
//     the pump publishes; the live events its backlog already had are
//     dropped by their id (final events share the id of the last entry,
//     and come only live unless the backlog had the end). So every client
//     gets each event exactly once and in order, from wherever it resumed.
//   - A client never slows the others: a client that leaves sseQueueLimit
//     bytes unread falls behind: it leaves the topic, and its writer
//     follows the log itself from the last event it queued, at the client's
//     pace, as a stream of its own would (a gap event where the log dropped
//     what it had not read).
//   - One goroutine for all clients waits in epoll for clients hanging up
//     (Linux; elsewhere a goroutine per client reads its socket). A client
//     that ends (it hung up, its source ended, the gateway drains) is
//     finished by a goroutine started then.
//
// Other protocols (HTTP/2, HTTP/1.0) get an r3labs stream of their own in
// the request, as every other stream does.

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
	// sseFinalGrace is how long close lets clients read their final
	// events before it cuts those still being written to.
	sseFinalGrace = 2 * time.Second
)

// sseTopic is the pump of one source and the clients it publishes to.
type sseTopic struct {
	source any
	cancel context.CancelFunc // ends the pump
	done   chan struct{}      // closed when the pump returned
	beat   *sseBeat
	// members counts the clients that joined and have not left, under the
	// hub's mu: the last one out stops the pump.
	members int

	// mu orders the clients' joining with the frames published: a client
	// gets its backlog, then every frame published after it joined.
	mu      sync.Mutex
	clients map[*sseConn]struct{} // the clients frames are queued to
	ended   bool                  // the pump published its last frames
}

// liveFrame is a frame the pump publishes to every client, rendered once.
type liveFrame struct {
	b     []byte
	id    uint64
	event string
	hasID bool // heartbeats have no id
}

// heartbeatFrame is the comment line a heartbeat sends, as r3labs writes
// it on the other streams.
var heartbeatFrame = liveFrame{b: []byte(": heartbeat\n\n")}

// newLiveFrame renders e once, with the id and name that deliver and send
// read: from e itself, not parsed back from the frame. An id that is not a
// sequence number (none) makes a frame without one, as a heartbeat.
func newLiveFrame(e Event) liveFrame {
	f := framePool.Get().(*bytes.Buffer)
	defer func() {
		f.Reset()
		framePool.Put(f)
	}()
	writeFrame(f, e)
	id, err := strconv.ParseUint(e.ID, 10, 64)
	return liveFrame{b: bytes.Clone(f.Bytes()), id: id, event: e.Event, hasID: err == nil}
}

// publish queues f to every client of t; nothing is published after the
// pump's last frames.
func (t *sseTopic) publish(f liveFrame) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	for c := range t.clients {
		c.deliver(f)
	}
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
	// The head r3labs writes on the other streams; the connection is not
	// net/http's to reuse after the stream, so it says so.
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

	// The stream outlives the request and keeps nothing of it (chi reuses
	// its routing context, and the rest would only cost memory).
	followCtx, stop := context.WithCancel(h.drainCtx)
	c := &sseConn{hub: h, conn: conn, followCtx: followCtx, stop: stop, feed: feed, after: after, release: release}
	// finish waits until the client is set up, whatever ends it meanwhile.
	c.ready.Add(1)
	h.mu.Lock()
	if h.closing {
		// Close began after the check above: the head is out, so the
		// stream ends with the shutdown event, as the others do.
		h.mu.Unlock()
		stop()
		var f bytes.Buffer
		writeFrame(&f, Event{ID: strconv.FormatUint(after, 10), Event: "error", Data: []byte(shutdownEventData)})
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write(append(appendChunk(nil, f.Bytes()), "0\r\n\r\n"...))
		_ = conn.Close()
		release()
		return
	}
	t := h.topicLocked(feed)
	c.topic = t
	t.members++
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	h.onCount(1)
	// The backlog is rendered here, on the request's goroutine, which ends
	// with the handler: an idle client keeps no goroutine.
	t.mu.Lock()
	c.join(t)
	t.mu.Unlock()
	c.unwatch = c.watch()
	c.ready.Done()
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
	t := &sseTopic{source: feed.source(), cancel: cancel, done: make(chan struct{}), clients: map[*sseConn]struct{}{}}
	h.topics[t.source] = t
	t.beat = newSSEBeat(h.heartbeat, func() { t.publish(heartbeatFrame) })
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
		t.publish(newLiveFrame(e))
		return ctx.Err()
	}
	_ = feed.follow(ctx, from, publish)
	h.mu.Lock()
	if h.topics[t.source] == t {
		delete(h.topics, t.source)
	}
	h.mu.Unlock()
	t.beat.stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.drainCtx.Err() != nil {
		f := newLiveFrame(Event{ID: lastID, Event: "error", Data: []byte(shutdownEventData)})
		for c := range t.clients {
			c.deliver(f)
		}
	}
	// A client that joins from now on finds the topic ended and ends
	// itself after its backlog.
	t.ended = true
	for c := range t.clients {
		c.end()
	}
}

// leave takes c off t; the last client out stops t's pump.
func (h *Hub) leave(t *sseTopic, c *sseConn) {
	h.mu.Lock()
	delete(h.conns, c)
	t.members--
	last := t.members == 0
	if last && h.topics[t.source] == t {
		delete(h.topics, t.source)
	}
	h.mu.Unlock()
	if !last {
		return
	}
	t.cancel()
	<-t.done
	t.beat.stop()
}

// sseConn is one client of a shared feed on a connection taken over from
// net/http. Each frame is sent as one HTTP/1.1 chunk.
type sseConn struct {
	hub  *Hub
	conn net.Conn
	// followCtx is the context of the writer's own following of the log
	// once the client fell behind; stop cancels it.
	followCtx context.Context
	stop      context.CancelFunc
	feed      Feed
	topic     *sseTopic
	after     uint64
	release   func()
	// ready is done once ServeFeed set the client up; unwatch, set then,
	// stops the hang-up watch.
	ready   sync.WaitGroup
	unwatch func()
	ending  sync.Once

	// Under the topic's mu.
	skip  uint64 // live frames with an id up to this came in the backlog
	ended bool   // the backlog had the source's end: no live frame is sent

	mu      sync.Mutex
	queue   []byte // chunks waiting to be written
	writing bool   // a writer goroutine runs
	through uint64 // the id of the last event queued
	final   bool   // a final event was queued: the stream's end is in the queue
	behind  bool   // the queue overflowed: the writer follows the log itself
	failed  bool   // a write failed: nothing more is sent
	gone    bool   // the client hung up
	closed  bool   // finish runs: no writer starts
	writers sync.WaitGroup
}

var framePool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// end ends c's stream: a goroutine finishes it, once.
func (c *sseConn) end() {
	c.ending.Do(func() { go c.finish() })
}

// finish waits for c's queue to be written (and, for a client that fell
// behind, for its writer to follow the log to the end), ends the response
// and frees everything c holds.
func (c *sseConn) finish() {
	c.ready.Wait()
	h, t := c.hub, c.topic
	t.mu.Lock()
	delete(t.clients, c)
	t.mu.Unlock()
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
	c.unwatch()
	_ = c.conn.Close()
	h.leave(t, c)
	h.onCount(-1)
	c.release()
	h.wg.Done()
}

// watch arranges for c to end when its client hangs up, and returns what
// stops that.
func (c *sseConn) watch() (stop func()) {
	hangUp := func() {
		c.mu.Lock()
		c.gone = true
		c.mu.Unlock()
		_ = c.conn.SetWriteDeadline(time.Now())
		c.end()
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
		// it closes the connection, or when finish closes it.
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

// join queues c's backlog and adds it to t's clients, or ends it after its
// backlog if the topic's pump has ended (t.mu held).
func (c *sseConn) join(t *sseTopic) {
	c.skip = c.after
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
		c.end()
	case t.ended:
		// The gateway drains: the topic's shutdown event went out before
		// the client joined.
		c.event(Event{ID: strconv.FormatUint(c.skip, 10), Event: "error", Data: []byte(shutdownEventData)})
		c.ended = true
		c.end()
	default:
		t.clients[c] = struct{}{}
	}
}

// event queues e, a frame of the client's backlog.
func (c *sseConn) event(e Event) { c.send(newLiveFrame(e)) }

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

// deliver queues f, a live frame, unless the backlog already had it (the
// topic's mu held).
func (c *sseConn) deliver(f liveFrame) {
	if c.ended || (f.hasID && f.id <= c.skip && !finalEvents[f.event]) {
		return
	}
	c.send(f)
}

// send queues f as a chunk.
func (c *sseConn) send(f liveFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed || c.gone || c.behind {
		return
	}
	if len(c.queue)+len(f.b) > sseQueueLimit {
		// The client reads slower than its source produces. It leaves the
		// topic, and its writer (running, since the queue is not empty)
		// goes on from the log once the queue is written.
		c.behind = true
		c.end()
		return
	}
	if f.hasID {
		c.through = f.id
		c.final = c.final || finalEvents[f.event]
	}
	c.queue = appendChunk(c.queue, f.b)
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
		c.end()
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

// finalEvents are the events a log feed ends with (EndEvent, a process's
// exit); they carry the id of the last entry before them.
var finalEvents = map[string]bool{"end": true, "error": true, "exit": true}

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
