package main

// Server-Sent Events end to end: resuming with Last-Event-ID, gap events
// past the replay buffer, goroutines freed when clients go away, and VMs
// disposed when idle.

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// numbered is a command printing "line-1" to "line-n", with a short sleep
// (a guest process, ~50 ms) after each.
func numbered(n int) (string, string) {
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	return fmt.Sprintf(`sh -c 'i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); sleep 0.02; done'`, n), want.String()
}

// TestE2ESSEResume: read part of a process's output, disconnect, reconnect
// with Last-Event-ID: exactly the rest arrives, nothing twice, nothing
// missing.
func TestE2ESSEResume(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true")
	cmd, want := numbered(25)
	p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	req := e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm.ID, p.Pid()))

	// First connection: read until line-8, then go away mid-stream.
	s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var seqs []uint64
	for !strings.Contains(got.String(), "line-8\n") {
		ev, err := next(ctx, s)
		if err != nil {
			t.Fatalf("first connection: %v after %q", err, got.String())
		}
		validateEvent(e, req, ev)
		if ev.Type != "stdout" {
			t.Fatalf("first connection: %s event %s", ev.Type, ev.Data)
		}
		o, _ := ev.Output()
		got.Write(o.Data)
		seqs = append(seqs, o.Seq)
		if ev.ID != strconv.FormatUint(o.Seq, 10) {
			t.Fatalf("event id %q, seq %d", ev.ID, o.Seq)
		}
	}
	last := s.LastEventID()
	s.Close()
	if last != strconv.FormatUint(seqs[len(seqs)-1], 10) {
		t.Fatalf("LastEventID %q after seqs %v", last, seqs)
	}
	time.Sleep(300 * time.Millisecond) // more output while nobody listens

	// Second connection from there: exactly the rest, then exit.
	s, err = c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: last})
	if err != nil {
		t.Fatal(err)
	}
	evs := e.collect(s, req, e2eTimeout)
	for _, ev := range evs[:len(evs)-1] {
		o, err := ev.Output()
		if err != nil {
			t.Fatalf("resumed stream: %s", summarize(evs))
		}
		if o.Seq != seqs[len(seqs)-1]+1 {
			t.Fatalf("resumed at seq %d after %d: a gap or a duplicate (%s)", o.Seq, seqs[len(seqs)-1], summarize(evs))
		}
		seqs = append(seqs, o.Seq)
		got.Write(o.Data)
	}
	if x, err := evs[len(evs)-1].Exit(); err != nil || x.ExitCode != 0 {
		t.Fatalf("final event: %s", summarize(evs[len(evs)-1:]))
	}
	if got.String() != want {
		t.Fatalf("output over two connections:\n%q\nwant\n%q", got.String(), want)
	}

	t.Run("lastEventId query parameter", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		// For clients that cannot set headers (EventSource).
		mid := seqs[len(seqs)/2]
		r, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/vms/%s/processes/%d/output?lastEventId=%d", e.gw.URL, vm.ID, p.Pid(), mid), nil)
		r.Header.Set("Authorization", "Bearer "+testAdminKey)
		r.Header.Set("Accept", "text/event-stream")
		resp, err := e.hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if first := firstEvent(t, resp.Body); first.Type != "stdout" || first.ID != strconv.FormatUint(mid+1, 10) {
			t.Fatalf("resumed with ?lastEventId=%d: %s#%s %s", mid, first.Type, first.ID, first.Data)
		}
	})

	t.Run("resume after the exit", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		// Resuming from the last output event gives just the exit event.
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(seqs[len(seqs)-1], 10)})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, req, e2eTimeout)
		if len(evs) != 1 || evs[0].Type != "exit" {
			t.Fatalf("%s", summarize(evs))
		}
	})

	t.Run("Follow", func(t *testing.T) {
		ctx := ctxT(t)
		var all strings.Builder
		var last client.Event
		for ev, err := range c.VM(vm.ID).Process(p.Pid()).Follow(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if o, ok := ev.(*client.Output); ok {
				all.Write(o.Data)
			}
			last = ev
		}
		if x, ok := last.(*client.Exit); !ok || x.ExitCode != 0 || all.String() != want {
			t.Fatalf("ended with %#v: %q", last, all.String())
		}
	})

	t.Run("VM events", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		s, err := c.VM(vm.ID).Events(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first, err := next(ctx, s)
		s.Close()
		if err != nil || first.Type != "state" {
			t.Fatalf("%v %v", first, err)
		}
		// Resuming after the first event skips it: the next is the
		// process's exit.
		s, err = c.VM(vm.ID).Events(ctx, client.StreamOptions{LastEventID: first.ID})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		second, err := next(ctx, s)
		if err != nil || second.Type != "process_exit" || second.ID == first.ID {
			t.Fatalf("after %s#%s: %s#%s %v", first.Type, first.ID, second.Type, second.ID, err)
		}
		validateEvent(e, e.eventReq("GET", "/v1/vms/"+vm.ID+"/events"), second)
	})
}

// TestE2ESSEGap: with a 64-byte replay buffer, a reader that connects after
// a process printed a lot is told with a gap event what it missed.
func TestE2ESSEGap(t *testing.T) {
	t.Parallel()
	const buffer = 64
	e := newE2E(t, fmt.Sprintf("--output-buffer-bytes=%d", buffer))
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: `sh -c 'i=0; while [ $i -lt 200 ]; do echo 0123456789-$i; i=$((i+1)); done'`})
	if err != nil {
		t.Fatal(err)
	}
	if x, err := c.VM(vm.ID).Process(p.Pid()).Wait(ctx, 60*time.Second); err != nil || x.ExitCode != 0 {
		t.Fatalf("%+v %v", x, err)
	}
	req := e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm.ID, p.Pid()))
	for _, from := range []string{"", "0", "1"} {
		t.Run("from "+strconv.Quote(from), func(t *testing.T) {
			e, ctx := e.sub(t), ctxT(t)
			s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: from})
			if err != nil {
				t.Fatal(err)
			}
			evs := e.collect(s, req, e2eTimeout)
			g, err := evs[0].Gap()
			want, _ := strconv.ParseUint("0"+from, 10, 64)
			if err != nil || g.From != want+1 || g.To < g.From || evs[0].ID != strconv.FormatUint(g.To, 10) {
				t.Fatalf("first event: %s", summarize(evs[:1]))
			}
			var kept int
			next := g.To + 1
			for _, ev := range evs[1 : len(evs)-1] {
				o, err := ev.Output()
				if err != nil || o.Seq != next {
					t.Fatalf("after the gap to %d: %s", g.To, summarize(evs))
				}
				next++
				kept += len(o.Data)
			}
			// The buffer keeps about its size, and at least the newest
			// chunk however large.
			if n := len(evs) - 2; n == 0 || (kept > buffer && n > 1) {
				t.Fatalf("%d bytes in %d events kept with a %d-byte buffer", kept, n, buffer)
			}
			if !strings.HasSuffix(output(t, evs, "stdout"), "0123456789-199\n") {
				t.Fatalf("the end of the output is missing: %s", summarize(evs))
			}
			if _, err := evs[len(evs)-1].Exit(); err != nil {
				t.Fatalf("final: %s", summarize(evs))
			}
		})
	}
}

// TestE2EStreamsFreeGoroutines: clients that go away free everything their
// streams held (process output, VM events, agent session events):
// goroutines return to the baseline and the subscriber gauge to 0.
func TestE2EStreamsFreeGoroutines(t *testing.T) {
	e := newE2E(t)
	// A deadline against a hang: a VM with an agent, a session and fifty
	// streams take a while on a loaded machine.
	ctx := ctxFor(t, 3*e2eTimeout)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{Agents: []string{"pi"}})
	e.exec(c, vm.ID, "true")
	// An agent session's streams too (opening one needs no model).
	const sid = "leak-check"
	if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi"}); err != nil {
		t.Fatal(err)
	}
	quiet, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sh -c 'while true; do echo tick; sleep 0.05; done'"})
	if err != nil {
		t.Fatal(err)
	}
	// Warm whatever starts lazily on a first stream, then measure.
	s, err := c.VM(vm.ID).Process(busy.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	eventually(t, 10*time.Second, "the warm-up stream to end", func() bool { return e.metric("agentos_gateway_sse_subscribers") == 0 })
	time.Sleep(200 * time.Millisecond)
	baseline := e.baselineGoroutines(t)

	const n = 20
	var streams []*client.Stream
	for i := range n {
		pid := quiet.Pid()
		if i%2 == 0 {
			pid = busy.Pid()
		}
		s, err := c.VM(vm.ID).Process(pid).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
		s, err = c.VM(vm.ID).Events(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
		if i%2 == 0 {
			s, err = c.VM(vm.ID).Session(sid).Events(ctx, client.StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
	}
	// Every stream is live: it delivers an event.
	for _, s := range streams[:2] {
		if _, err := next(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	total := len(streams)
	eventually(t, 10*time.Second, "every subscriber", func() bool { return e.metric("agentos_gateway_sse_subscribers") == float64(total) })
	open := runtime.NumGoroutine()
	for _, s := range streams {
		s.Close()
	}
	eventually(t, 15*time.Second, "the subscriber gauge to return to 0", func() bool { return e.metric("agentos_gateway_sse_subscribers") == 0 })
	e.goroutinesBack(t, baseline, open, total, "streams")
	// The processes and the VM still serve new streams.
	s, err = c.VM(vm.ID).Process(busy.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := next(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestE2EIdleTimeout: a VM nobody uses, created with onIdle dispose, is
// disposed after its idle timeout, with the reason; an open stream keeps a
// VM busy. (The default, hibernation, is TestE2EHibernateWake's.)
func TestE2EIdleTimeout(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	// The watched VM's stream opens right after its creation, and its
	// timeout leaves room for that on a loaded machine: created before the
	// others with 1 s, it once timed out while they were being created.
	const watchedTimeout = 3 * time.Second
	watched := e.vm(c, client.CreateVMRequest{IdleTimeout: watchedTimeout, OnIdle: "dispose"})
	evs, err := c.VM(watched.ID).Events(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	watchedAt := time.Now()
	idle := e.vm(c, client.CreateVMRequest{IdleTimeout: 1 * time.Second, OnIdle: "dispose"})
	keep := e.vm(c, client.CreateVMRequest{})
	created := time.Now()

	var got *client.VM
	eventually(t, 15*time.Second, "the idle VM to be disposed", func() bool {
		// GET reads the record: it does not count as using the VM.
		got, err = c.VM(idle.ID).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got.State == client.VMDisposed
	})
	if got.Reason != "idle timeout" {
		t.Fatalf("disposed with reason %q", got.Reason)
	}
	t.Logf("idle VM disposed %s after its creation", time.Since(created).Round(100*time.Millisecond))
	_, err = c.VM(idle.ID).Exec(ctx, client.ExecRequest{Command: "true"})
	stateIs("disposed")(t, wantCode(t, err, client.CodeConflict, http.StatusConflict))

	// The VM with an open event stream is still there, well past its
	// timeout; once the stream is closed it goes too.
	time.Sleep(time.Until(watchedAt.Add(2 * watchedTimeout)))
	if v, err := c.VM(watched.ID).Get(ctx); err != nil || v.State != client.VMReady {
		t.Fatalf("a VM with an open stream: %+v %v", v, err)
	}
	evs.Close()
	eventually(t, 15*time.Second, "the watched VM to be disposed once unwatched", func() bool {
		v, err := c.VM(watched.ID).Get(ctx)
		return err == nil && v.State == client.VMDisposed && v.Reason == "idle timeout"
	})
	// A VM without an idle timeout stays.
	if v, err := c.VM(keep.ID).Get(ctx); err != nil || v.State != client.VMReady {
		t.Fatalf("a VM without idle timeout: %+v %v", v, err)
	}
}
