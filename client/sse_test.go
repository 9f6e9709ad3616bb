package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/r3labs/sse/v2"
	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/client"
)

type wantEvent struct {
	id, typ, data string
}

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

func TestSSEParsing(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		want   []wantEvent
		end    error
		lastID string
	}{
		{name: "gateway format: id, data, event", in: "id: 1\ndata: {\"a\":1}\nevent: stdout\n\n",
			want: []wantEvent{{"1", "stdout", `{"a":1}`}}, end: io.EOF, lastID: "1"},
		{name: "event, id, data", in: "event: exit\nid: 2\ndata: {}\n\n", want: []wantEvent{{"2", "exit", "{}"}}, end: io.EOF, lastID: "2"},
		{name: "data, event, id", in: "data: x\nevent: gap\nid: 3\n\n", want: []wantEvent{{"3", "gap", "x"}}, end: io.EOF, lastID: "3"},
		{name: "multi-line data", in: "id: 4\ndata: line1\ndata: line2\ndata\ndata:line4\ndata:  indented\n\n",
			want: []wantEvent{{"4", "message", "line1\nline2\n\nline4\n indented"}}, end: io.EOF, lastID: "4"},
		{name: "comments and heartbeats", in: ": heartbeat\n\n:hb\n\nid: 5\n: in the middle\ndata: a\n\n: heartbeat\n\n",
			want: []wantEvent{{"5", "message", "a"}}, end: io.EOF, lastID: "5"},
		{name: "CRLF", in: "id: 6\r\nevent: stdout\r\ndata: a\r\ndata: b\r\n\r\n: hb\r\n\r\nid: 7\r\ndata: c\r\n\r\n",
			want: []wantEvent{{"6", "stdout", "a\nb"}, {"7", "message", "c"}}, end: io.EOF, lastID: "7"},
		{name: "CR only", in: "id: 8\rdata: a\r\rdata: b\r\r", want: []wantEvent{{"8", "message", "a"}, {"8", "message", "b"}}, end: io.EOF, lastID: "8"},
		{name: "mixed line ends", in: "id: 9\r\ndata: a\rdata: b\n\r\n", want: []wantEvent{{"9", "message", "a\nb"}}, end: io.EOF, lastID: "9"},
		{name: "BOM", in: "\xEF\xBB\xBFdata: bom\n\n", want: []wantEvent{{"", "message", "bom"}}, end: io.EOF},
		{name: "id persists, empty id resets", in: "id: 10\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			want: []wantEvent{{"10", "message", "a"}, {"10", "message", "b"}, {"", "message", "c"}}, end: io.EOF, lastID: ""},
		{name: "id without data moves the last id only", in: "id: 11\nevent: x\n\ndata: y\n\n",
			want: []wantEvent{{"11", "message", "y"}}, end: io.EOF, lastID: "11"},
		{name: "id with NUL ignored", in: "id: 12\ndata: a\n\nid: 1\x003\ndata: b\n\n",
			want: []wantEvent{{"12", "message", "a"}, {"12", "message", "b"}}, end: io.EOF, lastID: "12"},
		{name: "unknown fields and retry", in: "foo: bar\nretry: 1500\nretry: x\nid: 13\ndata: a\n\n",
			want: []wantEvent{{"13", "message", "a"}}, end: io.EOF, lastID: "13"},
		{name: "empty data line dispatches empty data", in: "event: e\ndata\n\n", want: []wantEvent{{"", "e", ""}}, end: io.EOF},
		{name: "incomplete event at EOF is dropped", in: "id: 14\ndata: a\n\nid: 15\ndata: {\"seq\":15,",
			want: []wantEvent{{"14", "message", "a"}}, end: io.ErrUnexpectedEOF, lastID: "14"},
		{name: "terminated lines but no blank line", in: "id: 16\ndata: a\n",
			want: nil, end: io.ErrUnexpectedEOF, lastID: ""},
		{name: "trailing comment without blank line is a clean end", in: "data: a\n\n: bye", want: []wantEvent{{"", "message", "a"}}, end: io.EOF},
		{name: "empty stream", in: "", end: io.EOF},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	}
	for _, tc := range cases {
		for rname, mk := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				s := client.NewStream(io.NopCloser(mk(tc.in)), 0)
				defer s.Close()
				evs, err := readAll(t, s)
				if err != tc.end {
					t.Fatalf("end %v, want %v", err, tc.end)
				}
				if len(evs) != len(tc.want) {
					t.Fatalf("%d events %+v, want %d", len(evs), evs, len(tc.want))
				}
				for i, w := range tc.want {
					if evs[i].ID != w.id || evs[i].Type != w.typ || string(evs[i].Data) != w.data {
						t.Errorf("event %d = {%q %q %q}, want %+v", i, evs[i].ID, evs[i].Type, evs[i].Data, w)
					}
				}
				if s.LastEventID() != tc.lastID {
					t.Errorf("LastEventID %q, want %q", s.LastEventID(), tc.lastID)
				}
				// Errors are sticky.
				if _, err2 := s.Next(context.Background()); err2 != err {
					t.Errorf("second Next: %v", err2)
				}
			})
		}
	}
}

func TestSSERetryField(t *testing.T) {
	s := client.NewStream(io.NopCloser(strings.NewReader("retry: 1500\ndata: a\n\n")), 0)
	defer s.Close()
	if _, err := s.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Retry() != 1500*time.Millisecond {
		t.Fatalf("retry %v", s.Retry())
	}
}

func TestSSEOversizedEvent(t *testing.T) {
	t.Run("one long line", func(t *testing.T) {
		s := client.NewStream(io.NopCloser(strings.NewReader("data: ok\n\ndata: "+strings.Repeat("x", 2000)+"\n\n")), 1024)
		defer s.Close()
		if _, err := s.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err := s.Next(context.Background())
		if !errors.Is(err, client.ErrEventTooLarge) || !strings.Contains(err.Error(), "1024") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("many data lines", func(t *testing.T) {
		in := strings.Repeat("data: "+strings.Repeat("y", 100)+"\n", 20) + "\n"
		s := client.NewStream(io.NopCloser(strings.NewReader(in)), 1024)
		defer s.Close()
		if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrEventTooLarge) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("at the limit passes", func(t *testing.T) {
		in := "data: " + strings.Repeat("z", 1023) + "\n\n"
		s := client.NewStream(io.NopCloser(strings.NewReader(in)), 1024)
		defer s.Close()
		ev, err := s.Next(context.Background())
		if err != nil || len(ev.Data) != 1023 {
			t.Fatalf("len %d, err %v", len(ev.Data), err)
		}
	})
	t.Run("default 16 MiB over HTTP", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 1\ndata: small\n\n")
			fmt.Fprintf(w, "id: 2\ndata: %s\n\n", bytes.Repeat([]byte("a"), client.DefaultMaxEventSize+1))
		}))
		defer srv.Close()
		s, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{})
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
	})
}

func TestEventDecoders(t *testing.T) {
	ev := func(typ, data string) client.Event {
		return client.Event{ID: "1", Type: typ, Data: json.RawMessage(data)}
	}

	o, err := ev("stdout", `{"seq":5,"stream":"stdout","data":"héllo","encoding":"utf8","ts":"2025-01-02T03:04:05.5Z"}`).Output()
	if err != nil || o.Seq != 5 || string(o.Data) != "héllo" || o.Stream != "stdout" || o.Encoding != "utf8" ||
		!o.Time.Equal(time.Date(2025, 1, 2, 3, 4, 5, 5e8, time.UTC)) {
		t.Fatalf("utf8 output %+v %v", o, err)
	}
	o, err = ev("stderr", `{"seq":6,"stream":"stderr","data":"AAH/","encoding":"base64","ts":"2025-01-02T03:04:05Z"}`).Output()
	if err != nil || !bytes.Equal(o.Data, []byte{0, 1, 0xff}) || o.Stream != "stderr" {
		t.Fatalf("base64 output %+v %v", o, err)
	}
	if _, err := ev("stdout", `{"data":"x","encoding":"rot13"}`).Output(); err == nil {
		t.Fatal("unknown encoding accepted")
	}
	if _, err := ev("stdout", `{"data":"!!","encoding":"base64"}`).Output(); err == nil {
		t.Fatal("bad base64 accepted")
	}
	if _, err := ev("exit", `{}`).Output(); err == nil {
		t.Fatal("Output of an exit event")
	}

	x, err := ev("exit", `{"exitCode":137,"signal":"SIGKILL"}`).Exit()
	if err != nil || x.ExitCode != 137 || x.Signal != "SIGKILL" {
		t.Fatalf("exit %+v %v", x, err)
	}
	x, err = ev("exit", `{"exitCode":0,"signal":null,"truncated":true,"durationMs":12}`).Exit()
	if err != nil || x.ExitCode != 0 || x.Signal != "" || !x.Truncated || x.DurationMs != 12 {
		t.Fatalf("exec exit %+v %v", x, err)
	}
	if _, err := ev("stdout", `{}`).Exit(); err == nil {
		t.Fatal("Exit of an output event")
	}

	g, err := ev("gap", `{"from":3,"to":9}`).Gap()
	if err != nil || g.From != 3 || g.To != 9 {
		t.Fatalf("gap %+v %v", g, err)
	}
	p, err := ev("error", `{"code":"conflict","detail":"the VM is lost"}`).Problem()
	if err != nil || p.Code != client.CodeConflict || p.Detail != "the VM is lost" || p.Status != 0 {
		t.Fatalf("problem %+v %v", p, err)
	}
	if !strings.Contains(p.Error(), "conflict: the VM is lost") {
		t.Fatalf("message %q", p.Error())
	}
	v, err := ev("process_exit", `{"type":"process_exit","time":"2025-01-02T03:04:05Z","pid":7,"exit":{"exitCode":1}}`).VMEvent()
	if err != nil || v.Pid != 7 || v.Exit == nil || v.Exit.ExitCode != 1 {
		t.Fatalf("vm event %+v %v", v, err)
	}
	for _, typ := range []string{"exit", "end", "error"} {
		if !ev(typ, "{}").Final() {
			t.Errorf("%s not final", typ)
		}
	}
	if ev("stdout", "{}").Final() || ev("gap", "{}").Final() {
		t.Error("non-final event final")
	}
	if err := ev("x", "not json").Decode(&struct{}{}); err == nil {
		t.Error("Decode of non-JSON")
	}
}

// sseHandler serves text/event-stream through fn, with a flush after each
// write; disconnected is closed once the client went away.
func sseHandler(fn func(w io.Writer, flush func(), r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		fn(w, f.Flush, r)
	})
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	s, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{})
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
		io.WriteString(w, "id: 1\ndata: a\n\n")
		flush()
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	s, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{})
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
	if ev, err := s.Next(context.Background()); err != nil || ev.ID != "1" {
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
	s, err := client.New(srv.URL, apiKey).ProcessOutput(ctx, "vm", 1, client.StreamOptions{})
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
		s, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{IdleTimeout: 80 * time.Millisecond})
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
			io.WriteString(w, "id: 1\nevent: exit\ndata: {\"exitCode\":0}\n\n")
		}))
		defer srv.Close()
		// The client-wide default applies when the stream sets none.
		c := client.New(srv.URL, apiKey, client.WithStreamIdleTimeout(150*time.Millisecond))
		s, err := c.ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ev, err := s.Next(context.Background())
		if err != nil || ev.Type != "exit" {
			t.Fatalf("Next: %+v %v", ev, err)
		}
		if _, err := s.Next(context.Background()); err != io.EOF {
			t.Fatalf("end: %v", err)
		}
	})
	t.Run("disabled per stream", func(t *testing.T) {
		srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, "data: late\n\n")
		}))
		defer srv.Close()
		c := client.New(srv.URL, apiKey, client.WithStreamIdleTimeout(30*time.Millisecond))
		s, err := c.ShellOutput(context.Background(), "vm", "sh", client.StreamOptions{IdleTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if ev, err := s.Next(context.Background()); err != nil || string(ev.Data) != "late" {
			t.Fatalf("Next: %+v %v", ev, err)
		}
	})
}

// TestStreamErrorStatus checks that a stream refused before it starts is a
// problem, not a stream.
func TestStreamErrorStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"status":400,"code":"invalid_argument","detail":"Last-Event-ID must be a sequence number"}`)
	}))
	defer srv.Close()
	_, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{LastEventID: "x"})
	if !client.IsCode(err, client.CodeInvalidArgument) {
		t.Fatalf("err %v", err)
	}
}

// TestSSEFromR3labsServer reads a stream written by r3labs/sse configured as
// the gateway's hub (handlers/sse.go) is: the wire format and the way a
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
	s, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{LastEventID: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := readAll(t, s)
	if err != io.EOF || len(evs) != 2 || evs[0].Type != "stdout" || evs[1].Type != "exit" || s.LastEventID() != "1" {
		t.Fatalf("events %+v, end %v", evs, err)
	}
	if o, err := evs[0].Output(); err != nil || string(o.Data) != "hi" {
		t.Fatalf("output %+v %v", o, err)
	}
}

// TestNoGoroutineOutlivesStream ends streams every way they can end and
// checks that nothing of theirs is left running.
func TestNoGoroutineOutlivesStream(t *testing.T) {
	var hang atomic.Bool
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) {
		io.WriteString(w, "id: 1\ndata: a\n\n")
		if hang.Load() {
			flush()
			<-r.Context().Done()
		}
	}))
	c := client.New(srv.URL, apiKey)
	open := func(ctx context.Context, hangs bool, idle time.Duration) *client.Stream {
		t.Helper()
		hang.Store(hangs)
		s, err := c.VMEvents(ctx, "vm", client.StreamOptions{IdleTimeout: idle})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Closed mid-stream.
	s := open(context.Background(), true, 0)
	s.Close()
	// Next's context ends.
	s = open(context.Background(), true, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: %v", err)
	}
	cancel()
	// The stream's own context ends, and nobody calls Close.
	octx, ocancel := context.WithCancel(context.Background())
	s = open(octx, true, 0)
	ocancel()
	if _, err := s.Next(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v", err)
	}
	// Idle timeout, nobody calls Close.
	s = open(context.Background(), true, 30*time.Millisecond)
	if _, err := s.Next(context.Background()); !errors.Is(err, client.ErrIdleTimeout) {
		t.Fatalf("Next: %v", err)
	}
	// Clean end, nobody calls Close.
	s = open(context.Background(), false, time.Hour)
	if _, err := s.Next(context.Background()); err != io.EOF {
		t.Fatalf("end: %v", err)
	}

	srv.Close() // closes idle keep-alive connections too
	goleak.VerifyNone(t)
}
