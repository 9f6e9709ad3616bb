// Package attach serves the gateway's WebSocket attach protocol: a client
// attached to a shell or a process gets its output, resumable by sequence
// number from a streamlog.Log, and sends input and control frames, with
// heartbeats, bounded input queues and a close reason for every end. Hub
// counts the attached connections, which net/http stops tracking once they
// are upgraded, so that shutdown can wait for them.
//
// It knows nothing of shells or processes: a Target is the log to follow
// and the functions that take input, apply controls and tell the exit.
// Keeping the frame loop apart from the routes lets the HTTP handlers stay
// endpoint code.
package attach

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
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
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

// StreamStdout and StreamStderr are the first byte of a process's binary
// output frames, which say the stream the rest came from; a shell's frames
// are its terminal's bytes as they are. They are part of the protocol, so
// the target's Frame function takes them from here.
const (
	StreamStdout byte = 1
	StreamStderr byte = 2
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

// Target is what a WebSocket attaches to: a shell or a process, whose
// output entries are of type T.
type Target[T any] struct {
	// What is "shell" or "process", for close reasons.
	What string
	// Log is the output: each entry is one binary frame.
	Log *streamlog.Log[T]
	// Controls are the control frame types the client may send.
	Controls []string
	// Frame renders one output entry as a binary frame.
	Frame func(T) []byte
	// Input takes the bytes of one input frame.
	Input func(ctx context.Context, data []byte) error
	// Control applies a decoded control frame.
	Control func(ctx context.Context, f api.AttachControlFrame) error
	// Exit is the end of the output: exit status, or the reason it is
	// unknowable.
	Exit func(endErr error) (*gateway.ExitStatus, error)
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
func attachAfter[T any](r *http.Request, l *streamlog.Log[T]) (uint64, error) {
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

// IsUpgrade reports whether r asks for a WebSocket (RFC 6455 §4.1): such a
// request may carry its API key as a subprotocol (BearerFromProtocols), and
// its connection outlives the request.
func IsUpgrade(r *http.Request) bool {
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

// BearerFromProtocols returns the API key a WebSocket client offers as a
// subprotocol: bearer.agentos-gateway.<key>, the key as is (gateway keys are
// tokens) or base64url without padding when it has characters a token
// cannot carry; authenticate tries the value as a key first, then decoded.
// The server never answers with this subprotocol.
func BearerFromProtocols(r *http.Request) (key string, ok bool) {
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
func (h *Hub) originAllowed(r *http.Request) bool {
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
	for _, pat := range h.cfg.AllowedOrigins {
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

// Config configures a Hub.
type Config struct {
	// Heartbeat is the ping period; a client whose pong does not come
	// within one is disconnected.
	Heartbeat time.Duration
	// AllowedOrigins are the origins allowed to attach from a browser
	// (host or scheme://host patterns, "*" for any); nil allows the
	// request's own host only.
	AllowedOrigins []string
	// MaxInput is the most bytes one input frame may carry: what the engine
	// takes in one stdin write.
	MaxInput int
	// Draining is closed when the gateway begins to shut down: every
	// attached client is then told so and disconnected.
	Draining <-chan struct{}
	// Refuse answers a request that is not attached (no upgrade, a bad
	// after, a foreign origin, the gateway closing) with its error: the
	// HTTP layer writes its errors in one place, so the hub hands them back.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
}

// Hub tracks the attached connections: once upgraded they are no longer
// requests the HTTP server waits for, so shutdown waits for them here.
type Hub struct {
	cfg     Config
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// NewHub returns a hub that attaches clients until Close.
func NewHub(cfg Config) *Hub { return &Hub{cfg: cfg} }

// Begin counts a connection that outlives its request (an attachment, or a
// WebSocket proxied to another node), or reports false once the gateway is
// closing; each Begin that reported true is ended with End.
func (h *Hub) Begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.wg.Add(1)
	return true
}

// End uncounts a connection counted by Begin.
func (h *Hub) End() { h.wg.Done() }

// Close refuses new connections and waits for the open ones, which
// Draining has told to end.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.wg.Wait()
}

// Serve upgrades to a WebSocket and runs one attached client until the
// target ends, the client leaves or the gateway shuts down. Every goroutine
// of the connection is stopped and waited for before it returns.
func Serve[T any](h *Hub, w http.ResponseWriter, r *http.Request, t Target[T]) {
	if !IsUpgrade(r) {
		h.cfg.Refuse(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "this route needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)").WithDetail("reason", "websocket_required"))
		return
	}
	after, err := attachAfter(r, t.Log)
	if err != nil {
		h.cfg.Refuse(w, r, err)
		return
	}
	if !h.originAllowed(r) {
		h.cfg.Refuse(w, r, gateway.Errorf(gateway.CodePermissionDenied, "origin %s may not call the API from a browser", r.Header.Get("Origin")))
		return
	}
	if !h.Begin() {
		h.cfg.Refuse(w, r, gateway.ErrShuttingDown)
		return
	}
	defer h.End()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{attachProtocol},
		// Checked above already, with the same rule, so that a refusal is
		// a problem document; the library checks again.
		OriginPatterns: h.cfg.AllowedOrigins,
	})
	if err != nil {
		// Accept has answered the client already.
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(int64(h.cfg.MaxInput) + 2)
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
	inputs := &inputQueue{items: make(chan inputItem, attachInputQueue)}
	wg.Add(3)
	go func() {
		defer wg.Done()
		h.read(ctx, conn, t.What, t.Controls, inputs, closeWith)
	}()
	go func() {
		defer wg.Done()
		apply(ctx, conn, t.Input, t.Control, inputs)
	}()
	go func() {
		defer wg.Done()
		h.heartbeat(ctx, conn, closeWith)
	}()

	code, reason := output(ctx, h, conn, t, after)
	if ctx.Err() == nil {
		log.Debug().Int("code", int(code)).Str("reason", reason).Msg("attach ends")
	}
	closeWith(code, reason)
	wg.Wait()
}

// output sends hello, the output from after on, and the end; it returns how
// to close the connection.
func output[T any](ctx context.Context, h *Hub, conn *websocket.Conn, t Target[T], after uint64) (websocket.StatusCode, string) {
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
		case <-h.cfg.Draining:
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
		b, err := t.Log.Read(ctx, cursor)
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
			if err := send(websocket.MessageBinary, t.Frame(e.V)); err != nil {
				return gone()
			}
			cursor = e.Seq
		}
		if b.Done {
			last := cursor
			f := api.AttachServerFrame{Type: "exit", Seq: &last}
			exit, err := t.Exit(b.Err)
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
			return websocket.StatusNormalClosure, "the " + t.What + " exited"
		}
	}
}

// read reads the client's frames into inputs, in order: binary frames are
// input, text frames control
// frames of the types in controls. It never blocks on the engine, so pongs
// are always read.
func (h *Hub) read(ctx context.Context, conn *websocket.Conn, what string, controls []string, inputs *inputQueue, closeWith func(websocket.StatusCode, string)) {
	defer close(inputs.items)
	for {
		typ, rd, err := conn.Reader(ctx)
		if err != nil {
			closeWith(websocket.StatusNormalClosure, "")
			return
		}
		data, err := io.ReadAll(io.LimitReader(rd, int64(h.cfg.MaxInput)+1))
		if err != nil {
			closeWith(websocket.StatusNormalClosure, "")
			return
		}
		item := inputItem{data: data}
		switch typ {
		case websocket.MessageBinary:
			if len(data) > h.cfg.MaxInput {
				closeWith(websocket.StatusMessageTooBig, fmt.Sprintf("input frames carry at most %d bytes", h.cfg.MaxInput))
				return
			}
		case websocket.MessageText:
			f, err := decodeControl(data, controls...)
			if err != nil {
				closeWith(websocket.StatusUnsupportedData, truncateReason(err.Error()))
				return
			}
			item = inputItem{control: &f}
		}
		if !inputs.push(item) {
			closeWith(websocket.StatusTryAgainLater, "input arrives faster than the "+what+" takes it")
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

// apply hands the client's frames to the target in order (input, control);
// a refusal is reported to the client with an error frame and the
// connection stays.
func apply(ctx context.Context, conn *websocket.Conn, input func(context.Context, []byte) error, control func(context.Context, api.AttachControlFrame) error, inputs *inputQueue) {
	for item := range inputs.items {
		inputs.done(item)
		var err error
		if item.control != nil {
			err = control(ctx, *item.control)
		} else if len(item.data) > 0 {
			err = input(ctx, item.data)
		}
		if err != nil && ctx.Err() == nil {
			b, _ := json.Marshal(api.AttachServerFrame{Type: "error", Code: gateway.ErrorCode(err), Detail: gateway.ErrorMessage(err)})
			wctx, cancel := context.WithTimeout(ctx, attachWriteTimeout)
			_ = conn.Write(wctx, websocket.MessageText, b)
			cancel()
		}
	}
}

// heartbeat pings the client every heartbeat period and closes the
// connection when a pong does not come within one, or when the gateway
// shuts down.
func (h *Hub) heartbeat(ctx context.Context, conn *websocket.Conn, closeWith func(websocket.StatusCode, string)) {
	tick := time.NewTicker(h.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.cfg.Draining:
			closeWith(websocket.StatusGoingAway, "the gateway is shutting down")
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, h.cfg.Heartbeat)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			closeWith(websocket.StatusPolicyViolation, "no pong within the heartbeat period")
			return
		}
	}
}
