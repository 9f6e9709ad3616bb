package handlers

import (
	"bytes"
	"mime"
	"net/http"
	"strings"

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

// mcpProblems rewrites the MCP handler's plain-text errors into problem
// documents; everything else (JSON-RPC answers, event streams, 202) goes
// through untouched.
func mcpProblems(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &mcpErrorWriter{ResponseWriter: w, r: r}
		next.ServeHTTP(pw, r)
		pw.finish()
	})
}

// mcpErrorWriter holds back a plain-text error's head and body, to write
// the problem instead once the handler returns.
type mcpErrorWriter struct {
	http.ResponseWriter
	r        *http.Request
	code     gateway.Code
	held     bool
	wroteAny bool
	msg      bytes.Buffer
}

// maxHeldMessage bounds what is kept of an error's text.
const maxHeldMessage = 1024

func (w *mcpErrorWriter) WriteHeader(status int) {
	if !w.wroteAny {
		w.wroteAny = true
		mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type"))
		if code, ok := mcpProblemCodes[status]; ok && mt == "text/plain" {
			w.held, w.code = true, code
			return
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *mcpErrorWriter) Write(b []byte) (int, error) {
	if !w.wroteAny {
		w.WriteHeader(http.StatusOK)
	}
	if w.held {
		w.msg.Write(b[:min(len(b), max(0, maxHeldMessage-w.msg.Len()))])
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *mcpErrorWriter) Flush() {
	if w.held {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *mcpErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *mcpErrorWriter) finish() {
	if !w.held {
		return
	}
	h := w.Header()
	h.Del("Content-Type")
	h.Del("X-Content-Type-Options")
	h.Del("Content-Length")
	writeError(w.ResponseWriter, w.r, gateway.Errorf(w.code, "%s", strings.TrimSpace(w.msg.String())))
}
