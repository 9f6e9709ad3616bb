package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
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
	last   event // the final event, once the stream ended
	lastID uint64
	ended  chan struct{}
	wg     sync.WaitGroup
}

// followScreen reads the output of a shell in the background until the
// stream ends or the test does.
func (e *e2e) followScreen(t testing.TB, c *client.Client, vm, shell string) *screen {
	t.Helper()
	// The stream lives as long as the screen follows it: a stream bound to
	// one call's 60 s ended in the middle of a scenario that a loaded
	// machine made longer, and the screen then missed the shell's last
	// words.
	ctx, cancel := context.WithTimeout(context.Background(), 5*e2eTimeout)
	s, err := c.VM(vm).Shell(shell).Output(ctx, client.StreamOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sc := &screen{t: t, s: s, req: e.eventReq("GET", "/v1/vms/"+vm+"/shells/"+shell+"/output"), ended: make(chan struct{})}
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		defer close(sc.ended)
		for {
			ev, err := next(ctx, s)
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
func (sc *screen) end() event {
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

// openLiveShell opens a shell and waits for its prompt.
func (e *e2e) openLiveShell(t testing.TB, c *client.Client, vm string, req client.ShellRequest) (string, *screen) {
	t.Helper()
	id, err := c.VM(vm).OpenShell(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	sc := e.followScreen(t, c, vm, id.ID())
	if !sc.waitFor(prompt) {
		t.Fatalf("no prompt; screen %q", sc.String())
	}
	return id.ID(), sc
}

// TestE2EShellWithoutTerminal: a client that never answers terminal queries
// (plain HTTP: POST input, SSE output) drives a shell: the gateway answers
// them, so the shell runs commands, is resized, outlives the engine's 2 s
// wait for an answer, and ends with its exit status, which stays readable;
// late requests are conflicts, DELETE removes the record.
func TestE2EShellWithoutTerminal(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true") // warm the VM: its first process is slow to start

	for _, shell := range []string{"sh", "bash"} {
		t.Run(shell, func(t *testing.T) {
			e.sub(t).shellWithoutTerminal(t, c, vm.ID, shell)
		})
	}

	t.Run("VM disposed", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		vm2 := e.vm(c, client.CreateVMRequest{})
		id, err := c.VM(vm2.ID).OpenShell(ctx, client.ShellRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sc := e.followScreen(t, c, vm2.ID, id.ID())
		if _, err := c.VM(vm2.ID).Delete(ctx); err != nil {
			t.Fatal(err)
		}
		last := sc.end()
		if last.Type != "error" {
			t.Fatalf("a shell whose VM was disposed ends with %s %s", last.Type, last.Data)
		}
		p, err := last.Problem()
		if err != nil || p.Code != client.CodeConflict {
			t.Fatalf("final error %s: %+v %v", last.Data, p, err)
		}
	})
}

// shellWithoutTerminal drives one shell of vm as TestE2EShellWithoutTerminal
// describes.
func (e *e2e) shellWithoutTerminal(t *testing.T, c *client.Client, vm, shell string) {
	t.Helper()
	ctx := ctxFor(t, 5*e2eTimeout)
	// A shell that ended meanwhile makes input and resizes conflicts.
	ended := func(err error) bool {
		var ce *client.Error
		return errors.As(err, &ce) && ce.Code == client.CodeConflict
	}
	id, sc := e.openLiveShell(t, c, vm, client.ShellRequest{Shell: shell, Cols: 100, Rows: 30})
	got, err := c.VM(vm).Shell(id).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id || got.Shell != shell || got.State != client.ShellRunning || got.Cols != 100 || got.Rows != 30 || got.Exit != nil || got.ExitedAt != nil {
		t.Fatalf("running shell: %+v", got)
	}
	input := func(keys string) {
		t.Helper()
		if err := c.VM(vm).Shell(id).Input(ctx, []byte(keys)); err != nil {
			t.Fatalf("input %q: %v", keys, err)
		}
	}
	// prompts counts the prompts shown so far: a line is done when the
	// next one shows.
	prompts := func() int { return strings.Count(sc.String(), prompt) }
	waitPrompt := func(n int) {
		t.Helper()
		eventually(t, e2eTimeout, fmt.Sprintf("prompt %d", n), func() bool { return prompts() >= n })
	}

	// A line typed at the first prompt runs; cd and export carry over to
	// the next line, and so does the status.
	input("echo shell-$((6*7))-ok; cd /tmp; export GREETING=hi; false\r")
	if !sc.waitFor("shell-42-ok") {
		t.Fatalf("screen %q", sc.String())
	}
	waitPrompt(2)
	input("echo $? $PWD $GREETING\r")
	if !sc.waitFor("1 /tmp hi") {
		t.Fatalf("state between lines; screen %q", sc.String())
	}
	waitPrompt(3)

	// The guest has no stty or tput (its stty says terminal control
	// is not supported in WASM), so the size is checked on the
	// gateway's side, and in the variables a line gets.
	if err := c.VM(vm).Shell(id).Resize(ctx, 120, 40); err != nil {
		t.Fatal(err)
	}
	if got, err := c.VM(vm).Shell(id).Get(ctx); err != nil || got.Cols != 120 || got.Rows != 40 {
		t.Fatalf("after resize: %+v %v", got, err)
	}
	input("echo size=$COLUMNS,$LINES\r")
	if !sc.waitFor("size=120,40") {
		t.Fatalf("screen %q", sc.String())
	}
	waitPrompt(4)

	// Ctrl-C interrupts a running line; the prompt comes back.
	input("sleep 60\r")
	time.Sleep(time.Second)
	input("\x03")
	waitPrompt(5)
	input("echo interrupted-$?\r")
	if !sc.waitFor("interrupted-130") {
		t.Fatalf("screen %q", sc.String())
	}
	waitPrompt(6)

	// Idle at the prompt: the shell is still there and still runs commands.
	time.Sleep(3 * time.Second)
	if got, err := c.VM(vm).Shell(id).Get(ctx); err != nil || got.State != client.ShellRunning {
		t.Fatalf("after idling: %+v %v", got, err)
	}
	input("echo still-$((1+1))\r")
	if !sc.waitFor("still-2") {
		t.Fatalf("screen %q", sc.String())
	}

	// The shell may end before the write is acknowledged.
	if err := c.VM(vm).Shell(id).Input(ctx, []byte("exit 3\r")); err != nil && !ended(err) {
		t.Fatal(err)
	}
	last := sc.end()
	st, err := last.ShellEnd()
	if err != nil || st.ExitCode != 3 || st.Signal != "" {
		t.Fatalf("final event %s %s: %+v %v", last.Type, last.Data, st, err)
	}
	got, err = c.VM(vm).Shell(id).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != client.ShellExited || got.Exit == nil || got.Exit.ExitCode != 3 || got.ExitedAt == nil || got.ExitedAt.Before(got.StartedAt) {
		t.Fatalf("ended shell: %+v", got)
	}
	list, err := c.VM(vm).Shells(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range list {
		found = found || it.ID == id && it.State == client.ShellExited && it.Exit != nil && it.Exit.ExitCode == 3
	}
	if !found {
		t.Fatalf("the ended shell is not listed with its exit: %+v", list)
	}

	// The ended shell's output is still there to resume from, but not
	// beyond its end; and the end comes again, with the status.
	err = e.raw("GET", "/v1/vms/"+vm+"/shells/"+id+"/output", testAdminKey, nil,
		map[string]string{"Last-Event-ID": strconv.FormatUint(sc.lastID+10, 10)})
	wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
	s, err := c.VM(vm).Shell(id).Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(sc.lastID, 10)})
	if err != nil {
		t.Fatal(err)
	}
	evs := e.collect(s, sc.req, e2eTimeout)
	if st, err := evs[len(evs)-1].ShellEnd(); err != nil || st.ExitCode != 3 || len(evs) != 1 {
		t.Fatalf("resumed at the end: %s", summarize(evs))
	}

	ce := wantCode(t, c.VM(vm).Shell(id).Resize(ctx, 80, 24), client.CodeConflict, http.StatusConflict)
	if ce.Details["state"] != "exited" {
		t.Fatalf("late resize: details %v", ce.Details)
	}
	ce = wantCode(t, c.VM(vm).Shell(id).Input(ctx, []byte("x")), client.CodeConflict, http.StatusConflict)
	if ce.Details["state"] != "exited" {
		t.Fatalf("late input: details %v", ce.Details)
	}
	if err := c.VM(vm).Shell(id).Close(ctx); err != nil {
		t.Fatalf("DELETE of an ended shell: %v", err)
	}
	wantCode(t, c.VM(vm).Shell(id).Close(ctx), client.CodeNotFound, http.StatusNotFound)
	_, err = c.VM(vm).Shell(id).Get(ctx)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
}

// shellOutputUpTo reads the whole output of a shell over SSE up to sequence
// upTo and returns it.
func (e *e2e) shellOutputUpTo(t testing.TB, c *client.Client, vm, shell string, upTo uint64) []byte {
	t.Helper()
	s, err := c.VM(vm).Shell(shell).Output(ctxT(t), client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := e.eventReq("GET", "/v1/vms/"+vm+"/shells/"+shell+"/output")
	var out bytes.Buffer
	for {
		ev, err := next(ctxT(t), s)
		if err == io.EOF {
			t.Fatalf("the stream ended before sequence %d", upTo)
		}
		if err != nil {
			t.Fatal(err)
		}
		validateEvent(e, req, ev)
		if ev.Type == "gap" {
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

// attempt runs f with a testing.TB whose failures end f, not the test, and
// returns the first of them ("" when f passed), so that a scenario the
// engine cut short can be told apart and run again. Everything else (logs,
// cleanups, helpers) is t's.
func attempt(t *testing.T, f func(t testing.TB)) string {
	t.Helper()
	st := &softT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(st)
	}()
	<-done
	return st.failure()
}

// softT records failures instead of failing its test; a fatal one ends the
// goroutine it runs on, as testing.T's do.
type softT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (s *softT) fail(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.msg == "" {
		s.msg = msg
	}
}

func (s *softT) failure() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msg
}

func (s *softT) Error(args ...any)                 { s.fail(fmt.Sprint(args...)) }
func (s *softT) Errorf(format string, args ...any) { s.fail(fmt.Sprintf(format, args...)) }
func (s *softT) Fail()                             { s.fail("failed") }
func (s *softT) Failed() bool                      { return s.failure() != "" }
func (s *softT) FailNow()                          { s.fail("failed"); runtime.Goexit() }
func (s *softT) Fatal(args ...any)                 { s.fail(fmt.Sprint(args...)); runtime.Goexit() }
func (s *softT) Fatalf(format string, args ...any) {
	s.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// TestE2EDeleteShellAtItsPrompt: DELETE of a shell idle at its prompt
// answers once the kill is confirmed. The engine confirms it only at the
// end of the guest's 10 s terminal read, which the wait must outlast.
func TestE2EDeleteShellAtItsPrompt(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	id, _ := e.openLiveShell(t, c, vm.ID, client.ShellRequest{Shell: "bash"})
	if err := c.VM(vm.ID).Shell(id).Close(ctx); err != nil {
		t.Fatalf("DELETE of a shell at its prompt: %v", err)
	}
	_, err := c.VM(vm.ID).Shell(id).Get(ctx)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
}
