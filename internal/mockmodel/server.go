package mockmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server runs a mock's handler on a loopback listener until Close, and
// keeps track of the handlers running so that Close returns only once they
// have all returned. Its methods are safe for concurrent use.
type Server struct {
	ln       net.Listener
	srv      *http.Server
	cancel   context.CancelFunc
	serveErr chan error
	refuse   http.HandlerFunc

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
	active   atomic.Int32
}

// Listen serves handle on addr (such as "127.0.0.1:0"). Once the server
// is closing, refuse answers instead, in the mock's own error shape.
func Listen(addr string, handle, refuse http.HandlerFunc) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mockmodel: listen: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, cancel: cancel, serveErr: make(chan error, 1), refuse: refuse}
	s.srv = &http.Server{
		Handler:           s.track(handle),
		ReadHeaderTimeout: 10 * time.Second,
		// Request contexts derive from base: Close cancels them, which
		// ends in-flight SLOW streams at once.
		BaseContext: func(net.Listener) context.Context { return base },
	}
	go func() { s.serveErr <- s.srv.Serve(ln) }()
	return s, nil
}

// track counts the handlers running.
func (s *Server) track(handle http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Add under mu so that no handler starts counting once Close waits.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.refuse(w, r)
			return
		}
		s.handlers.Add(1)
		s.active.Add(1)
		s.mu.Unlock()
		defer s.handlers.Done()
		defer s.active.Add(-1)
		handle(w, r)
	}
}

// Port returns the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Active returns how many handlers are running.
func (s *Server) Active() int { return int(s.active.Load()) }

// Close stops the server: in-flight streams are cut, connections closed,
// and Close returns once every handler has returned. It is idempotent, and
// returns why serving failed, if it did.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	_ = s.srv.Close() // closes the listener and every connection, active ones too
	err := <-s.serveErr
	s.handlers.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("mockmodel: serve: %w", err)
	}
	return nil
}

// Start runs listen, a mock's Listen, and ties what it started to tb: it is
// closed when tb ends.
func Start[S interface{ Close() error }](tb testing.TB, listen func() (S, error)) S {
	tb.Helper()
	s, err := listen()
	if err != nil {
		tb.Fatal(err)
	}
	CloseAtEnd(tb, s)
	return s
}

// CloseAtEnd closes c when tb ends, failing tb if closing fails.
func CloseAtEnd(tb testing.TB, c interface{ Close() error }) {
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
}

// Sleep waits d unless ctx ends first; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// WriteJSON writes v as the JSON body of a reply of the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
