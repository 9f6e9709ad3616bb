package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"
)

var (
	// ErrClosed is what Next returns once Close was called.
	ErrClosed = errors.New("client: stream closed")
	// ErrEventTooLarge is wrapped by the error of a stream that sent an
	// event over the size limit (see WithMaxEventSize).
	ErrEventTooLarge = errors.New("client: server-sent event too large")
	// ErrIdleTimeout is wrapped by the error of a stream on which nothing,
	// not even a heartbeat, arrived for its idle timeout.
	ErrIdleTimeout = errors.New("client: stream idle: no event or heartbeat received in time")
	// ErrNotEventStream is wrapped by the error of a stream request that was
	// answered 2xx with something other than text/event-stream.
	ErrNotEventStream = errors.New("client: the answer is not an event stream")
)

// StreamOptions tunes a stream.
type StreamOptions struct {
	// LastEventID resumes after this event id (the Last-Event-ID header).
	LastEventID string
	// IdleTimeout ends the stream with ErrIdleTimeout when no byte (event or
	// heartbeat comment) arrives for this long. 0 takes the client's default
	// (WithStreamIdleTimeout); < 0 disables it. The gateway sends a
	// heartbeat every 15 s by default.
	IdleTimeout time.Duration

	// follow is set by the Follow methods, which retry a failed open
	// themselves: the open is then sent once, so that RetryPolicy.MaxAttempts
	// bounds the requests rather than the attempts of each of them.
	follow bool
}

// RawEvent is one Server-Sent Event as it came: its id, its event name
// ("message" when it named none) and its data (JSON for every gateway
// event).
type RawEvent struct {
	ID   string
	Type string
	Data []byte
}

// Stream is an open Server-Sent Events response of the gateway. Next reads
// it event by event, decoded (see Event); Close frees it (always call it).
// Next, LastEventID and Retry belong to one goroutine; Close may be called
// from any.
//
// The stream starts no goroutine: reading happens in Next, and ending a
// Next's context, the stream's own context, the idle timeout or Close
// cancels the request so that a blocked read returns.
type Stream struct {
	ctx    context.Context // the request's
	cancel context.CancelFunc
	body   io.ReadCloser
	sc     *bufio.Scanner
	max    int
	kind   streamKind
	raw    RawEvent // the event Next read last
	// replayed is set when the gateway answered from the record of an
	// earlier call with the same Idempotency-Key.
	replayed bool

	idle  time.Duration
	timer *time.Timer

	// Parser state (the Next goroutine's).
	lastID  string
	idBuf   string
	typ     string
	data    []byte
	pending bool // a field line since the last dispatch
	first   bool
	retry   time.Duration
	err     error // sticky

	mu           sync.Mutex
	reason       error // why the stream was aborted, first one wins
	stopped      bool  // the idle timer must not restart
	shutdownOnce sync.Once
	closeOnce    sync.Once
}

// openStream opens a stream of kind k with GET.
func (c *Client) openStream(ctx context.Context, k streamKind, path string, opts StreamOptions) (*Stream, error) {
	return c.openStreamBody(ctx, k, http.MethodGet, path, nil, opts, nil)
}

func (c *Client) openStreamBody(ctx context.Context, k streamKind, method, path string, body []byte, opts StreamOptions, call *callOptions) (*Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	r := request{method: method, path: path, accept: "text/event-stream",
		headers: http.Header{"Cache-Control": {"no-cache"}}, opts: call, once: opts.follow}
	if body != nil {
		r.body, r.ctype = bytes.NewReader(body), "application/json"
	}
	if opts.LastEventID != "" {
		r.headers.Set("Last-Event-ID", opts.LastEventID)
	}
	resp, err := c.send(sctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		drainClose(resp.Body)
		cancel()
		return nil, fmt.Errorf("%w: %s %s answered %d %q", ErrNotEventStream, method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	idle := opts.IdleTimeout
	if idle == 0 {
		idle = c.idleTimeout
	}
	st := newStream(sctx, cancel, k, resp.Body, c.maxEventSize, opts.LastEventID, idle)
	st.replayed = replayed(resp)
	return st, nil
}

func newStream(ctx context.Context, cancel context.CancelFunc, k streamKind, body io.ReadCloser, maxEvent int, lastID string, idle time.Duration) *Stream {
	s := &Stream{ctx: ctx, cancel: cancel, kind: k, body: body, max: maxEvent, lastID: lastID, idBuf: lastID, first: true}
	var r io.Reader = body
	if idle > 0 {
		s.idle = idle
		s.timer = time.AfterFunc(idle, func() { s.abort(fmt.Errorf("%w (%s)", ErrIdleTimeout, idle)) })
		r = activityReader{r: body, s: s}
	}
	s.sc = bufio.NewScanner(r)
	// A line holds at most one event's data plus its field name.
	s.sc.Buffer(make([]byte, 0, min(4096, maxEvent)), maxEvent+64)
	s.sc.Split(splitLines())
	return s
}

// activityReader restarts the idle timer whenever bytes arrive: events and
// heartbeat comments alike count as activity.
type activityReader struct {
	r io.Reader
	s *Stream
}

func (a activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.s.mu.Lock()
		if !a.s.stopped {
			a.s.timer.Reset(a.s.idle)
		}
		a.s.mu.Unlock()
	}
	return n, err
}

// splitLines splits on LF, CRLF or a lone CR, as the SSE spec says. A CR at
// the end of the data is a line end at once (so a CR-only stream is never
// held back); an LF right after it is then skipped.
func splitLines() bufio.SplitFunc {
	skipLF := false
	return func(data []byte, atEOF bool) (int, []byte, error) {
		if skipLF && len(data) > 0 {
			skipLF = false
			if data[0] == '\n' {
				return 1, nil, nil
			}
		}
		if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
			if data[i] == '\n' {
				return i + 1, data[:i], nil
			}
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			skipLF = true
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			// An unterminated last line: parsed, but the event it belongs
			// to has no blank line after it and is never dispatched.
			return len(data), data, nil
		}
		return 0, nil, nil
	}
}

// Raw returns the event the last call of Next read, as it came: for
// logging it, or passing it on as it is. A final error event is there too.
func (s *Stream) Raw() RawEvent { return s.raw }

// LastEventID returns the stream's last event id: the id of the last event
// read (or of the last id field), else the StreamOptions.LastEventID it was
// opened with. Reconnect with it to resume.
func (s *Stream) LastEventID() string { return s.lastID }

// Retry returns the reconnection delay the server asked for with a retry
// field (0 if none).
func (s *Stream) Retry() time.Duration { return s.retry }

// Next returns the next event, decoded (see Event), skipping comments
// (heartbeats). After the stream's final event (a process's exit, a shell's
// or a session's end) it returns io.EOF; a final "error" event is returned
// as its *Error (Status 0). It returns io.ErrUnexpectedEOF when the
// connection ended before a final event (reconnect with LastEventID), ErrClosed after Close, ctx's error
// when ctx ended (the stream is then closed too), an error wrapping
// ErrIdleTimeout or ErrEventTooLarge, or the transport's error. Any error
// is final: the stream's resources are freed and later calls return the
// same error.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	if s.err != nil {
		return nil, s.err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { s.abort(ctx.Err()) })
	raw, err := s.next()
	stop()
	if err == io.EOF {
		// Every stream of the gateway ends with a final event: a
		// connection that ends before one was cut.
		err = io.ErrUnexpectedEOF
	}
	var ev Event
	final := false
	if err == nil {
		s.raw = raw
		ev, final, err = decodeEvent(s.kind, raw.Type, raw.Data)
	}
	switch {
	case err != nil:
		s.err = err
		s.shutdown()
		return nil, err
	case final:
		s.err = io.EOF
		s.shutdown()
	}
	return ev, nil
}

func (s *Stream) next() (RawEvent, error) {
	for {
		if !s.sc.Scan() {
			return RawEvent{}, s.readError(s.sc.Err())
		}
		line := s.sc.Bytes()
		if s.first {
			s.first = false
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		if len(line) == 0 {
			if ev, ok := s.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: a heartbeat
		}
		s.pending = true
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			s.typ = string(value)
		case "data":
			if len(s.data)+len(value)+1 > s.max {
				return RawEvent{}, fmt.Errorf("%w: more than %d bytes", ErrEventTooLarge, s.max)
			}
			s.data = append(s.data, value...)
			s.data = append(s.data, '\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.idBuf = string(value)
			}
		case "retry":
			if n, err := strconv.ParseUint(string(value), 10, 31); err == nil {
				s.retry = time.Duration(n) * time.Millisecond
			}
		}
	}
}

// dispatch ends an event at a blank line. As the spec says, the last event
// id is updated even when the event has no data (and is then not returned).
func (s *Stream) dispatch() (RawEvent, bool) {
	s.lastID = s.idBuf
	s.pending = false
	if len(s.data) == 0 {
		s.typ = ""
		return RawEvent{}, false
	}
	data := s.data[:len(s.data)-1]
	ev := RawEvent{ID: s.lastID, Type: s.typ, Data: bytes.Clone(data)}
	if ev.Type == "" {
		ev.Type = "message"
	}
	s.typ = ""
	s.data = s.data[:0]
	return ev, true
}

// readError explains why reading stopped.
func (s *Stream) readError(err error) error {
	s.mu.Lock()
	reason := s.reason
	s.mu.Unlock()
	switch {
	case reason != nil:
		return reason
	case s.ctx.Err() != nil:
		return s.ctx.Err()
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("%w: a line of more than %d bytes", ErrEventTooLarge, s.max)
	case err == nil && s.pending:
		return io.ErrUnexpectedEOF
	case err == nil:
		return io.EOF
	}
	return err
}

// abort cancels the request so that a blocked read returns; reason is what
// Next then reports.
func (s *Stream) abort(reason error) {
	s.mu.Lock()
	if s.reason == nil {
		s.reason = reason
	}
	s.mu.Unlock()
	s.cancel()
}

// shutdown frees everything the stream holds.
func (s *Stream) shutdown() {
	s.shutdownOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		if s.timer != nil {
			s.timer.Stop()
		}
		s.mu.Unlock()
		s.cancel()
		_ = s.body.Close()
	})
}

// Close ends the stream and frees its connection. It is safe to call more
// than once and from any goroutine; a Next blocked meanwhile returns
// ErrClosed.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		s.abort(ErrClosed)
		s.shutdown()
	})
	return nil
}
