package main

// Every route of the API, happy path, through the typed client against a
// real gateway with real sidecars on loopback.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2EVMs: create with labels/env/loopbackExemptPorts, get, list with
// state and label filters and cursor pagination, delete.
func TestE2EVMs(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin

	vm := e.vm(c, client.CreateVMRequest{
		Labels:              map[string]string{"team": "red", "suite": "vms"},
		Env:                 map[string]string{"GREETING": "hello-from-env"},
		LoopbackExemptPorts: []uint16{8080, 9090},
		IdleTimeout:         time.Hour,
	})
	if !strings.HasPrefix(vm.ID, "vm_") || vm.SidecarID == "" || vm.CreatedAt.IsZero() || vm.UpdatedAt.IsZero() {
		t.Fatalf("vm resource: %+v", vm)
	}
	if vm.Labels["team"] != "red" || vm.Env["GREETING"] != "hello-from-env" ||
		!slices.Equal(vm.LoopbackExemptPorts, []uint16{8080, 9090}) || vm.IdleTimeout() != time.Hour {
		t.Fatalf("the VM does not carry its options: %+v", vm)
	}
	// The VM's environment reaches its commands.
	if out := e.exec(c, vm.ID, `sh -c 'echo $GREETING'`); out != "hello-from-env\n" {
		t.Fatalf("VM env: %q", out)
	}

	got, err := c.VM(vm.ID).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != vm.ID || got.State != client.VMReady || got.SidecarID != vm.SidecarID || got.Labels["suite"] != "vms" {
		t.Fatalf("get: %+v", got)
	}

	// Three more VMs with a label of their own, for filters and pages.
	var batch []string
	for range 3 {
		batch = append(batch, e.vm(c, client.CreateVMRequest{Labels: map[string]string{"batch": "p", "suite": "vms"}}).ID)
	}

	t.Run("label filter", func(t *testing.T) {
		ctx := ctxT(t)
		tests := []struct {
			labels map[string]string
			want   []string
		}{
			{map[string]string{"team": "red"}, []string{vm.ID}},
			{map[string]string{"batch": "p"}, batch},
			{map[string]string{"suite": "vms"}, append([]string{vm.ID}, batch...)},
			{map[string]string{"suite": "vms", "team": "red"}, []string{vm.ID}},
			{map[string]string{"team": "blue"}, nil},
		}
		for _, tc := range tests {
			l, err := c.ListVMs(ctx, client.ListVMsOptions{Labels: tc.labels})
			if err != nil {
				t.Fatal(err)
			}
			if ids := vmIDs(l.Items); !sameSet(ids, tc.want) {
				t.Errorf("labels %v: got %v, want %v", tc.labels, ids, tc.want)
			}
		}
	})

	t.Run("cursor pagination", func(t *testing.T) {
		ctx := ctxT(t)
		var seen []string
		cursor := ""
		pages := 0
		for {
			l, err := c.ListVMs(ctx, client.ListVMsOptions{Labels: map[string]string{"suite": "vms"}, Limit: 1, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(l.Items) > 1 {
				t.Fatalf("page of %d items with limit 1", len(l.Items))
			}
			seen = append(seen, vmIDs(l.Items)...)
			if l.NextCursor == "" {
				break
			}
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			cursor = l.NextCursor
		}
		if !sameSet(seen, append([]string{vm.ID}, batch...)) || len(seen) != 4 {
			t.Fatalf("pages gave %v", seen)
		}
	})

	t.Run("delete and state filter", func(t *testing.T) {
		ctx := ctxT(t)
		del, err := c.VM(batch[0]).Delete(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if del.State != client.VMDisposed {
			t.Fatalf("delete answered %+v", del)
		}
		if g, err := c.VM(batch[0]).Get(ctx); err != nil || g.State != client.VMDisposed {
			t.Fatalf("get after delete: %+v %v", g, err)
		}
		l, err := c.ListVMs(ctx, client.ListVMsOptions{States: []client.VMState{client.VMDisposed}, Labels: map[string]string{"batch": "p"}})
		if err != nil {
			t.Fatal(err)
		}
		if ids := vmIDs(l.Items); !sameSet(ids, batch[:1]) {
			t.Fatalf("disposed: %v", ids)
		}
		l, err = c.ListVMs(ctx, client.ListVMsOptions{States: []client.VMState{client.VMReady}, Labels: map[string]string{"batch": "p"}})
		if err != nil {
			t.Fatal(err)
		}
		if ids := vmIDs(l.Items); !sameSet(ids, batch[1:]) {
			t.Fatalf("ready: %v", ids)
		}
	})
}

// TestE2EVMEvents: the /events stream carries state events and a
// process_exit event, and ends (error event, conflict) after the VM is
// deleted.
func TestE2EVMEvents(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	s, err := c.VM(vm.ID).Events(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sh -c 'exit 7'"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VM(vm.ID).Process(p.Pid()).Wait(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Delete once the process_exit event was seen, then read to the end.
	var evs []event
	req := e.eventReq("GET", "/v1/vms/"+vm.ID+"/events")
	deleted := false
	rctx := ctxFor(t, e2eTimeout)
	for {
		ev, err := next(rctx, s)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("events: %v after %s", err, summarize(evs))
		}
		validateEvent(e, req, ev)
		evs = append(evs, ev)
		if ev.Type == "process_exit" && !deleted {
			deleted = true
			if _, err := c.VM(vm.ID).Delete(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	var states []string
	var exit *client.VMEvent
	for _, ev := range evs[:len(evs)-1] {
		ve, err := ev.VMEvent()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "state":
			states = append(states, string(ve.State))
		case "process_exit":
			exit = &ve
		}
	}
	if exit == nil || exit.Pid != p.Pid() || exit.Exit == nil || exit.Exit.ExitCode != 7 {
		t.Fatalf("process_exit event: %+v in %s", exit, summarize(evs))
	}
	if !slices.Equal(states, []string{"ready", "disposing", "disposed"}) {
		t.Fatalf("state events %v", states)
	}
	// The stream ends as api/openapi.yaml says: an error event, conflict,
	// whose detail says the VM's final state.
	perr, err := evs[len(evs)-1].Problem()
	if err != nil || perr.Code != client.CodeConflict || !strings.Contains(perr.Detail, "disposed") {
		t.Fatalf("the stream of a deleted VM ends with %s (%v)", summarize(evs[len(evs)-1:]), err)
	}
}

// TestE2EExec: buffered exec (output, exit code, truncation, binary output,
// stdin, cwd, env, duration, timeout), streamed exec, and Idempotency-Key
// on exec and on process creation.
func TestE2EExec(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})

	t.Run("buffered", func(t *testing.T) {
		ctx := ctxT(t)
		tests := []struct {
			name  string
			req   client.ExecRequest
			check func(t *testing.T, r *client.ExecResult)
		}{
			{"stdout stderr exit code", client.ExecRequest{Command: `sh -c 'echo out; echo err >&2; exit 3'`}, func(t *testing.T, r *client.ExecResult) {
				if r.ExitCode != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.Truncated {
					t.Fatalf("%+v", r)
				}
			}},
			{"argv", client.ExecRequest{Argv: []string{"echo", "a b", "c"}}, func(t *testing.T, r *client.ExecResult) {
				if r.ExitCode != 0 || string(r.Stdout) != "a b c\n" {
					t.Fatalf("%+v", r)
				}
			}},
			{"truncated", client.ExecRequest{Command: `sh -c 'i=0; while [ $i -lt 200 ]; do echo 0123456789; i=$((i+1)); done'`, MaxOutputBytes: 100}, func(t *testing.T, r *client.ExecResult) {
				if r.ExitCode != 0 || !r.Truncated || len(r.Stdout) == 0 || len(r.Stdout) > 100 || !bytes.HasPrefix(r.Stdout, []byte("0123456789\n")) {
					t.Fatalf("truncated %v, %d bytes of stdout: %+v", r.Truncated, len(r.Stdout), r)
				}
			}},
			{"binary output", client.ExecRequest{Command: `printf '\377\000\001ok'`}, func(t *testing.T, r *client.ExecResult) {
				// It travels base64 (TestE2EExecBinaryOutput); the client
				// hands over the bytes.
				if !bytes.Equal(r.Stdout, []byte{0xff, 0, 1, 'o', 'k'}) {
					t.Fatalf("%+v: %q", r, r.Stdout)
				}
			}},
			{"stdin", client.ExecRequest{Command: "cat", Stdin: []byte("line one\nline two\n")}, func(t *testing.T, r *client.ExecResult) {
				if string(r.Stdout) != "line one\nline two\n" {
					t.Fatalf("%+v", r)
				}
			}},
			{"binary stdin", client.ExecRequest{Command: "wc -c", Stdin: []byte{0xff, 0xfe, 0, 1}}, func(t *testing.T, r *client.ExecResult) {
				if strings.TrimSpace(string(r.Stdout)) != "4" {
					t.Fatalf("%+v", r)
				}
			}},
			{"cwd", client.ExecRequest{Command: "pwd", Cwd: "/tmp"}, func(t *testing.T, r *client.ExecResult) {
				if string(r.Stdout) != "/tmp\n" {
					t.Fatalf("%+v", r)
				}
			}},
			{"env", client.ExecRequest{Command: `sh -c 'echo "$A-$B"'`, Env: map[string]string{"A": "x", "B": "y z"}}, func(t *testing.T, r *client.ExecResult) {
				if string(r.Stdout) != "x-y z\n" {
					t.Fatalf("%+v", r)
				}
			}},
			{"duration", client.ExecRequest{Command: "sleep 0.3"}, func(t *testing.T, r *client.ExecResult) {
				if r.ExitCode != 0 || r.Duration < 300*time.Millisecond || r.Duration > 30*time.Second {
					t.Fatalf("%+v", r)
				}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r, err := c.VM(vm.ID).Exec(ctx, tc.req)
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, r)
			})
		}
	})

	t.Run("timeout", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		start := time.Now()
		_, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "sleep 30", Timeout: 500 * time.Millisecond})
		wantCode(t, err, client.CodeDeadlineExceeded, http.StatusGatewayTimeout)
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("timeout answered after %s", d)
		}
		// The VM still works.
		if out := e.exec(c, vm.ID, "echo after"); out != "after\n" {
			t.Fatalf("%q", out)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		s, err := c.VM(vm.ID).ExecStream(ctx, client.ExecRequest{Command: `sh -c 'echo out; echo err >&2; exit 4'`})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, e.eventReq("POST", "/v1/vms/"+vm.ID+"/exec"), e2eTimeout)
		if out := output(t, evs, "stdout"); out != "out\n" {
			t.Errorf("stdout events: %q", out)
		}
		if out := output(t, evs, "stderr"); out != "err\n" {
			t.Errorf("stderr events: %q", out)
		}
		x, err := evs[len(evs)-1].Exit()
		if err != nil || x.ExitCode != 4 || x.Duration < 0 {
			t.Fatalf("exit event: %+v %v (%s)", x, err, summarize(evs))
		}
		for i, ev := range evs[:len(evs)-1] {
			o, err := ev.Output()
			if err != nil || o.Time.IsZero() || ev.ID != fmt.Sprint(o.Seq) {
				t.Fatalf("event %d: %+v %v", i, o, err)
			}
		}
	})

	t.Run("idempotent exec", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		req := client.ExecRequest{Command: `sh -c 'echo x >> /workspace/count; wc -l < /workspace/count'`}
		key := client.WithIdempotencyKey(e.uniq("exec-key"))
		first, err := c.VM(vm.ID).Exec(ctx, req, key)
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed || strings.TrimSpace(string(first.Stdout)) != "1" {
			t.Fatalf("first: %+v", first)
		}
		for range 2 {
			again, err := c.VM(vm.ID).Exec(ctx, req, key)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Replayed || !bytes.Equal(again.Stdout, first.Stdout) || again.ExitCode != first.ExitCode || again.Duration != first.Duration {
				t.Fatalf("retry: %+v, first %+v", again, first)
			}
		}
		// The command ran once: the file has one line.
		if out := e.exec(c, vm.ID, "wc -l /workspace/count"); !strings.HasPrefix(strings.TrimSpace(out), "1") {
			t.Fatalf("the command ran more than once: wc -l says %q", out)
		}
		// The same key with another request is refused (422).
		_, err = c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "echo other"}, key)
		wantCode(t, err, client.CodeUnprocessable, http.StatusUnprocessableEntity)
	})

	t.Run("idempotent spawn", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		key := client.WithIdempotencyKey(e.uniq("spawn-key"))
		req := client.SpawnRequest{Command: "sleep 60"}
		first, err := c.VM(vm.ID).Spawn(ctx, req, key)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.VM(vm.ID).Spawn(ctx, req, key)
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed() || !again.Replayed() || again.Pid() != first.Pid() {
			t.Fatalf("first %+v, retry %+v", first, again)
		}
		l, err := c.VM(vm.ID).Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range l {
			if p.Command == "sleep" || strings.Contains(p.Command, "sleep 60") || slices.Contains(p.Args, "60") {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d sleep processes, want 1: %+v", n, l)
		}
		if err := c.VM(vm.ID).Process(first.Pid()).Signal(ctx, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestE2EProcesses: spawn, list (exited ones included), get, output stream
// with stdout/stderr/exit, raw stdin, stdin close, signal, wait.
func TestE2EProcesses(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	outReq := func(pid uint32) *http.Request {
		return e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm.ID, pid))
	}

	t.Run("output stdout stderr exit", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: `sh -c 'echo to-out; echo to-err >&2; exit 5'`})
		if err != nil {
			t.Fatal(err)
		}
		if info, err := p.Get(ctx); err != nil || info.Pid == 0 || info.StartedAt.IsZero() {
			t.Fatalf("spawn: %+v %v", info, err)
		}
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, outReq(p.Pid()), e2eTimeout)
		if output(t, evs, "stdout") != "to-out\n" || output(t, evs, "stderr") != "to-err\n" {
			t.Fatalf("events: %s", summarize(evs))
		}
		x, err := evs[len(evs)-1].Exit()
		if err != nil || x.ExitCode != 5 || x.Signal != "" {
			t.Fatalf("exit: %+v %v", x, err)
		}
		got, err := c.VM(vm.ID).Process(p.Pid()).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Running || got.Exit == nil || got.Exit.ExitCode != 5 || got.ExitedAt == nil {
			t.Fatalf("get exited process: %+v", got)
		}
	})

	t.Run("stdin and close", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Argv: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid()).WriteStdin(ctx, []byte("first\n")); err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid()).WriteStdin(ctx, []byte{0xff, 0x00, '\n'}); err != nil {
			t.Fatal(err)
		}
		got, err := c.VM(vm.ID).Process(p.Pid()).Get(ctx)
		if err != nil || !got.Running {
			t.Fatalf("cat should still run: %+v %v", got, err)
		}
		if err := c.VM(vm.ID).Process(p.Pid()).CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		x, err := c.VM(vm.ID).Process(p.Pid()).Wait(ctx, 30*time.Second)
		if err != nil || x.ExitCode != 0 {
			t.Fatalf("wait: %+v %v", x, err)
		}
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, outReq(p.Pid()), e2eTimeout)
		if out := output(t, evs, "stdout"); out != "first\n\xff\x00\n" {
			t.Fatalf("cat echoed %q", out)
		}
	})

	t.Run("signal and wait", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 60"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.VM(vm.ID).Process(p.Pid()).Wait(ctx, 200*time.Millisecond)
		wantCode(t, err, client.CodeDeadlineExceeded, http.StatusGatewayTimeout)
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid()).Signal(ctx, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		x, err := c.VM(vm.ID).Process(p.Pid()).Wait(ctx, 30*time.Second)
		if err != nil || x.ExitCode != 143 || x.Signal != "SIGTERM" {
			t.Fatalf("wait after SIGTERM: %+v %v", x, err)
		}
		evs := e.collect(s, outReq(p.Pid()), e2eTimeout)
		ex, err := evs[len(evs)-1].Exit()
		if err != nil || ex.ExitCode != 143 || ex.Signal != "SIGTERM" {
			t.Fatalf("exit event: %+v %v", ex, err)
		}
	})

	t.Run("list includes exited", func(t *testing.T) {
		ctx := ctxT(t)
		running, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 60"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.VM(vm.ID).Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var nRunning, nExited int
		for _, p := range l {
			if p.Running {
				nRunning++
			} else if p.Exit != nil {
				nExited++
			}
		}
		if nRunning != 1 || nExited < 3 || !slices.IsSortedFunc(l, func(a, b client.Process) int { return int(a.Pid) - int(b.Pid) }) {
			t.Fatalf("%d running, %d exited: %+v", nRunning, nExited, l)
		}
		if err := c.VM(vm.ID).Process(running.Pid()).Signal(ctx, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		x, err := c.VM(vm.ID).Process(running.Pid()).Wait(ctx, 30*time.Second)
		if err != nil || x.Signal != "SIGKILL" {
			t.Fatalf("%+v %v", x, err)
		}
	})
}

// TestE2EShells: open with a size, resize, type a command (answering the
// terminal's cursor queries), see its output in the output stream, close.
func TestE2EShells(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true") // warm the VM: its first process is slow to start

	t.Run("type a command", func(t *testing.T) {
		e := e.sub(t)
		// On the pinned engine the guest shell gives up (and exits) when a
		// cursor query stays unanswered for 2 s, and the sidecar holds input
		// to a shell while it waits for that answer; on a busy machine an
		// answer can come too late through no fault of the gateway. A shell
		// that died that way is opened again.
		const attempts = 4
		for i := 1; ; i++ {
			ok, why := e.shellSession(t, vm.ID, "echo shell-$((6*7))-ok; exit\n", "shell-42-ok")
			if ok {
				return
			}
			if i == attempts {
				t.Fatalf("no shell showed the command's output in %d attempts; last: %s", attempts, why)
			}
			t.Logf("attempt %d: %s; opening another shell", i, why)
		}
	})

	t.Run("close", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		id, err := c.VM(vm.ID).OpenShell(ctx, client.ShellRequest{Shell: "bash"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := id.Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := id.Close(ctx); err != nil {
			s.Close()
			t.Fatal(err)
		}
		evs := e.collect(s, e.eventReq("GET", "/v1/vms/"+vm.ID+"/shells/"+id.ID()+"/output"), e2eTimeout)
		if last := evs[len(evs)-1]; last.Type != "end" {
			t.Fatalf("a closed shell's stream ends with %s", summarize(evs))
		}
		// The shell is gone.
		err = id.Input(ctx, []byte("x"))
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		err = id.Close(ctx)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})
}

// shellSession opens a shell, resizes it, types line (which must end the
// shell) and plays the terminal: every cursor position query (ESC[6n) gets
// ESC[1;1R. It reports whether want showed on the screen and the output
// stream then ended with the shell, or why not.
//
// Measured on the pinned engine: input (or a resize, or a kill) sent to a
// shell that waits for a cursor answer or idles at its prompt is held by
// the sidecar until the guest's terminal read wakes up (2 to 10 s later),
// while input already queued on the terminal is read at once. So the test
// types ahead, as a fast typist with a fast terminal would: a few cursor
// answers and a newline first (the shell starts on a terminal in canonical
// mode, where only complete lines can be read; the empty line is then an
// empty command), then the line.
func (e *e2e) shellSession(t *testing.T, vm, line, want string) (bool, string) {
	t.Helper()
	ctx := ctxT(t)
	c := e.admin
	id, err := c.VM(vm).OpenShell(ctx, client.ShellRequest{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Resize(ctx, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := id.Input(ctx, []byte(strings.Repeat("\x1b[1;1R", 4)+"\n"+line)); err != nil {
		t.Fatal(err)
	}
	// The stream starts from the shell's first output.
	s, err := id.Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := e.eventReq("GET", "/v1/vms/"+vm+"/shells/"+id.ID()+"/output")
	rctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	var (
		screen  bytes.Buffer
		answers sync.WaitGroup
		last    event
	)
	defer answers.Wait()
	for {
		ev, err := next(rctx, s)
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = id.Close(ctx)
			return false, fmt.Sprintf("stream: %v; screen %q", err, screen.String())
		}
		validateEvent(e, req, ev)
		last = ev
		if ev.Type != "stdout" {
			continue
		}
		o, err := ev.Output()
		if err != nil {
			t.Fatal(err)
		}
		screen.Write(o.Data)
		// Answer each query at once, without holding up the reader.
		if n := bytes.Count(o.Data, []byte("\x1b[6n")); n > 0 {
			answers.Add(1)
			go func() {
				defer answers.Done()
				_ = id.Input(rctx, bytes.Repeat([]byte("\x1b[1;1R"), n))
			}()
		}
	}
	if !strings.Contains(screen.String(), want) {
		return false, fmt.Sprintf("the shell ended (%s %s) without showing %q; screen %q", last.Type, last.Data, want, screen.String())
	}
	if last.Type != "end" {
		t.Fatalf("the stream of a shell that exited ends with %q %s", last.Type, last.Data)
	}
	// The shell has exited: it stays listed, and input is a conflict.
	err = id.Input(ctx, []byte("x"))
	wantCode(t, err, client.CodeConflict, http.StatusConflict)
	return true, ""
}

// TestE2EFiles: write with mkdirs, read bytes and headers, HEAD, list
// directories (recursive, maxDepth), mkdir, move, stat, delete recursive.
func TestE2EFiles(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})

	content := []byte("hello, files\n")
	w, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/a/b/hello.txt", bytes.NewReader(content), client.WriteFileOptions{Mkdirs: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Path != "/workspace/a/b/hello.txt" || w.Size != int64(len(content)) {
		t.Fatalf("write: %+v", w)
	}
	binary := bytes.Repeat([]byte{0, 1, 2, 0xff}, 50000)
	if _, err := c.VM(vm.ID).WriteFile(ctx, "/workspace/a/blob.bin", bytes.NewReader(binary), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("GET bytes and headers", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		for _, f := range []struct {
			path, ctype string
			want        []byte
		}{
			{"/workspace/a/b/hello.txt", "text/plain", content},
			{"/workspace/a/blob.bin", "application/octet-stream", binary},
		} {
			r, err := c.VM(vm.ID).ReadFile(ctx, f.path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, f.want) {
				t.Fatalf("%s: %d bytes, %v", f.path, len(got), err)
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", e.gw.URL+"/v1/vms/"+vm.ID+"/files?path="+f.path, nil)
			req.Header.Set("Authorization", "Bearer "+testAdminKey)
			resp, err := e.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), f.ctype) ||
				resp.ContentLength != int64(len(f.want)) || resp.Header.Get("Last-Modified") == "" {
				t.Fatalf("%s: %d %v", f.path, resp.StatusCode, resp.Header)
			}
		}
	})

	t.Run("HEAD", func(t *testing.T) {
		ctx := ctxT(t)
		h, err := c.VM(vm.ID).HeadFile(ctx, "/workspace/a/b/hello.txt")
		if err != nil {
			t.Fatal(err)
		}
		if h.Size != int64(len(content)) || !strings.HasPrefix(h.ContentType, "text/plain") || h.IsDir || h.ModTime.IsZero() {
			t.Fatalf("%+v", h)
		}
		h, err = c.VM(vm.ID).HeadFile(ctx, "/workspace/a")
		if err != nil || !h.IsDir {
			t.Fatalf("dir: %+v %v", h, err)
		}
		_, err = c.VM(vm.ID).HeadFile(ctx, "/workspace/none")
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})

	t.Run("mkdir, list, stat, move", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		if err := c.VM(vm.ID).Mkdir(ctx, "/workspace/a/c/d/e"); err != nil {
			t.Fatal(err)
		}
		l, err := c.VM(vm.ID).ListDir(ctx, "/workspace/a", client.ListDirOptions{Recursive: false, MaxDepth: 0})
		if err != nil {
			t.Fatal(err)
		}
		if names := entryNames(l, false); !sameSet(names, []string{"b", "c", "blob.bin"}) {
			t.Fatalf("list: %v", names)
		}
		for _, it := range l {
			// (A plain listing's sizes are 0 on the pinned engine: its
			// readDir reports none; the recursive listing does.)
			if (it.Name == "blob.bin") == it.IsDir || it.Path != "/workspace/a/"+it.Name {
				t.Fatalf("entry %+v", it)
			}
		}
		tree := []string{"/workspace/a/b", "/workspace/a/b/hello.txt", "/workspace/a/c", "/workspace/a/c/d", "/workspace/a/c/d/e", "/workspace/a/blob.bin"}
		for _, tc := range []struct {
			maxDepth int
			want     []string
		}{
			{0, tree},
			{1, []string{"/workspace/a/b", "/workspace/a/c", "/workspace/a/blob.bin"}},
			{2, []string{"/workspace/a/b", "/workspace/a/b/hello.txt", "/workspace/a/c", "/workspace/a/c/d", "/workspace/a/blob.bin"}},
			{3, tree},
		} {
			l, err = c.VM(vm.ID).ListDir(ctx, "/workspace/a", client.ListDirOptions{Recursive: true, MaxDepth: tc.maxDepth})
			if err != nil {
				t.Fatal(err)
			}
			if paths := entryNames(l, true); !sameSet(paths, tc.want) {
				t.Fatalf("recursive, maxDepth %d: %v, want %v", tc.maxDepth, paths, tc.want)
			}
			for _, it := range l {
				if it.Name == "blob.bin" && (it.IsDir || it.Size != int64(len(binary))) {
					t.Fatalf("entry %+v", it)
				}
			}
		}
		if err := c.VM(vm.ID).Mkdir(ctx, "/workspace/a/c/d"); err != nil {
			t.Fatalf("mkdir of an existing directory: %v", err)
		}

		st, err := c.VM(vm.ID).Stat(ctx, "/workspace/a/b/hello.txt")
		if err != nil {
			t.Fatal(err)
		}
		if st.Size != int64(len(content)) || st.IsDir || st.Path != "/workspace/a/b/hello.txt" || st.ModTime.IsZero() || st.Mode&0o170000 != 0o100000 {
			t.Fatalf("stat: %+v", st)
		}
		if err := c.VM(vm.ID).Move(ctx, "/workspace/a/b/hello.txt", "/workspace/a/c/moved.txt"); err != nil {
			t.Fatal(err)
		}
		_, err = c.VM(vm.ID).Stat(ctx, "/workspace/a/b/hello.txt")
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		r, err := c.VM(vm.ID).ReadFile(ctx, "/workspace/a/c/moved.txt")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if !bytes.Equal(got, content) {
			t.Fatalf("moved file: %q", got)
		}
		// The guest sees what the API wrote.
		if out := e.exec(c, vm.ID, "cat /workspace/a/c/moved.txt"); out != string(content) {
			t.Fatalf("guest reads %q", out)
		}
	})

	t.Run("delete", func(t *testing.T) {
		ctx := ctxT(t)
		if err := c.VM(vm.ID).DeleteFile(ctx, "/workspace/a/blob.bin", client.DeleteFileOptions{Recursive: false}); err != nil {
			t.Fatal(err)
		}
		// A non-empty directory needs recursive.
		err := c.VM(vm.ID).DeleteFile(ctx, "/workspace/a", client.DeleteFileOptions{Recursive: false})
		if err == nil {
			t.Fatal("deleting a non-empty directory without recursive succeeded")
		}
		if err := c.VM(vm.ID).DeleteFile(ctx, "/workspace/a", client.DeleteFileOptions{Recursive: true}); err != nil {
			t.Fatal(err)
		}
		_, err = c.VM(vm.ID).Stat(ctx, "/workspace/a")
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})
}

// TestE2ETenants: the admin routes (tenants, keys, sidecars), and a deleted
// key is refused at once.
func TestE2ETenants(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	a := e.admin

	tn, err := a.CreateTenant(ctx, client.TenantCreate{Name: "acme", Isolated: true, Quotas: &client.Quotas{MaxVMs: 3, MaxProcesses: 10, RequestsPerSecond: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if tn.ID == "" || tn.Name != "acme" || !tn.Isolated || tn.Quotas.MaxVMs != 3 || tn.Quotas.RequestsPerSecond != 50 || tn.CreatedAt.IsZero() {
		t.Fatalf("create: %+v", tn)
	}
	other, err := a.CreateTenant(ctx, client.TenantCreate{Name: "globex"})
	if err != nil {
		t.Fatal(err)
	}

	got, err := a.GetTenant(ctx, tn.ID)
	if err != nil || got.ID != tn.ID || got.Name != "acme" {
		t.Fatalf("get: %+v %v", got, err)
	}
	var listed []string
	cursor := ""
	for range 10 {
		l, err := a.ListTenants(ctx, client.ListOptions{Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			listed = append(listed, it.ID)
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.Contains(listed, tn.ID) || !slices.Contains(listed, other.ID) || !slices.Contains(listed, "default") {
		t.Fatalf("list: %v", listed)
	}

	upd, err := a.UpdateTenant(ctx, tn.ID, client.TenantUpdate{Name: client.Ptr("acme-2"), Quotas: &client.QuotasUpdate{MaxVMs: client.Ptr(5)}})
	if err != nil {
		t.Fatal(err)
	}
	if upd.Name != "acme-2" || upd.Quotas.MaxVMs != 5 || upd.Quotas.MaxProcesses != 10 || !upd.Isolated {
		t.Fatalf("patch: %+v", upd)
	}

	k1, err := a.CreateKey(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := a.CreateKey(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Key == "" || k1.ID == "" || k1.TenantID != tn.ID || !strings.HasPrefix(k1.Key, k1.Prefix) || k1.CreatedAt.IsZero() {
		t.Fatalf("key: %+v", k1)
	}
	keys, err := a.Keys(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range keys {
		if k.Key != "" {
			t.Fatalf("a listed key shows its secret: %+v", k)
		}
		ids = append(ids, k.ID)
	}
	if !sameSet(ids, []string{k1.ID, k2.ID}) {
		t.Fatalf("keys: %v", ids)
	}

	c1, c2 := e.client(k1.Key), e.client(k2.Key)
	vm := e.vm(c1, client.CreateVMRequest{})
	if _, err := c2.VM(vm.ID).Get(ctx); err != nil {
		t.Fatalf("both keys are the same tenant: %v", err)
	}

	// The isolated tenant's VM is on a sidecar of its own.
	scs, err := a.Sidecars(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sc := range scs {
		if sc.ID == vm.SidecarID {
			found = true
			if !sc.Isolated || !slices.Equal(sc.Tenants, []string{tn.ID}) || sc.VMCount != 1 || sc.Pid <= 0 || sc.State == "" || sc.StartedAt.IsZero() {
				t.Fatalf("sidecar: %+v", sc)
			}
		}
	}
	if !found {
		t.Fatalf("vm's sidecar %s not listed: %+v", vm.SidecarID, scs)
	}

	if err := a.DeleteKey(ctx, tn.ID, k1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c1.VM(vm.ID).Get(ctx)
	wantCode(t, err, client.CodeUnauthenticated, http.StatusUnauthorized)
	if _, err := c2.VM(vm.ID).Get(ctx); err != nil {
		t.Fatalf("the other key must still work: %v", err)
	}
	keys, err = a.Keys(ctx, tn.ID)
	if err != nil || len(keys) != 1 || keys[0].ID != k2.ID {
		t.Fatalf("keys after delete: %+v %v", keys, err)
	}
}

// TestE2EOperations: /healthz, /readyz, /metrics, /v1/openapi.yaml.
func TestE2EOperations(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	anon := e.client("")
	if err := anon.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := anon.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	doc, err := anon.OpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(doc, []byte("openapi: 3.")) || !bytes.Contains(doc, []byte("/v1/vms/{vm}/processes/{pid}/output")) {
		t.Fatalf("openapi.yaml: %.200s", doc)
	}
	// Generate some traffic, then scrape.
	vm := e.vm(e.admin, client.CreateVMRequest{})
	e.exec(e.admin, vm.ID, "true")
	b, err := anon.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		`agentos_gateway_http_request_duration_seconds_bucket{method="POST",route="/v1/vms",status="201"`,
		`agentos_gateway_http_request_duration_seconds_count{method="POST",route="/v1/vms/{vm}/exec",status="200"}`,
		`agentos_gateway_sidecars{state=`,
		`agentos_gateway_vms{state="ready"} 1`,
		`agentos_gateway_sse_subscribers 0`,
		`agentos_gateway_exec_duration_seconds_count 1`,
		`agentos_gateway_sidecar_crashes_total 0`,
		`agentos_gateway_sidecar_restarts_total 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := sumMetric(text, "agentos_gateway_sidecars"); n < 1 {
		t.Errorf("agentos_gateway_sidecars = %v", n)
	}
}

func vmIDs(vms []client.VM) []string {
	out := make([]string, 0, len(vms))
	for _, v := range vms {
		out = append(out, v.ID)
	}
	return out
}

func entryNames(es []client.DirEntry, full bool) []string {
	out := make([]string, 0, len(es))
	for _, it := range es {
		if full {
			out = append(out, it.Path)
		} else {
			out = append(out, it.Name)
		}
	}
	return out
}

// sameSet reports whether a and b hold the same strings (in any order,
// without duplicates).
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
