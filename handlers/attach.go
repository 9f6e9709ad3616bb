package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// The WebSocket attach protocol (GET .../shells/{shell}/attach and
// GET .../processes/{pid}/attach); api/openapi.yaml documents it for
// clients.
//
// Server to client: text frames are JSON control frames (hello, gap, error,
// exit); every binary frame carries the output entry with the next sequence
// number (the ids of the SSE output stream), so a client knows the sequence
// of everything it got and resumes with ?after=<seq>. Client to server:
// binary frames are input bytes, text frames are JSON control frames
// (resize; close_stdin, signal).
const (
	// attachProtocol is the subprotocol the server speaks and answers with.
	attachProtocol = "agentos-gateway.v1"
	// bearerProtocolPrefix prefixes the subprotocol that carries an API key,
	// for browsers, which cannot set Authorization on a WebSocket.
	bearerProtocolPrefix = "bearer.agentos-gateway."

	// maxControlFrame bounds a client's text frame.
	maxControlFrame = 4096
	// attachInputQueue and attachInputBytes bound the client frames that
	// may wait for the engine, which can hold input to a shell for seconds
	// (README, known limits): a terminal sends a frame per keystroke.
	attachInputQueue = 4096
	attachInputBytes = 1 << 20
	// attachWriteTimeout bounds one frame to a client: a client that takes
	// none for this long is disconnected, the others are never held up.
	attachWriteTimeout = 10 * time.Second
)

// Stream prefixes of a process's binary output frames.
const (
	streamStdout byte = 1
	streamStderr byte = 2
)

// errControl is why a client's control frame was refused; the connection is
// closed with it as the reason.
var errControl = errors.New("bad control frame")

// decodeControl parses a client's text frame, accepting only the types in
// allowed.
func decodeControl(b []byte, allowed ...string) (api.AttachControlFrame, error) {
	var f api.AttachControlFrame
	if len(b) > maxControlFrame {
		return f, fmt.Errorf("%w: over %d bytes", errControl, maxControlFrame)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return api.AttachControlFrame{}, fmt.Errorf("%w: not a JSON object of known fields", errControl)
	}
	if dec.More() {
		return api.AttachControlFrame{}, fmt.Errorf("%w: more than one JSON value", errControl)
	}
	known := false
	for _, a := range allowed {
		known = known || f.Type == a
	}
	if !known {
		return api.AttachControlFrame{}, fmt.Errorf("%w: type must be one of %s", errControl, strings.Join(allowed, ", "))
	}
	switch f.Type {
	case "resize":
		if f.Cols < 1 || f.Cols > 1000 || f.Rows < 1 || f.Rows > 1000 || f.Signal != "" {
			return api.AttachControlFrame{}, fmt.Errorf("%w: resize needs cols and rows in [1, 1000]", errControl)
		}
	case "signal":
		if f.Signal == "" || len(f.Signal) > 16 || f.Cols != 0 || f.Rows != 0 {
			return api.AttachControlFrame{}, fmt.Errorf("%w: signal needs a signal name", errControl)
		}
	default:
		if f.Cols != 0 || f.Rows != 0 || f.Signal != "" {
			return api.AttachControlFrame{}, fmt.Errorf("%w: %s takes no other field", errControl, f.Type)
		}
	}
	return f, nil
}

// attachTarget is what a WebSocket attaches to: a shell or a process.
type attachTarget struct {
	what     string // "shell" or "process", for close reasons
	log      *streamlog.Log[vms.Chunk]
	controls []string // the control frame types the client may send
	// frame renders one output chunk as a binary frame.
	frame func(vms.Chunk) []byte
	input func(ctx context.Context, data []byte) error
	// received, when set, sees each input frame as soon as it arrives.
	received func(data []byte)
	// control applies a decoded control frame.
	control func(ctx context.Context, f api.AttachControlFrame) error
	// exit is the end of the output: exit status, or the reason it is
	// unknowable.
	exit func(endErr error) (*gateway.ExitStatus, error)
	// attached, when set, runs for the connection's life and returns its
	// undo.
	attached func() func()
}

// inputItem is one client frame waiting for the engine, in arrival order.
type inputItem struct {
	data    []byte
	control *api.AttachControlFrame
}

// inputQueue is the client frames waiting for the engine, bounded in
// frames (the channel) and in bytes.
type inputQueue struct {
	items chan inputItem
	bytes atomic.Int64
}

// push queues an item, or reports false when the queue is full.
func (q *inputQueue) push(it inputItem) bool {
	n := int64(len(it.data))
	if q.bytes.Add(n) > attachInputBytes {
		q.bytes.Add(-n)
		return false
	}
	select {
	case q.items <- it:
		return true
	default:
		q.bytes.Add(-n)
		return false
	}
}

// done releases the bytes of an item taken from the queue.
func (q *inputQueue) done(it inputItem) { q.bytes.Add(-int64(len(it.data))) }

// attachAfter parses the after query parameter: the sequence the client
// already has.
func attachAfter(r *http.Request, l *streamlog.Log[vms.Chunk]) (uint64, error) {
	v := r.URL.Query().Get("after")
	if v == "" {
		return 0, nil
	}
	after, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "query parameter after must be a sequence number").WithDetail("field", "after")
	}
	return after, streamlog.CheckResume(after, l.LastSeq(), "after")
}

// isWebSocketUpgrade reports whether r asks for a WebSocket (RFC 6455 §4.1).
func isWebSocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// bearerFromProtocols returns the API key a WebSocket client offers as a
// subprotocol: bearer.agentos-gateway.<key>, the key as is (gateway keys are
// tokens) or base64url without padding when it has characters a token
// cannot carry; authenticate tries the value as a key first, then decoded.
// The server never answers with this subprotocol.
func bearerFromProtocols(r *http.Request) (key string, ok bool) {
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if key, found := strings.CutPrefix(p, bearerProtocolPrefix); found && key != "" {
				return key, true
			}
		}
	}
	return "", false
}

// originAllowed applies the same rule as the WebSocket library, checked
// before the upgrade so that a refusal is a problem like any other: no
// Origin (not a browser), the request's own host, or one of the allowed
// origins (host patterns, or scheme://host patterns).
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, pat := range s.cfg.AllowedOrigins {
		if pat == "*" {
			return true
		}
		target := u.Host
		if strings.Contains(pat, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(pat), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// attachHub tracks the attached connections: once upgraded they are no
// longer requests the HTTP server waits for, so shutdown waits for them
// here.
type attachHub struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// begin counts a connection, or reports false once the gateway is closing.
func (h *attachHub) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.wg.Add(1)
	return true
}

func (h *attachHub) end() { h.wg.Done() }

// close refuses new connections and waits for the open ones, which
// DrainStreams has told to end.
func (h *attachHub) close() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.wg.Wait()
}

// serveAttach upgrades to a WebSocket and runs one attached client until
// the target ends, the client leaves or the gateway shuts down. Every
// goroutine of the connection is stopped and waited for before it returns.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request, t attachTarget) {
	if !isWebSocketUpgrade(r) {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "this route needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)").WithDetail("reason", "websocket_required"))
		return
	}
	after, err := attachAfter(r, t.log)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !s.originAllowed(r) {
		writeError(w, r, gateway.Errorf(gateway.CodePermissionDenied, "origin %s may not call the API from a browser", r.Header.Get("Origin")))
		return
	}
	if !s.attach.begin() {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down"))
		return
	}
	defer s.attach.end()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{attachProtocol},
		// Checked above already, with the same rule, so that a refusal is
		// a problem document; the library checks again.
		OriginPatterns: s.cfg.AllowedOrigins,
	})
	if err != nil {
		// Accept has answered the client already.
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(agentos.MaxStdinWrite + 2)
	log := zerolog.Ctx(r.Context())

	// net/http stops watching a hijacked connection, so the request's
	// context no longer says when the client left: the connection has a
	// context of its own, ended by whichever goroutine finds it over.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	var (
		wg        sync.WaitGroup
		closeOnce sync.Once
	)
	// closeWith ends the connection with a close frame, then the
	// connection's context. In that order: the library drops a connection
	// whose read is cancelled, which would lose the close frame. Close waits
	// for the client's close frame, so it runs on a goroutine of its own
	// and never holds up the one that decided to close.
	closeWith := func(code websocket.StatusCode, reason string) {
		closeOnce.Do(func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				_ = conn.Close(code, reason)
			}()
		})
	}
	if t.attached != nil {
		defer t.attached()()
	}

	inputs := &inputQueue{items: make(chan inputItem, attachInputQueue)}
	wg.Add(3)
	go func() {
		defer wg.Done()
		s.attachReader(ctx, conn, t, inputs, closeWith)
	}()
	go func() {
		defer wg.Done()
		s.attachInput(ctx, conn, t, inputs)
	}()
	go func() {
		defer wg.Done()
		s.attachHeartbeat(ctx, conn, closeWith)
	}()

	code, reason := s.attachOutput(ctx, conn, t, after)
	if ctx.Err() == nil {
		log.Debug().Int("code", int(code)).Str("reason", reason).Msg("attach ends")
	}
	closeWith(code, reason)
	wg.Wait()
}

// attachOutput sends hello, the output from after on, and the end; it
// returns how to close the connection.
func (s *Server) attachOutput(ctx context.Context, conn *websocket.Conn, t attachTarget, after uint64) (websocket.StatusCode, string) {
	send := func(typ websocket.MessageType, b []byte) error {
		wctx, cancel := context.WithTimeout(ctx, attachWriteTimeout)
		defer cancel()
		return conn.Write(wctx, typ, b)
	}
	sendJSON := func(f api.AttachServerFrame) error {
		b, _ := json.Marshal(f)
		return send(websocket.MessageText, b)
	}
	gone := func() (websocket.StatusCode, string) {
		select {
		case <-s.sse.Draining():
			return websocket.StatusGoingAway, "the gateway is shutting down"
		default:
			return websocket.StatusPolicyViolation, "the client did not take output in time"
		}
	}
	cursor := after
	if err := sendJSON(api.AttachServerFrame{Type: "hello", Seq: &cursor}); err != nil {
		return gone()
	}
	for {
		b, err := t.log.Read(ctx, cursor)
		if err != nil {
			return gone()
		}
		if b.GapTo > 0 {
			if err := sendJSON(api.AttachServerFrame{Type: "gap", From: b.GapFrom, To: b.GapTo}); err != nil {
				return gone()
			}
			cursor = b.GapTo
		}
		for _, e := range b.Entries {
			// Each binary frame is the next sequence; a hole in the
			// numbering is announced like a dropped range.
			if e.Seq > cursor+1 {
				if err := sendJSON(api.AttachServerFrame{Type: "gap", From: cursor + 1, To: e.Seq - 1}); err != nil {
					return gone()
				}
			}
			if err := send(websocket.MessageBinary, t.frame(e.V)); err != nil {
				return gone()
			}
			cursor = e.Seq
		}
		if b.Done {
			last := cursor
			f := api.AttachServerFrame{Type: "exit", Seq: &last}
			exit, err := t.exit(b.Err)
			if err != nil {
				f.Code, f.Detail = gateway.ErrorCode(err), gateway.ErrorMessage(err)
			} else {
				f.ExitCode = &exit.ExitCode
				if exit.Signal != "" {
					f.Signal = &exit.Signal
				}
			}
			if err := sendJSON(f); err != nil {
				return gone()
			}
			return websocket.StatusNormalClosure, "the " + t.what + " exited"
		}
	}
}

// attachReader reads the client's frames into inputs, in order. It never
// blocks on the engine, so pongs are always read.
func (s *Server) attachReader(ctx context.Context, conn *websocket.Conn, t attachTarget, inputs *inputQueue, closeWith func(websocket.StatusCode, string)) {
	defer close(inputs.items)
	for {
		typ, rd, err := conn.Reader(ctx)
		if err != nil {
			closeWith(websocket.StatusNormalClosure, "")
			return
		}
		data, err := io.ReadAll(io.LimitReader(rd, agentos.MaxStdinWrite+1))
		if err != nil {
			closeWith(websocket.StatusNormalClosure, "")
			return
		}
		item := inputItem{data: data}
		switch typ {
		case websocket.MessageBinary:
			if len(data) > agentos.MaxStdinWrite {
				closeWith(websocket.StatusMessageTooBig, fmt.Sprintf("input frames carry at most %d bytes", agentos.MaxStdinWrite))
				return
			}
			if t.received != nil {
				t.received(data)
			}
		case websocket.MessageText:
			f, err := decodeControl(data, t.controls...)
			if err != nil {
				closeWith(websocket.StatusUnsupportedData, truncateReason(err.Error()))
				return
			}
			item = inputItem{control: &f}
		}
		if !inputs.push(item) {
			closeWith(websocket.StatusTryAgainLater, "input arrives faster than the "+t.what+" takes it")
			return
		}
	}
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// carries.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// attachInput hands the client's frames to the target in order; a refusal
// is reported to the client with an error frame and the connection stays.
func (s *Server) attachInput(ctx context.Context, conn *websocket.Conn, t attachTarget, inputs *inputQueue) {
	for item := range inputs.items {
		inputs.done(item)
		var err error
		if item.control != nil {
			err = t.control(ctx, *item.control)
		} else if len(item.data) > 0 {
			err = t.input(ctx, item.data)
		}
		if err != nil && ctx.Err() == nil {
			b, _ := json.Marshal(api.AttachServerFrame{Type: "error", Code: gateway.ErrorCode(err), Detail: gateway.ErrorMessage(err)})
			wctx, cancel := context.WithTimeout(ctx, attachWriteTimeout)
			_ = conn.Write(wctx, websocket.MessageText, b)
			cancel()
		}
	}
}

// attachHeartbeat pings the client every heartbeat period and closes the
// connection when a pong does not come within one, or when the gateway
// shuts down.
func (s *Server) attachHeartbeat(ctx context.Context, conn *websocket.Conn, closeWith func(websocket.StatusCode, string)) {
	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sse.Draining():
			closeWith(websocket.StatusGoingAway, "the gateway is shutting down")
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			closeWith(websocket.StatusPolicyViolation, "no pong within the heartbeat period")
			return
		}
	}
}

// attachShell attaches a WebSocket to a shell.
func (s *Server) attachShell(w http.ResponseWriter, r *http.Request) {
	// A client that leaves the shell's terminal queries to the gateway
	// (queries=gateway) has them answered at once, without the grace for a
	// client's own answer.
	clientAnswers := true
	switch r.URL.Query().Get("queries") {
	case "", "client":
	case "gateway":
		clientAnswers = false
	default:
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "queries must be client or gateway").WithDetail("field", "queries"))
		return
	}
	sh, release, ok := s.shell(w, r)
	if !ok {
		return
	}
	defer release()
	var attached func() func()
	if clientAnswers {
		attached = sh.AttachTerminal
	}
	s.serveAttach(w, r, attachTarget{
		what:     "shell",
		log:      sh.Output(),
		controls: []string{"resize"},
		frame:    func(c vms.Chunk) []byte { return c.Data },
		input:    sh.WriteInput,
		received: sh.NoteReplies,
		control: func(ctx context.Context, f api.AttachControlFrame) error {
			return sh.Resize(ctx, f.Cols, f.Rows)
		},
		exit:     endStatus(sh.Exit),
		attached: attached,
	})
}

// attachProcess attaches a WebSocket to a process.
func (s *Server) attachProcess(w http.ResponseWriter, r *http.Request) {
	p, release, ok := s.process(w, r)
	if !ok {
		return
	}
	defer release()
	s.serveAttach(w, r, attachTarget{
		what:     "process",
		log:      p.Output(),
		controls: []string{"close_stdin", "signal"},
		frame: func(c vms.Chunk) []byte {
			prefix := streamStdout
			if c.Stream == "stderr" {
				prefix = streamStderr
			}
			return append([]byte{prefix}, c.Data...)
		},
		input: p.WriteStdin,
		control: func(ctx context.Context, f api.AttachControlFrame) error {
			if f.Type == "signal" {
				return p.Signal(ctx, f.Signal)
			}
			return p.CloseStdin(ctx)
		},
		exit: endStatus(p.Exit),
	})
}

// endStatus adapts an Exit method: the status, or why it is unknowable
// (the error the log closed with when the target has none).
func endStatus(exit func() (*gateway.ExitStatus, error)) func(error) (*gateway.ExitStatus, error) {
	return func(endErr error) (*gateway.ExitStatus, error) {
		st, err := exit()
		if err == nil && st == nil {
			err = endErr
		}
		if err == nil && st == nil {
			err = gateway.Errorf(gateway.CodeInternal, "the end of the output came without an exit status")
		}
		return st, err
	}
}
