package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
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

// describe names an event for the tests' expectations.
func describe(ev client.Event) string {
	switch ev := ev.(type) {
	case *client.Output:
		return fmt.Sprintf("%s:%d", ev.Stream, ev.Seq)
	case *client.Gap:
		return fmt.Sprintf("gap:%d-%d", ev.From, ev.To)
	case *client.Exit:
		return fmt.Sprintf("exit:%d", ev.ExitCode)
	case *client.ShellEnd:
		return fmt.Sprintf("end:%d", ev.ExitCode)
	case *client.VMEvent:
		return fmt.Sprintf("%s:%s", ev.Type, ev.State)
	case *client.SessionEvent:
		return fmt.Sprintf("durable:%d", ev.Sequence)
	case *client.EphemeralEvent:
		return fmt.Sprintf("ephemeral:%d", ev.AfterSequence)
	case *client.AgentStderr:
		return "agent_stderr:" + ev.Text
	case *client.AgentExit:
		return fmt.Sprintf("agent_exit:%v:%s", ev.ExitCode, ev.Restart)
	case *client.Overflow:
		return "overflow:" + ev.Reason
	case *client.SessionEnd:
		return "end:" + string(ev.State)
	case *client.UnknownEvent:
		return "unknown:" + ev.Type
	}
	return fmt.Sprintf("%T", ev)
}

// drain runs a followed stream to its end: the events it yielded, and the
// error it ended with.
func drain(seq iter.Seq2[client.Event, error]) ([]string, error) {
	var seen []string
	var last error
	for ev, err := range seq {
		if last != nil {
			return seen, fmt.Errorf("a value after the error %v: %v, %v", last, ev, err)
		}
		if err != nil {
			if ev != nil {
				return seen, fmt.Errorf("an event with the error %v", err)
			}
			last = err
			continue
		}
		seen = append(seen, describe(ev))
	}
	return seen, last
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
	c := newClient(t, srv.URL, fastRetry(3))

	var seen []string
	var data strings.Builder
	var exit *client.Exit
	for ev, err := range c.VM(weirdVM).Process(42).Follow(context.Background()) {
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
		seen = append(seen, describe(ev))
		switch ev := ev.(type) {
		case *client.Output:
			data.Write(ev.Data)
		case *client.Exit:
			exit = ev
		}
	}
	if got, want := strings.Join(seen, " "), "stdout:1 stdout:2 stdout:3 stdout:4 gap:5-6 stdout:7 exit:2"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if data.String() != "abcdg" {
		t.Fatalf("data %q", data.String())
	}
	if exit == nil || exit.ExitCode != 2 || exit.Signal != "" {
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

// TestFollowErrorEvent checks that a final error event ends a followed
// stream with its *Error, without a reconnection, whatever the stream;
// only a VM's conflict (the VM ended) is a normal end.
func TestFollowErrorEvent(t *testing.T) {
	shutdown := "id: 1\nevent: error\ndata: {\"code\":\"unavailable\",\"detail\":\"the gateway is shutting down\"}\n\n"
	ended := "id: 1\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is disposed\"}\n\n"
	ctx := context.Background()
	vmState := "id: 1\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"disposed\"}\n\n"
	for _, tc := range []struct {
		name   string
		first  string
		end    string
		follow func(vm *client.VMHandle) iter.Seq2[client.Event, error]
		code   client.Code // "" for a clean end
	}{
		{"process, shutdown", out(1, "a"), shutdown,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.Process(1).Follow(ctx) }, client.CodeUnavailable},
		{"process, VM ended", out(1, "a"), ended,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.Process(1).Follow(ctx) }, client.CodeConflict},
		{"shell, VM ended", out(1, "a"), ended,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.Shell("sh").Follow(ctx) }, client.CodeConflict},
		{"session, shutdown", durable(1, "agent_message_chunk"), shutdown,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.Session("ses").Follow(ctx) }, client.CodeUnavailable},
		{"session, conflict", durable(1, "agent_message_chunk"), ended,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.Session("ses").Follow(ctx) }, client.CodeConflict},
		{"VM, shutdown", vmState, shutdown,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.FollowEvents(ctx) }, client.CodeUnavailable},
		{"VM, ended", vmState, ended,
			func(vm *client.VMHandle) iter.Seq2[client.Event, error] { return vm.FollowEvents(ctx) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, r *http.Request) {
					send := startSSE(w)
					send(tc.first)
					send(tc.end)
				},
			}}
			srv := httptest.NewServer(f)
			defer srv.Close()
			seen, err := drain(tc.follow(newClient(t, srv.URL, fastRetry(3)).VM("vm")))
			var e *client.Error
			switch {
			case tc.code == "" && err != nil:
				t.Fatalf("err %v, want a clean end", err)
			case tc.code != "" && (!errors.As(err, &e) || e.Code != tc.code || e.Status != 0):
				t.Fatalf("err %v, want the error event's %s", err, tc.code)
			}
			if len(seen) != 1 {
				t.Fatalf("events %v", seen)
			}
			if n := len(f.lastEventIDs()); n != 1 {
				t.Fatalf("%d connections after an error event", n)
			}
		})
	}
}

// TestFollowOpenFails checks that a followed stream that cannot open gives
// up at once on an answer that cannot change, and after MaxAttempts
// requests (the open itself is not retried besides) on one that can.
func TestFollowOpenFails(t *testing.T) {
	for _, tc := range []struct {
		answer   canned
		code     client.Code
		requests int
		message  string
	}{
		{problem(404, "not_found", "no process 1"), client.CodeNotFound, 1, "no process 1"},
		{problem(503, "unavailable", "sidecar restarting"), client.CodeUnavailable, 3, "giving up after 3 attempts"},
		{problem(429, "resource_exhausted", "slow down"), client.CodeResourceExhausted, 3, "giving up after 3 attempts"},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			rec.reset(tc.answer)
			_, err := drain(newClient(t, srv.URL, fastRetry(3)).VM("vm").Process(1).Follow(context.Background()))
			if !client.IsCode(err, tc.code) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err %v", err)
			}
			if n := len(rec.requests()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
		})
	}
}

func TestFollowProgressResetsRetries(t *testing.T) {
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
	seen, err := drain(newClient(t, srv.URL, fastRetry(2)).VM("vm").Process(1).Follow(context.Background()))
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if len(seen) != 6 {
		t.Fatalf("events %v", seen)
	}
	if got := strings.Join(f.lastEventIDs(), ","); got != ",1,2,3,4,5" {
		t.Fatalf("Last-Event-IDs %s", got)
	}
}

// TestFollowBreakCloses checks that leaving the loop closes the stream.
func TestFollowBreakCloses(t *testing.T) {
	gone := make(chan struct{})
	f := &flakyServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)(out(1, "a") + out(2, "b"))
			<-r.Context().Done()
			close(gone)
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := 0
	for _, err := range newClient(t, srv.URL, fastRetry(3)).VM("vm").Process(1).Follow(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d events", n)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not closed")
	}
}

func TestFollowContext(t *testing.T) {
	srv := httptest.NewServer(sseHandler(func(w io.Writer, flush func(), r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := drain(newClient(t, srv.URL, fastRetry(3)).VM("vm").Process(1).Follow(ctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

func TestFollowReconnectsWhenIdle(t *testing.T) {
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
	c := newClient(t, srv.URL, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, IdleTimeout: 100 * time.Millisecond}))
	if _, err := drain(c.VM("vm").Process(1).Follow(context.Background())); err != nil {
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
			send("id: 1\nevent: end\ndata: {\"exitCode\":0}\n\n")
		},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	vm := newClient(t, srv.URL, fastRetry(3)).VM(weirdVM)
	// The conflict error event after the final state is the normal end.
	seen, err := drain(vm.FollowEvents(context.Background()))
	if err != nil {
		t.Fatalf("vm events: %v", err)
	}
	if got := strings.Join(seen, " "); got != "state:ready state:disposed" {
		t.Fatalf("events %q", got)
	}
	seen, err = drain(vm.Shell(shellID).Follow(context.Background()))
	if err != nil || strings.Join(seen, " ") != "stdout:1 end:0" {
		t.Fatalf("shell: %v, %v", seen, err)
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
	c := newClient(t, srv.URL, fastRetry(3))

	seen, err := drain(c.VM(weirdVM).Session(sessionID).Follow(context.Background()))
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	want := "ephemeral:0 durable:1 ephemeral:1 durable:2 ephemeral:2 agent_stderr:w durable:3 ephemeral:3 overflow:slow client durable:4 agent_exit:<nil>:no end:closed"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
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
