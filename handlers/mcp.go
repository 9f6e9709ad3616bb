package handlers

import (
	"bytes"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// mcpProblemCodes are the plain-text refusals of the MCP SDK's transport
// that the gateway answers as problems, as it answers every refusal: a body
// or headers that are not what Streamable HTTP asks for (415 for a
// Content-Type, 400 is what the gateway answers for that anywhere), and a
// message over the SDK's bound.
var mcpProblemCodes = map[int]gateway.Code{
	http.StatusBadRequest:            gateway.CodeInvalidArgument,
	http.StatusUnsupportedMediaType:  gateway.CodeInvalidArgument,
	http.StatusRequestEntityTooLarge: gateway.CodePayloadTooLarge,
	http.StatusInternalServerError:   gateway.CodeInternal,
}

// mcpHeartbeat is the comment that keeps a quiet MCP event stream alive.
const mcpHeartbeat = ": heartbeat\n\n"

// mcpResponses puts the MCP handler's answers in the gateway's ways: its
// plain-text errors become problem documents, and its event streams get
// the heartbeat of the gateway's own (a comment every heartbeat without an
// event), so that a command that prints nothing for minutes does not look
// like a dead connection to a proxy. JSON-RPC answers and 202s go through
// untouched.
func mcpResponses(next http.Handler, heartbeat time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw := &mcpWriter{ResponseWriter: w, r: r, heartbeat: heartbeat}
		defer mw.finish()
		next.ServeHTTP(mw, r)
	})
}

// mcpWriter holds back a plain-text error's head and body, to write the
// problem instead once the handler returned; and beats an event stream's
// heart. The SDK writes each event with one Write (mcp.writeEvent in
// v1.8.0), so a heartbeat, written between two Writes under mu, never
// splits an event.
type mcpWriter struct {
	http.ResponseWriter
	r         *http.Request
	heartbeat time.Duration

	// The handler's goroutine alone.
	code     gateway.Code
	held     bool
	wroteAny bool
	msg      bytes.Buffer

	// mu orders the handler's writes and the heartbeats; quiet says no
	// event went out since the last beat.
	mu         sync.Mutex
	quiet      bool
	stop, done chan struct{}
}

// maxHeldMessage bounds what is kept of an error's text.
const maxHeldMessage = 1024

func (w *mcpWriter) WriteHeader(status int) {
	if w.wroteAny {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.wroteAny = true
	mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type"))
	if code, ok := mcpProblemCodes[status]; ok && mt == "text/plain" {
		w.held, w.code = true, code
		return
	}
	w.ResponseWriter.WriteHeader(status)
	if status == http.StatusOK && mt == "text/event-stream" && w.heartbeat > 0 {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.beat()
	}
}

func (w *mcpWriter) Write(b []byte) (int, error) {
	if !w.wroteAny {
		w.WriteHeader(http.StatusOK)
	}
	if w.held {
		w.msg.Write(b[:min(len(b), max(0, maxHeldMessage-w.msg.Len()))])
		return len(b), nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.quiet = false
	return w.ResponseWriter.Write(b)
}

func (w *mcpWriter) Flush() {
	if w.held {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *mcpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// beat writes a heartbeat each period in which nothing else was written,
// until finish stops it.
func (w *mcpWriter) beat() {
	defer close(w.done)
	t := time.NewTicker(w.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		if w.quiet {
			// A failed write ends nothing here: the handler's next
			// write fails too, and the request's end stops the beat.
			if _, err := w.ResponseWriter.Write([]byte(mcpHeartbeat)); err == nil {
				_ = http.NewResponseController(w.ResponseWriter).Flush()
			}
		}
		w.quiet = true
		w.mu.Unlock()
	}
}

// finish stops the heartbeat, or writes the problem of a held error, once
// the handler returned.
func (w *mcpWriter) finish() {
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
	if !w.held {
		return
	}
	h := w.Header()
	h.Del("Content-Type")
	h.Del("X-Content-Type-Options")
	h.Del("Content-Length")
	writeError(w.ResponseWriter, w.r, gateway.Errorf(w.code, "%s", strings.TrimSpace(w.msg.String())))
}
