package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Event types the gateway sends.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventGap    = "gap"
	EventEnd    = "end"
	EventError  = "error"
	// EventLost ends a stream that a gateway node proxied from the node
	// running the VM when that node died: the VM is lost.
	EventLost = "lost"
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
}

// Event is one Server-Sent Event. Type is "message" when the event named
// none; Data is the event's data (JSON for every gateway event).
type Event struct {
	ID   string
	Type string
	Data json.RawMessage
}

// Final reports whether the event ends its stream: exit, end or error.
func (e Event) Final() bool {
	return e.Type == EventExit || e.Type == EventEnd || e.Type == EventError || e.Type == EventLost
}

// Decode unmarshals the event's data into v.
func (e Event) Decode(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("client: decode %q event: %w", e.Type, err)
	}
	return nil
}

func (e Event) want(types ...string) error {
	for _, t := range types {
		if e.Type == t {
			return nil
		}
	}
	return fmt.Errorf("client: event %q is not %q", e.Type, types)
}

// Output is a piece of output: the data of "stdout" and "stderr" events.
type Output struct {
	Seq    uint64
	Stream string // "stdout" or "stderr"
	// Data is the raw bytes (decoded from base64 when they travelled so).
	Data []byte
	// Encoding is how Data travelled: "utf8" or "base64".
	Encoding string
	Time     time.Time
}

// Output decodes a "stdout" or "stderr" event.
func (e Event) Output() (Output, error) {
	if err := e.want(EventStdout, EventStderr); err != nil {
		return Output{}, err
	}
	var w struct {
		Seq      uint64 `json:"seq"`
		Stream   string `json:"stream"`
		Data     string `json:"data"`
		Encoding string `json:"encoding"`
		TS       string `json:"ts"`
	}
	if err := e.Decode(&w); err != nil {
		return Output{}, err
	}
	data, err := decodeData(w.Data, w.Encoding)
	if err != nil {
		return Output{}, err
	}
	o := Output{Seq: w.Seq, Stream: w.Stream, Data: data, Encoding: w.Encoding}
	if o.Stream == "" {
		o.Stream = e.Type
	}
	if w.TS != "" {
		if o.Time, err = time.Parse(time.RFC3339Nano, w.TS); err != nil {
			return Output{}, fmt.Errorf("client: decode %q event: ts: %w", e.Type, err)
		}
	}
	return o, nil
}

// ExitEvent is the data of an "exit" event. Truncated and DurationMs are only
// sent by a streamed exec.
type ExitEvent struct {
	ExitStatus
	Truncated  bool  `json:"truncated,omitempty"`
	DurationMs int64 `json:"durationMs,omitempty"`
}

// Exit decodes an "exit" event.
func (e Event) Exit() (ExitEvent, error) {
	if err := e.want(EventExit); err != nil {
		return ExitEvent{}, err
	}
	var x ExitEvent
	err := e.Decode(&x)
	return x, err
}

// ShellEnd decodes the final "end" event of a shell's output: its exit
// status.
func (e Event) ShellEnd() (ExitStatus, error) {
	if err := e.want(EventEnd); err != nil {
		return ExitStatus{}, err
	}
	var x ExitStatus
	err := e.Decode(&x)
	return x, err
}

// Gap is the data of a "gap" event: output sequence numbers From..To were
// dropped from the gateway's buffer before they could be sent.
type Gap struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Gap decodes a "gap" event.
func (e Event) Gap() (Gap, error) {
	if err := e.want(EventGap); err != nil {
		return Gap{}, err
	}
	var g Gap
	err := e.Decode(&g)
	return g, err
}

// Problem decodes an "error" event (the stream failed: VM lost or disposed,
// gateway shutting down...) into an *Error with Status 0.
func (e Event) Problem() (*Error, error) {
	if err := e.want(EventError); err != nil {
		return nil, err
	}
	var w struct {
		Code    string         `json:"code"`
		Detail  string         `json:"detail"`
		Details map[string]any `json:"details"`
	}
	if err := e.Decode(&w); err != nil {
		return nil, err
	}
	if w.Code == "" {
		w.Code = CodeInternal
	}
	return &Error{Code: w.Code, Detail: w.Detail, Details: w.Details}, nil
}

// VMEvent decodes an event of a VM's event stream.
func (e Event) VMEvent() (VMEvent, error) {
	var v VMEvent
	err := e.Decode(&v)
	if err == nil && v.Type == "" {
		v.Type = e.Type
	}
	return v, err
}

// Stream is an open Server-Sent Events response. Next reads it event by
// event; Close frees it (always call it). Next, LastEventID and Retry belong
// to one goroutine; Close may be called from any.
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

// openStream opens a stream with GET (or any bodiless method).
func (c *Client) openStream(ctx context.Context, method, path string, query url.Values, opts StreamOptions) (*Stream, error) {
	return c.openStreamBody(ctx, method, path, query, nil, opts)
}

func (c *Client) openStreamBody(ctx context.Context, method, path string, query url.Values, body []byte, opts StreamOptions) (*Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	r := request{method: method, path: path, query: query, accept: "text/event-stream",
		headers: http.Header{"Cache-Control": {"no-cache"}}}
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
	return newStream(sctx, cancel, resp.Body, c.maxEventSize, opts.LastEventID, idle), nil
}

// NewStream reads Server-Sent Events from r, for callers that opened the
// response themselves. maxEventSize <= 0 takes DefaultMaxEventSize. Close
// closes r.
func NewStream(r io.ReadCloser, maxEventSize int) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	return newStream(ctx, cancel, r, maxEventSize, "", 0)
}

func newStream(ctx context.Context, cancel context.CancelFunc, body io.ReadCloser, maxEvent int, lastID string, idle time.Duration) *Stream {
	s := &Stream{ctx: ctx, cancel: cancel, body: body, max: maxEvent, lastID: lastID, idBuf: lastID, first: true}
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

// LastEventID returns the stream's last event id: the id of the last event
// read (or of the last id field), else the StreamOptions.LastEventID it was
// opened with. Reconnect with it to resume.
func (s *Stream) LastEventID() string { return s.lastID }

// Retry returns the reconnection delay the server asked for with a retry
// field (0 if none).
func (s *Stream) Retry() time.Duration { return s.retry }

// Next returns the next event, skipping comments (heartbeats). It returns
// io.EOF when the stream ended cleanly (after its final event),
// io.ErrUnexpectedEOF when it ended inside an event, ErrClosed after Close,
// ctx's error when ctx ended (the stream is then closed too), an error
// wrapping ErrIdleTimeout or ErrEventTooLarge, or the transport's error. Any
// error is final: the stream's resources are freed and later calls return
// the same error.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	stop := context.AfterFunc(ctx, func() { s.abort(ctx.Err()) })
	ev, err := s.next()
	stop()
	if err != nil {
		s.err = err
		s.shutdown()
	}
	return ev, err
}

func (s *Stream) next() (Event, error) {
	for {
		if !s.sc.Scan() {
			return Event{}, s.readError(s.sc.Err())
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
				return Event{}, fmt.Errorf("%w: more than %d bytes", ErrEventTooLarge, s.max)
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
func (s *Stream) dispatch() (Event, bool) {
	s.lastID = s.idBuf
	s.pending = false
	if len(s.data) == 0 {
		s.typ = ""
		return Event{}, false
	}
	data := s.data[:len(s.data)-1]
	ev := Event{ID: s.lastID, Type: s.typ, Data: json.RawMessage(bytes.Clone(data))}
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
