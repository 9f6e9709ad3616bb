package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// flakyServer answers one connection per script entry, in order, and
// records the Last-Event-ID of each.
type flakyServer struct {
	mu      sync.Mutex
	ids     []string
	paths   []string
	scripts []func(w http.ResponseWriter, r *http.Request)
}

func (f *flakyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := len(f.ids)
	f.ids = append(f.ids, r.Header.Get("Last-Event-ID"))
	f.paths = append(f.paths, r.URL.EscapedPath())
	f.mu.Unlock()
	if n >= len(f.scripts) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, `{"code":"internal","detail":"too many connections"}`)
		return
	}
	f.scripts[n](w, r)
}

func (f *flakyServer) lastEventIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

func startSSE(w http.ResponseWriter) func(string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return func(s string) {
		io.WriteString(w, s)
		w.(http.Flusher).Flush()
	}
}

func out(seq int, data string) string {
	return fmt.Sprintf("id: %d\ndata: {\"seq\":%d,\"stream\":\"stdout\",\"data\":%q,\"encoding\":\"utf8\",\"ts\":\"2025-01-02T03:04:05Z\"}\nevent: stdout\n\n", seq, seq, data)
}

func fastRetry(max int) client.Option {
	return client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: max, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
}

func TestFollowProcessOutputResumes(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(out(1, "a") + ": heartbeat\n\n" + out(2, "b"))
			send(out(3, "c"))
			// Cut inside event 4: the client must not count it.
			send("id: 4\nevent: stdout\ndata: {\"seq\":4,\"da")
			panic(http.ErrAbortHandler)
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(out(4, "d"))
			// A clean end, but without the final event.
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send("id: 6\nevent: gap\ndata: {\"from\":5,\"to\":6}\n\n")
			send(out(7, "g"))
			send("id: 7\nevent: exit\ndata: {\"exitCode\":2,\"signal\":null}\n\n")
			// Whatever follows the exit event is not read.
			send(out(8, "never"))
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New(srv.URL, apiKey, fastRetry(3))

	var ids []string
	var data strings.Builder
	var exit *client.ExitEvent
	err := c.FollowProcessOutput(context.Background(), weirdVM, 42, func(ev client.Event) error {
		ids = append(ids, ev.Type+":"+ev.ID)
		switch ev.Type {
		case client.EventStdout:
			o, err := ev.Output()
			if err != nil {
				return err
			}
			data.Write(o.Data)
		case client.EventExit:
			x, err := ev.Exit()
			if err != nil {
				return err
			}
			exit = &x
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if got, want := strings.Join(ids, " "), "stdout:1 stdout:2 stdout:3 stdout:4 gap:6 stdout:7 exit:7"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if data.String() != "abcdg" {
		t.Fatalf("data %q", data.String())
	}
	if exit == nil || exit.ExitCode != 2 {
		t.Fatalf("exit %+v", exit)
	}
	if got := f.lastEventIDs(); strings.Join(got, ",") != ",3,4" {
		t.Fatalf("Last-Event-IDs %q, want [\"\" 3 4]", got)
	}
	for _, p := range f.paths {
		if p != "/v1/vms/"+weirdVMEsc+"/processes/42/output" {
			t.Fatalf("path %s", p)
		}
	}
}

func TestFollowProcessOutputErrorEvent(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(out(1, "a"))
			send("id: 1\nevent: error\ndata: {\"code\":\"unavailable\",\"detail\":\"the gateway is shutting down\"}\n\n")
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var types []string
	err := client.New(srv.URL, apiKey, fastRetry(3)).FollowProcessOutput(context.Background(), "vm", 1, func(ev client.Event) error {
		types = append(types, ev.Type)
		return nil
	})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeUnavailable || e.Detail != "the gateway is shutting down" {
		t.Fatalf("err %v", err)
	}
	if strings.Join(types, ",") != "stdout,error" {
		t.Fatalf("events %v", types)
	}
	if n := len(f.lastEventIDs()); n != 1 {
		t.Fatalf("%d connections after an error event", n)
	}
}

func TestFollowProcessOutputDoesNotRetryClientErrors(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":"not_found","detail":"no process 1"}`)
	}))
	defer srv.Close()
	err := client.New(srv.URL, apiKey, fastRetry(5)).FollowProcessOutput(context.Background(), "vm", 1, func(client.Event) error { return nil })
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("err %v", err)
	}
	if calls != 1 {
		t.Fatalf("%d calls", calls)
	}
}

func TestFollowProcessOutputGivesUp(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":"unavailable","detail":"sidecar restarting"}`)
	}))
	defer srv.Close()
	err := client.New(srv.URL, apiKey, fastRetry(3)).FollowProcessOutput(context.Background(), "vm", 1, func(client.Event) error { return nil })
	if !client.IsCode(err, client.CodeUnavailable) || !strings.Contains(err.Error(), "giving up after 3 attempts") {
		t.Fatalf("err %v", err)
	}
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

func TestFollowProcessOutputProgressResetsRetries(t *testing.T) {
	var scripts []func(http.ResponseWriter, *http.Request)
	for i := 1; i <= 5; i++ {
		scripts = append(scripts, func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(out(i, "x"))
			panic(http.ErrAbortHandler)
		})
	}
	scripts = append(scripts, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)("id: 5\nevent: exit\ndata: {\"exitCode\":0}\n\n")
	})
	f := &flakyServer{scripts: scripts}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := 0
	err := client.New(srv.URL, apiKey, fastRetry(2)).FollowProcessOutput(context.Background(), "vm", 1, func(client.Event) error { n++; return nil })
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if n != 6 {
		t.Fatalf("%d events", n)
	}
	if got := strings.Join(f.lastEventIDs(), ","); got != ",1,2,3,4,5" {
		t.Fatalf("Last-Event-IDs %s", got)
	}
}

func TestFollowProcessOutputCallbackErrorStops(t *testing.T) {
	gone := make(chan struct{})
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)(out(1, "a"))
			<-r.Context().Done()
			close(gone)
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	stop := errors.New("seen enough")
	err := client.New(srv.URL, apiKey, fastRetry(3)).FollowProcessOutput(context.Background(), "vm", 1, func(client.Event) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("err %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not closed")
	}
}

func TestFollowProcessOutputContext(t *testing.T) {
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := client.New(srv.URL, apiKey, fastRetry(3)).FollowProcessOutput(ctx, "vm", 1, func(client.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

func TestFollowProcessOutputReconnectsWhenIdle(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)(out(1, "a"))
			<-r.Context().Done() // silent: a dead connection
		},
		func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)("id: 1\nevent: exit\ndata: {\"exitCode\":0}\n\n")
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New(srv.URL, apiKey, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, IdleTimeout: 100 * time.Millisecond}))
	if err := c.FollowProcessOutput(context.Background(), "vm", 1, func(client.Event) error { return nil }); err != nil {
		t.Fatalf("follow: %v", err)
	}
	if got := strings.Join(f.lastEventIDs(), ","); got != ",1" {
		t.Fatalf("Last-Event-IDs %s", got)
	}
}

func TestFollowVMEventsAndShellOutput(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send("id: 1\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"ready\"}\n\n")
			panic(http.ErrAbortHandler)
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send("id: 2\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"disposed\"}\n\n")
			send("id: 2\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is disposed\"}\n\n")
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(out(1, "$ "))
			send("id: 1\nevent: end\ndata: {}\n\n")
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New(srv.URL, apiKey, fastRetry(3))
	var states []client.VMState
	err := c.FollowVMEvents(context.Background(), weirdVM, func(ev client.Event) error {
		if ev.Type == "state" {
			v, err := ev.VMEvent()
			if err != nil {
				return err
			}
			states = append(states, v.State)
		}
		return nil
	})
	if !client.IsCode(err, client.CodeConflict) {
		t.Fatalf("err %v", err)
	}
	if len(states) != 2 || states[1] != client.VMDisposed {
		t.Fatalf("states %v", states)
	}
	if err := c.FollowShellOutput(context.Background(), weirdVM, shellID, func(client.Event) error { return nil }); err != nil {
		t.Fatalf("shell: %v", err)
	}
	want := []string{"/v1/vms/" + weirdVMEsc + "/events", "/v1/vms/" + weirdVMEsc + "/events", "/v1/vms/" + weirdVMEsc + "/shells/" + shellIDEsc + "/output"}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Join(f.paths, " ") != strings.Join(want, " ") || strings.Join(f.ids, ",") != ",1," {
		t.Fatalf("paths %v ids %v", f.paths, f.ids)
	}
}

func durable(seq int, typ string) string {
	return fmt.Sprintf("id: %d\nevent: durable\ndata: {\"sequence\":%d,\"timestamp\":\"2025-01-02T03:04:05Z\",\"type\":%q,\"update\":{\"sessionUpdate\":%q}}\n\n", seq, seq, typ, typ)
}

// ephemeral is a streamed delta; like the gateway (r3labs writes an id line
// on every event), it repeats the id of the last durable event, "" before
// the first.
func ephemeral(lastDurable string, after int) string {
	return fmt.Sprintf("id: %s\nevent: ephemeral\ndata: {\"afterSequence\":%d,\"type\":\"agent_message_chunk\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\"}}\n\n", lastDurable, after)
}

func TestFollowSessionEventsResumes(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			// Only a delta before the first durable event, then a drop:
			// the client resumes from the start.
			send(ephemeral("", 0))
			panic(http.ErrAbortHandler)
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(durable(1, "user_message_chunk") + ": heartbeat\n\n" + ephemeral("1", 1))
			send(durable(2, "agent_message_chunk"))
			send(ephemeral("2", 2))
			send("id: 2\nevent: agent_stderr\ndata: {\"agentType\":\"pi\",\"processId\":\"p1\",\"text\":\"w\"}\n\n")
			// Cut inside durable event 3: the client must not count it.
			send("id: 3\nevent: durable\ndata: {\"sequence\":3,\"ti")
			panic(http.ErrAbortHandler)
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(durable(3, "tool_call"))
			// A delta last, then a clean end without the final event: the
			// resume point stays the last durable event, 3.
			send(ephemeral("3", 3))
		},
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send("id: 3\nevent: overflow\ndata: {\"reason\":\"slow client\"}\n\n")
			send(durable(4, "agent_message_chunk"))
			send("id: 4\nevent: agent_exit\ndata: {\"agentType\":\"pi\",\"processId\":\"p1\",\"exitCode\":null,\"restart\":\"no\"}\n\n")
			send("id: 4\nevent: end\ndata: {\"state\":\"closed\"}\n\n")
			// Whatever follows the end event is not read.
			send(durable(5, "never"))
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New(srv.URL, apiKey, fastRetry(3))

	var seen []string
	var seqs []uint64
	var endState string
	err := c.FollowSessionEvents(context.Background(), weirdVM, sessionID, func(ev client.Event) error {
		seen = append(seen, ev.Type+":"+ev.ID)
		switch ev.Type {
		case client.EventDurable:
			d, err := ev.SessionEvent()
			if err != nil {
				return err
			}
			if ev.ID != fmt.Sprint(d.Sequence) {
				return fmt.Errorf("durable event id %s, sequence %d", ev.ID, d.Sequence)
			}
			seqs = append(seqs, d.Sequence)
		case client.EventEphemeral:
			e, err := ev.EphemeralEvent()
			if err != nil {
				return err
			}
			if fmt.Sprint(e.AfterSequence) != ev.ID && !(ev.ID == "" && e.AfterSequence == 0) {
				return fmt.Errorf("ephemeral event id %q after %d", ev.ID, e.AfterSequence)
			}
		case client.EventEnd:
			var end struct{ State string }
			if err := ev.Decode(&end); err != nil {
				return err
			}
			endState = end.State
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Fatalf("durable sequences %v, want each of 1..4 once", seqs)
	}
	want := "ephemeral: durable:1 ephemeral:1 durable:2 ephemeral:2 agent_stderr:2 durable:3 ephemeral:3 overflow:3 durable:4 agent_exit:4 end:4"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if endState != "closed" {
		t.Fatalf("end state %q", endState)
	}
	if got := strings.Join(f.lastEventIDs(), ","); got != ",,2,3" {
		t.Fatalf("Last-Event-IDs %q, want \"\", \"\", 2, 3", got)
	}
	for _, p := range f.paths {
		if p != "/v1/vms/"+weirdVMEsc+"/sessions/"+sessionIDEsc+"/events" {
			t.Fatalf("path %s", p)
		}
	}
}

func TestFollowSessionEventsErrorEvent(t *testing.T) {
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			send := startSSE(w)
			send(durable(1, "agent_message_chunk"))
			send("id: 1\nevent: error\ndata: {\"code\":\"unavailable\",\"detail\":\"the gateway is shutting down\"}\n\n")
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var types []string
	err := client.New(srv.URL, apiKey, fastRetry(3)).FollowSessionEvents(context.Background(), "vm", "ses", func(ev client.Event) error {
		types = append(types, ev.Type)
		return nil
	})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeUnavailable {
		t.Fatalf("err %v", err)
	}
	if strings.Join(types, ",") != "durable,error" || len(f.lastEventIDs()) != 1 {
		t.Fatalf("events %v, %d connections", types, len(f.lastEventIDs()))
	}
}
