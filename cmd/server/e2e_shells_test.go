package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// screen follows a shell's SSE output from its start into a buffer, so a
// test can wait for text to show.
type screen struct {
	t      testing.TB
	s      *client.Stream
	req    *http.Request
	mu     sync.Mutex
	buf    bytes.Buffer
	last   client.Event // the final event, once the stream ended
	lastID uint64
	ended  chan struct{}
	wg     sync.WaitGroup
}

// followScreen reads the output of a shell in the background until the
// stream ends or the test does.
func (e *e2e) followScreen(t testing.TB, c *client.Client, vm, shell string) *screen {
	t.Helper()
	s, err := c.ShellOutput(ctxT(t), vm, shell, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc := &screen{t: t, s: s, req: e.eventReq("GET", "/v1/vms/"+vm+"/shells/"+shell+"/output"), ended: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*e2eTimeout)
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		defer close(sc.ended)
		for {
			ev, err := s.Next(ctx)
			if err != nil {
				return
			}
			validateEvent(e, sc.req, ev)
			sc.mu.Lock()
			if id, err := strconv.ParseUint(ev.ID, 10, 64); err == nil {
				sc.lastID = id
			}
			if ev.Final() {
				sc.last = ev
			} else if o, err := ev.Output(); err == nil {
				sc.buf.Write(o.Data)
			}
			sc.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		s.Close()
		sc.wg.Wait()
	})
	return sc
}

func (sc *screen) String() string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.buf.String()
}

// waitFor waits until want shows on the screen, and reports false when the
// stream ended first.
func (sc *screen) waitFor(want string) bool {
	sc.t.Helper()
	deadline := time.After(e2eTimeout)
	for !strings.Contains(sc.String(), want) {
		select {
		case <-sc.ended:
			return strings.Contains(sc.String(), want)
		case <-deadline:
			sc.t.Fatalf("%q did not show in time; screen %q", want, sc.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// end waits for the stream's final event.
func (sc *screen) end() client.Event {
	sc.t.Helper()
	select {
	case <-sc.ended:
	case <-time.After(e2eTimeout):
		sc.t.Fatalf("the shell's stream did not end; screen %q", sc.String())
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.last
}

// prompt is what the agentOS shells print as their prompt.
const prompt = "$ "

// openLiveShell opens a shell whose client never answers terminal queries
// and waits for its prompt. The gateway answers the shell's queries at
// once, but on the pinned engine input that arrives while the shell already
// waits for the answer may be held until its 2 s wait is over (README,
// known limits), so now and then a shell gives up at start through no
// fault of the gateway; such a shell is opened again, a few times at most.
func (e *e2e) openLiveShell(t testing.TB, c *client.Client, vm string, req client.ShellRequest) (string, *screen) {
	t.Helper()
	const attempts = 4
	for i := 1; ; i++ {
		id, err := c.OpenShell(ctxT(t), vm, req)
		if err != nil {
			t.Fatal(err)
		}
		sc := e.followScreen(t, c, vm, id)
		if sc.waitFor(prompt) {
			return id, sc
		}
		if i == attempts {
			t.Fatalf("no shell showed its prompt in %d attempts; last screen %q, end %s %s", attempts, sc.String(), sc.last.Type, sc.last.Data)
		}
		t.Logf("attempt %d: the shell ended at start (%s %s); screen %q", i, sc.last.Type, sc.last.Data, sc.String())
	}
}

// TestE2EShellWithoutTerminal: a client that never answers terminal queries
// (plain HTTP: POST input, SSE output) drives a shell: the gateway answers
// them, so the shell runs commands, is resized, outlives the engine's 2 s
// wait for an answer, and ends with its exit status, which stays readable;
// late requests are conflicts, DELETE removes the record.
func TestE2EShellWithoutTerminal(t *testing.T) {
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true") // warm the VM: its first process is slow to start

	for _, shell := range []string{"sh", "bash"} {
		t.Run(shell, func(t *testing.T) {
			ctx := ctxFor(t, 5*e2eTimeout)
			id, sc := e.openLiveShell(t, c, vm.ID, client.ShellRequest{Shell: shell, Cols: 100, Rows: 30})
			got, err := c.GetShell(ctx, vm.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != id || got.Shell != shell || got.State != client.ShellRunning || got.Cols != 100 || got.Rows != 30 || got.Exit != nil || got.ExitedAt != nil {
				t.Fatalf("running shell: %+v", got)
			}

			if err := c.ShellInput(ctx, vm.ID, id, []byte("echo shell-$((6*7))-ok\r")); err != nil {
				t.Fatal(err)
			}
			if !sc.waitFor("shell-42-ok") {
				t.Fatalf("the shell ended (%s %s) before the echo; screen %q", sc.last.Type, sc.last.Data, sc.String())
			}

			// The guest has no stty or tput (its stty says terminal control
			// is not supported in WASM), so the size is checked on the
			// gateway's side.
			if err := c.ResizeShell(ctx, vm.ID, id, 120, 40); err != nil {
				t.Fatal(err)
			}
			if got, err := c.GetShell(ctx, vm.ID, id); err != nil || got.Cols != 120 || got.Rows != 40 {
				t.Fatalf("after resize: %+v %v", got, err)
			}

			// Idle at the prompt well past the engine's 2 s wait for a cursor
			// answer: the shell is still there and still runs commands.
			time.Sleep(3 * time.Second)
			if got, err := c.GetShell(ctx, vm.ID, id); err != nil || got.State != client.ShellRunning {
				t.Fatalf("after 3 s at the prompt: %+v %v; screen %q", got, err, sc.String())
			}
			if err := c.ShellInput(ctx, vm.ID, id, []byte("echo still-$((1+1))\r")); err != nil {
				t.Fatal(err)
			}
			if !sc.waitFor("still-2") {
				t.Fatalf("the shell ended (%s %s) before the second echo; screen %q", sc.last.Type, sc.last.Data, sc.String())
			}
			if strings.Contains(sc.String(), "cursor position could not be read") {
				t.Fatalf("the shell missed a cursor answer; screen %q", sc.String())
			}

			if err := c.ShellInput(ctx, vm.ID, id, []byte("exit 3\r")); err != nil {
				t.Fatal(err)
			}
			last := sc.end()
			st, err := last.ShellEnd()
			if err != nil || st.ExitCode != 3 || st.Signal != "" {
				t.Fatalf("final event %s %s: %+v %v", last.Type, last.Data, st, err)
			}
			got, err = c.GetShell(ctx, vm.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != client.ShellExited || got.Exit == nil || got.Exit.ExitCode != 3 || got.ExitedAt == nil || got.ExitedAt.Before(got.StartedAt) {
				t.Fatalf("ended shell: %+v", got)
			}
			list, err := c.ListShells(ctx, vm.ID)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, it := range list.Items {
				found = found || it.ID == id && it.State == client.ShellExited && it.Exit != nil && it.Exit.ExitCode == 3
			}
			if !found {
				t.Fatalf("the ended shell is not listed with its exit: %+v", list.Items)
			}

			// The ended shell's output is still there to resume from, but not
			// beyond its end; and the end comes again, with the status.
			err = e.raw("GET", "/v1/vms/"+vm.ID+"/shells/"+id+"/output", testAdminKey, nil,
				map[string]string{"Last-Event-ID": strconv.FormatUint(sc.lastID+10, 10)})
			wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
			s, err := c.ShellOutput(ctx, vm.ID, id, client.StreamOptions{LastEventID: strconv.FormatUint(sc.lastID, 10)})
			if err != nil {
				t.Fatal(err)
			}
			evs := e.collect(s, sc.req, e2eTimeout)
			if st, err := evs[len(evs)-1].ShellEnd(); err != nil || st.ExitCode != 3 || len(evs) != 1 {
				t.Fatalf("resumed at the end: %s", summarize(evs))
			}

			ce := wantCode(t, c.ResizeShell(ctx, vm.ID, id, 80, 24), client.CodeConflict, http.StatusConflict)
			if ce.Details["state"] != "exited" {
				t.Fatalf("late resize: details %v", ce.Details)
			}
			ce = wantCode(t, c.ShellInput(ctx, vm.ID, id, []byte("x")), client.CodeConflict, http.StatusConflict)
			if ce.Details["state"] != "exited" {
				t.Fatalf("late input: details %v", ce.Details)
			}
			if err := c.CloseShell(ctx, vm.ID, id); err != nil {
				t.Fatalf("DELETE of an ended shell: %v", err)
			}
			wantCode(t, c.CloseShell(ctx, vm.ID, id), client.CodeNotFound, http.StatusNotFound)
			_, err = c.GetShell(ctx, vm.ID, id)
			wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		})
	}

	t.Run("VM disposed", func(t *testing.T) {
		ctx := ctxT(t)
		vm2 := e.vm(c, client.CreateVMRequest{})
		id, err := c.OpenShell(ctx, vm2.ID, client.ShellRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sc := e.followScreen(t, c, vm2.ID, id)
		if _, err := c.DeleteVM(ctx, vm2.ID); err != nil {
			t.Fatal(err)
		}
		last := sc.end()
		if last.Type != client.EventError {
			t.Fatalf("a shell whose VM was disposed ends with %s %s", last.Type, last.Data)
		}
		p, err := last.Problem()
		if err != nil || p.Code != client.CodeConflict {
			t.Fatalf("final error %s: %+v %v", last.Data, p, err)
		}
	})
}

// shellOutputUpTo reads the whole output of a shell over SSE up to sequence
// upTo and returns it.
func (e *e2e) shellOutputUpTo(t testing.TB, c *client.Client, vm, shell string, upTo uint64) []byte {
	t.Helper()
	s, err := c.ShellOutput(ctxT(t), vm, shell, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := e.eventReq("GET", "/v1/vms/"+vm+"/shells/"+shell+"/output")
	var out bytes.Buffer
	for {
		ev, err := s.Next(ctxT(t))
		if err == io.EOF {
			t.Fatalf("the stream ended before sequence %d", upTo)
		}
		if err != nil {
			t.Fatal(err)
		}
		validateEvent(e, req, ev)
		if ev.Type == client.EventGap {
			t.Fatalf("gap in a short shell's output: %s", ev.Data)
		}
		if o, err := ev.Output(); err == nil {
			out.Write(o.Data)
		}
		if id, _ := strconv.ParseUint(ev.ID, 10, 64); id >= upTo {
			if id != upTo {
				t.Fatalf("the stream skipped from below %d to %d", upTo, id)
			}
			return out.Bytes()
		}
	}
}
