package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/r3labs/sse/v2"
	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// readAll reads a stream to its end.
func readAll(t *testing.T, s *client.Stream) ([]client.Event, error) {
	t.Helper()
	var evs []client.Event
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// sseHandler serves text/event-stream through fn, with a flush after each
// write.
func sseHandler(fn func(w io.Writer, flush func(), r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		fn(w, f.Flush, r)
	})
}

const exitSSE = "id: 1\nevent: exit\ndata: {\"exitCode\":0}\n\n"

func TestSSEDefaultMaxEventSizeOverHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, out(1, "small"))
		fmt.Fprintf(w, "id: 2\nevent: stdout\ndata: %s\n\n", bytes.Repeat([]byte("a"), client.DefaultMaxEventSize+1))
	}))
	defer srv.Close()
	s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrEventTooLarge) {
		t.Fatalf("err %v", err)
	}
	if s.LastEventID() != "1" {
		t.Fatalf("last id %q", s.LastEventID())
	}
}

func TestWithMaxEventSize(t *testing.T) {
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		io.WriteString(w, out(1, string(bytes.Repeat([]byte("a"), 200))))
	}))
	defer srv.Close()
	s, err := newClient(t, srv.URL, client.WithMaxEventSize(128)).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrEventTooLarge) {
		t.Fatalf("err %v", err)
	}
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // twice is fine
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next still blocked after Close")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the client go away")
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestStreamNextContext(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		io.WriteString(w, out(1, "a"))
		flush()
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A context that already ended leaves the stream usable.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(dead); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next(dead ctx): %v", err)
	}
	if ev, err := s.Next(context.Background()); err != nil || describe(ev) != "stdout:1" || s.LastEventID() != "1" {
		t.Fatalf("Next: %+v %v", ev, err)
	}
	// A context that ends while Next waits ends the stream.
	ctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next(expiring ctx): %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the client go away")
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sticky error: %v", err)
	}
}

func TestStreamOpenContextEnds(t *testing.T) {
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := s.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v", err)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Run("silence", func(t *testing.T) {
		srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) { <-r.Context().Done() }))
		defer srv.Close()
		s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{IdleTimeout: 80 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		start := time.Now()
		if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrIdleTimeout) {
			t.Fatalf("Next: %v", err)
		}
		if d := time.Since(start); d < 70*time.Millisecond {
			t.Fatalf("timed out after %v", d)
		}
	})
	t.Run("heartbeats count as activity", func(t *testing.T) {
		srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
			for range 15 {
				io.WriteString(w, ": heartbeat\n\n")
				flush()
				time.Sleep(20 * time.Millisecond)
			}
			io.WriteString(w, exitSSE)
		}))
		defer srv.Close()
		// The client-wide default applies when the stream sets none.
		c := newClient(t, srv.URL, client.WithStreamIdleTimeout(150*time.Millisecond))
		s, err := c.VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ev, err := s.Next(context.Background())
		if _, ok := ev.(*client.Exit); err != nil || !ok {
			t.Fatalf("Next: %+v %v", ev, err)
		}
		if _, err := s.Next(context.Background()); err != io.EOF {
			t.Fatalf("end: %v", err)
		}
	})
	t.Run("disabled per stream", func(t *testing.T) {
		srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, out(1, "late"))
		}))
		defer srv.Close()
		c := newClient(t, srv.URL, client.WithStreamIdleTimeout(30*time.Millisecond))
		s, err := c.VM("vm").Shell("sh").Output(context.Background(), client.StreamOptions{IdleTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if ev, err := s.Next(context.Background()); err != nil || string(ev.(*client.Output).Data) != "late" {
			t.Fatalf("Next: %+v %v", ev, err)
		}
	})
}

// TestStreamErrorStatus checks that a stream refused before it starts is a
// problem, not a stream.
func TestStreamErrorStatus(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(problem(400, "invalid_argument", "Last-Event-ID must be a sequence number"))
	_, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{LastEventID: "x"})
	if !client.IsCode(err, client.CodeInvalidArgument) {
		t.Fatalf("err %v", err)
	}
}

// TestSSEFromR3labsServer reads a stream written by r3labs/sse configured as
// the gateway's hub (sse/hub.go) is: the wire format and the way a
// stream ends (an empty event) must suit the client.
func TestSSEFromR3labsServer(t *testing.T) {
	hub := sse.New()
	hub.AutoReplay, hub.AutoStream, hub.EncodeBase64, hub.SplitData = false, false, false, false
	defer hub.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream := hub.CreateStream("s1")
		stream.AutoReplay = false
		subscribed, unsubscribed := make(chan struct{}), make(chan struct{})
		stream.OnSubscribe = func(string, *sse.Subscriber) { close(subscribed) }
		stream.OnUnsubscribe = func(string, *sse.Subscriber) { close(unsubscribed) }
		go func() {
			<-subscribed
			hub.Publish("s1", &sse.Event{ID: []byte("1"), Event: []byte("stdout"), Data: []byte(`{"seq":1,"stream":"stdout","data":"hi","encoding":"utf8","ts":"2025-01-02T03:04:05Z"}`)})
			hub.Publish("s1", &sse.Event{Comment: []byte("heartbeat")})
			hub.Publish("s1", &sse.Event{ID: []byte("1"), Event: []byte("exit"), Data: []byte(`{"exitCode":0,"signal":null}`)})
			hub.Publish("s1", &sse.Event{})
		}()
		ctx, cancel := context.WithCancel(r.Context())
		r2 := r.Clone(ctx)
		r2.URL.RawQuery = "stream=s1"
		r2.Header.Del("Last-Event-ID")
		hub.ServeHTTP(w, r2)
		// r3labs' per-connection goroutine deregisters once the request's
		// context ends, on a channel only the stream's loop reads: the
		// stream may only be removed after that, or the goroutine leaks.
		cancel()
		<-unsubscribed
		hub.RemoveStream("s1")
	}))
	defer srv.Close()
	s, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{LastEventID: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := readAll(t, s)
	if err != io.EOF || len(evs) != 2 || s.LastEventID() != "1" {
		t.Fatalf("events %+v, end %v", evs, err)
	}
	if o, ok := evs[0].(*client.Output); !ok || string(o.Data) != "hi" || o.Seq != 1 {
		t.Fatalf("output %+v", evs[0])
	}
	if x, ok := evs[1].(*client.Exit); !ok || x.ExitCode != 0 {
		t.Fatalf("exit %+v", evs[1])
	}
}

// TestNoGoroutineOutlivesStream ends streams every way they can end and
// checks that nothing of theirs is left running.
func TestNoGoroutineOutlivesStream(t *testing.T) {
	// What runs already (the examples' gateway, other tests' idle
	// connections) is not this test's.
	before := goleak.IgnoreCurrent()
	var hang, final atomic.Bool
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		io.WriteString(w, "id: 1\nevent: state\ndata: {\"type\":\"state\",\"state\":\"ready\"}\n\n")
		if final.Load() {
			io.WriteString(w, "id: 1\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is disposed\"}\n\n")
		}
		if hang.Load() {
			flush()
			<-r.Context().Done()
		}
	}))
	c := newClient(t, srv.URL)
	open := func(ctx context.Context, hangs, ends bool, idle time.Duration) *client.Stream {
		t.Helper()
		hang.Store(hangs)
		final.Store(ends)
		s, err := c.VM("vm").Events(ctx, client.StreamOptions{IdleTimeout: idle})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Closed mid-stream.
	s := open(context.Background(), true, false, 0)
	s.Close()
	// Next's context ends.
	s = open(context.Background(), true, false, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: %v", err)
	}
	cancel()
	// The stream's own context ends, and nobody calls Close.
	octx, ocancel := context.WithCancel(context.Background())
	s = open(octx, true, false, 0)
	ocancel()
	if _, err := s.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v", err)
	}
	// Idle timeout, nobody calls Close.
	s = open(context.Background(), true, false, 30*time.Millisecond)
	if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrIdleTimeout) {
		t.Fatalf("Next: %v", err)
	}
	// Cut without a final event, nobody calls Close.
	s = open(context.Background(), false, false, time.Hour)
	if _, err := s.Next(context.Background()); err != io.ErrUnexpectedEOF {
		t.Fatalf("end: %v", err)
	}
	// A final event, nobody calls Close.
	s = open(context.Background(), true, true, time.Hour)
	if _, err := s.Next(context.Background()); !client.IsCode(err, client.CodeConflict) {
		t.Fatalf("end: %v", err)
	}
	// A followed stream left in the middle.
	hang.Store(true)
	final.Store(false)
	for _, err := range c.VM("vm").FollowEvents(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}

	srv.Close() // closes idle keep-alive connections too
	goleak.VerifyNone(t, before)
}
