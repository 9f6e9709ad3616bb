package handlers

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// bodyReadTimeout gives every request body an idle deadline: a body that
// delivers no byte for BodyReadTimeout ends with request_timeout (408). The
// deadline moves forward with every read, so a large upload that keeps
// arriving is never cut, while a client that announced more than it sends
// (Content-Length: 100 and 10 bytes) cannot hold a handler for ever. The
// deadline is set only once the handler reads, so WebSocket upgrades and
// streams, which read no body, are untouched, and it is lifted as soon as the
// body ends: net/http then reads the connection in the background to notice
// a client going away, and must not time out.
func (s *Server) bodyReadTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: s.cfg.BodyReadTimeout}
		r.Body = b
		defer b.lift()
		next.ServeHTTP(w, r)
	})
}

// deadlineBody is a request body whose reads extend the connection's read
// deadline.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	armed   bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.rc.SetReadDeadline(time.Now().Add(b.timeout)) == nil {
		b.armed = true
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays: after the handler, net/http tries to read
		// what is left of the body before it answers, and that read must
		// fail at once instead of waiting for bytes that never come.
		b.armed = false
		return n, gateway.Wrap(gateway.CodeRequestTimeout, err, "the request body stopped arriving: no byte for %s", b.timeout).
			WithDetail("timeout", b.timeout.String())
	case err != nil:
		b.lift()
	}
	return n, err
}

// lift removes the deadline once the body ended or the handler returned.
func (b *deadlineBody) lift() {
	if b.armed {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.armed = false
	}
}
