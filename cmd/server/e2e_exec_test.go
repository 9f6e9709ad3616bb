package main

// Exec and processes end to end: the three ways to say what to run
// (command line, command with args, argv) and their ambiguous mixes, shell
// invocations that are never wrapped in a second shell, builtins through the
// shell, missing working directories, the default and maximum exec
// deadlines (keyed execs included), binary and oversized output, and
// Last-Event-ID past the end of a process stream.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2EExecCommandForms: command lines, command with args and argv run
// what they say, shell scripts with any quoting run in exactly one shell,
// and builtins go through the shell.
func TestE2EExecCommandForms(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	for _, tc := range []struct {
		name   string
		req    client.ExecRequest
		code   int
		stdout string
	}{
		// The three forms.
		{name: "command and args, no shell", req: client.ExecRequest{Command: "printf", Args: []string{"[%s]", "a  b", "$HOME", "*"}}, stdout: "[a  b][$HOME][*]"},
		{name: "argv, no shell", req: client.ExecRequest{Argv: []string{"printf", "[%s]", "x;y", "$HOME"}}, stdout: "[x;y][$HOME]"},
		{name: "simple command line", req: client.ExecRequest{Command: `printf '[%s]' "a  b" c\ d`}, stdout: "[a  b][c d]"},
		{name: "command line through the shell", req: client.ExecRequest{Command: "echo a; echo b"}, stdout: "a\nb\n"},

		// Shell invocations: the quoted expansions are the inner shell's.
		{name: "sh -c double quoted", req: client.ExecRequest{Command: `sh -c "x=inner; echo got $x"`}, stdout: "got inner\n"},
		{name: "sh -c single quoted", req: client.ExecRequest{Command: `sh -c 'x=inner; echo got $x'`}, stdout: "got inner\n"},
		{name: "sh -c escapes", req: client.ExecRequest{Command: `sh -c "x=1; echo \"[\$x]\" \\\\"`}, stdout: "[1] \\\n"},
		{name: "sh -c mixed quoting", req: client.ExecRequest{Command: `sh -c 'x=1; echo '"[\$x] [$x]"`}, stdout: "[1] [1]\n"},
		{name: "sh -c ANSI-C quoting", req: client.ExecRequest{Command: `sh -c $'echo a\necho b'`}, stdout: "a\nb\n"},
		{name: "bash -c", req: client.ExecRequest{Command: `bash -c "a=1; echo a=$a"`}, stdout: "a=1\n"},
		{name: "bash -lc", req: client.ExecRequest{Command: `bash -lc "a=2; echo a=$a"`}, stdout: "a=2\n"},
		{name: "sh -ec", req: client.ExecRequest{Command: `sh -ec "false; echo not reached $x"`}, code: 1},
		{name: "/bin/sh -c with args", req: client.ExecRequest{Command: `/bin/sh -c "echo $0 $1" zero one`}, stdout: "zero one\n"},
		{name: "sh -c via args", req: client.ExecRequest{Command: "sh", Args: []string{"-c", "x=3; echo $x"}}, stdout: "3\n"},

		// Builtins and keywords run through the shell.
		{name: "exit", req: client.ExecRequest{Command: "exit 7"}, code: 7},
		{name: "cd", req: client.ExecRequest{Command: "cd /tmp && pwd"}, stdout: "/tmp\n"},
		{name: "export", req: client.ExecRequest{Command: "export A=1; echo $A"}, stdout: "1\n"},
		{name: "set", req: client.ExecRequest{Command: "set -- a b c; echo $#"}, stdout: "3\n"},
		{name: "umask", req: client.ExecRequest{Command: "umask"}, stdout: "0022\n"},
		{name: "read", req: client.ExecRequest{Command: "read x; echo got $x", Stdin: []byte("hi\n")}, stdout: "got hi\n"},
		{name: "read here-document", req: client.ExecRequest{Command: "read x <<EOF\nhere\nEOF\necho $x"}, stdout: "here\n"},
		{name: "source", req: client.ExecRequest{Command: ". /dev/null; echo sourced"}, stdout: "sourced\n"},
		{name: "if", req: client.ExecRequest{Command: "if true; then echo yes; fi"}, stdout: "yes\n"},
		{name: "not found through the shell", req: client.ExecRequest{Command: "cd / && nonexistent-xyz"}, code: 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.VM(vm.ID).Exec(ctxT(t), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout
			if res.ExitCode != tc.code || (tc.code == 0 && string(out) != tc.stdout) {
				t.Fatalf("exit %d stdout %q stderr %q, want exit %d stdout %q", res.ExitCode, out, res.Stderr, tc.code, tc.stdout)
			}
		})
	}

	t.Run("builtins answer as the shell does", func(t *testing.T) {
		// The guest's shell (brush 0.3.0) has no ulimit: the line gets the
		// shell's own answer, exactly what running it in sh -c gives.
		for _, line := range []string{"type ls", "ulimit -n", "umask 077; umask"} {
			got, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: line})
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			want, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Argv: []string{"sh", "-c", line}})
			if err != nil {
				t.Fatal(err)
			}
			if got.ExitCode != want.ExitCode || !bytes.Equal(got.Stdout, want.Stdout) || !bytes.Equal(got.Stderr, want.Stderr) {
				t.Fatalf("%s: exit %d %q %q, in sh -c: exit %d %q %q", line, got.ExitCode, got.Stdout, got.Stderr, want.ExitCode, want.Stdout, want.Stderr)
			}
		}
	})

	t.Run("the process table shows what was launched", func(t *testing.T) {
		for _, tc := range []struct {
			req  client.SpawnRequest
			cmd  string
			args []string
		}{
			{client.SpawnRequest{Command: `sh -c "echo $0"`}, "sh", []string{"-c", "echo $0"}},
			{client.SpawnRequest{Command: "sh", Args: []string{"-c", "echo $0"}}, "sh", []string{"-c", "echo $0"}},
			{client.SpawnRequest{Argv: []string{"echo", "a b"}}, "echo", []string{"a b"}},
			{client.SpawnRequest{Command: "cd /tmp && echo x"}, "sh", []string{"-c", "cd /tmp && echo x"}},
		} {
			h, err := c.VM(vm.ID).Spawn(ctxT(t), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			p, err := h.Get(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if p.Command != tc.cmd || !slices.Equal(p.Args, tc.args) {
				t.Errorf("%+v launched %q %q, want %q %q", tc.req, p.Command, p.Args, tc.cmd, tc.args)
			}
			if x, err := h.Wait(ctxT(t), e2eTimeout); err != nil || x.ExitCode != 0 {
				t.Fatalf("wait: %+v %v", x, err)
			}
		}
	})

	t.Run("the README's process example", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		h, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: `sh -c "while read l; do echo got $l; done"`})
		if err != nil {
			t.Fatal(err)
		}
		p, err := h.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Command != "sh" || !slices.Equal(p.Args, []string{"-c", "while read l; do echo got $l; done"}) {
			t.Fatalf("launched %q %q: wrapped in a second shell", p.Command, p.Args)
		}
		s, err := c.VM(vm.ID).Process(p.Pid).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid).WriteStdin(ctx, []byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid).CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm.ID, p.Pid)), e2eTimeout)
		if got := output(t, evs, "stdout"); got != "got hello\n" {
			t.Fatalf("stdout %q, want %q (%s)", got, "got hello\n", summarize(evs))
		}
		if x, err := evs[len(evs)-1].Exit(); err != nil || x.ExitCode != 0 {
			t.Fatalf("final event %s", summarize(evs[len(evs)-1:]))
		}
	})
}

// TestE2EExecBadRequests: ambiguous command fields, missing working
// directories and missing programs are refused before anything runs, in
// the gateway's words.
func TestE2EExecBadRequests(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	for _, route := range []string{"exec", "processes"} {
		for _, tc := range []struct {
			body, field string
		}{
			{`{"argv":["ls"],"command":"ls"}`, "argv"},
			{`{"argv":["ls"],"args":["-l"]}`, "argv"},
			{`{"argv":["ls"],"command":"ls","args":[]}`, "argv"},
			{`{"args":["-l"]}`, "args"},
			{`{"argv":[]}`, "argv"},
			{`{"argv":[""]}`, "argv"},
			{`{"command":"  "}`, "command"},
			{`{}`, "command"},
			{`{"command":"touch /tmp/ran","cwd":"/nonexistent"}`, "cwd"},
			{`{"command":"touch /tmp/ran","cwd":"/etc/hostname"}`, "cwd"},
			{`{"command":"nonexistent-xyz --flag"}`, "command"},
			{`{"command":"nonexistent-xyz","args":[]}`, "command"},
			{`{"argv":["/bin/nonexistent-xyz"]}`, "command"},
		} {
			t.Run(route+" "+tc.body, func(t *testing.T) {
				err := e.raw("POST", "/v1/vms/"+vm.ID+"/"+route, testAdminKey, strings.NewReader(tc.body), nil)
				ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest)
				if ce.Details["field"] != tc.field {
					t.Fatalf("details %v, want field %s (%s)", ce.Details, tc.field, ce.Detail)
				}
				for _, engine := range []string{"sidecar", "native", "excluded_with", "required_without", "commandJSON"} {
					if strings.Contains(ce.Detail, engine) {
						t.Fatalf("detail %q is not in the gateway's words", ce.Detail)
					}
				}
				if strings.Contains(tc.body, "nonexistent-xyz") && (!strings.Contains(ce.Detail, "command not found: ") ||
					!strings.HasSuffix(ce.Detail, "nonexistent-xyz") || strings.Contains(ce.Detail, "--flag")) {
					t.Fatalf("detail %q", ce.Detail)
				}
			})
		}
	}
	t.Run("the streamed form checks cwd before the stream starts", func(t *testing.T) {
		_, err := c.VM(vm.ID).ExecStream(ctxT(t), client.ExecRequest{Command: "touch /tmp/ran", Cwd: "/nonexistent"})
		if ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest); ce.Details["field"] != "cwd" {
			t.Fatalf("details %v", ce.Details)
		}
	})
	t.Run("shells check cwd too", func(t *testing.T) {
		for _, cwd := range []string{"/nonexistent", "/etc/hostname"} {
			_, err := c.VM(vm.ID).OpenShell(ctxT(t), client.ShellRequest{Cwd: cwd})
			if ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest); ce.Details["field"] != "cwd" {
				t.Fatalf("details %v", ce.Details)
			}
		}
	})
	if res, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Argv: []string{"test", "-e", "/tmp/ran"}}); err != nil || res.ExitCode != 1 {
		t.Fatalf("a refused command ran: %+v %v", res, err)
	}
	if out := e.exec(c, vm.ID, "pwd"); out != "/workspace\n" {
		t.Fatalf("default cwd %q", out)
	}
}

// TestE2EExecDeadlines: an exec without timeoutMs is killed at the
// gateway's default deadline, one asking for more than the maximum is
// refused, and a keyed exec is bounded the same way and records the
// deadline as its outcome.
func TestE2EExecDeadlines(t *testing.T) {
	t.Parallel()
	const def, max = 2 * time.Second, 5 * time.Second
	e := newE2E(t, "--exec-timeout-default="+def.String(), "--exec-timeout-max="+max.String())
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})

	// sleep 30 outlives every deadline here: ending before it is the kill.
	const sleep = "sleep 30"
	t.Run("default deadline", func(t *testing.T) {
		killedAt(t, def, func() error {
			_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: sleep})
			return err
		})
	})
	t.Run("zero is the default", func(t *testing.T) {
		e := e.sub(t)
		killedAt(t, def, func() error {
			return e.raw("POST", "/v1/vms/"+vm.ID+"/exec", testAdminKey, strings.NewReader(`{"command":"sleep 30","timeoutMs":0}`), nil)
		})
	})
	t.Run("a deadline within the maximum", func(t *testing.T) {
		killedAt(t, 3*time.Second, func() error {
			_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: sleep, Timeout: 3000 * time.Millisecond})
			return err
		})
	})
	t.Run("above the maximum", func(t *testing.T) {
		e := e.sub(t)
		for _, stream := range []bool{false, true} {
			req := client.ExecRequest{Command: "touch /tmp/ran", Timeout: max + time.Millisecond}
			var err error
			if stream {
				_, err = c.VM(vm.ID).ExecStream(ctxT(t), req)
			} else {
				_, err = c.VM(vm.ID).Exec(ctxT(t), req, client.WithIdempotencyKey(e.uniq("above-max")))
			}
			ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest)
			if ce.Details["field"] != "timeoutMs" || ce.Details["maximum"] != float64(max.Milliseconds()) {
				t.Fatalf("details %v (%s)", ce.Details, ce.Detail)
			}
		}
		if res, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Argv: []string{"test", "-e", "/tmp/ran"}}); err != nil || res.ExitCode != 1 {
			t.Fatalf("a refused command ran: %+v %v", res, err)
		}
	})
	t.Run("keyed buffered exec", func(t *testing.T) {
		e := e.sub(t)
		var key string
		first := killedAt(t, def, func() error {
			key = e.uniq("keyed-buffered") // a stalled attempt's outcome is recorded too
			_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: sleep}, client.WithIdempotencyKey(key))
			return err
		})
		// The retry gets the recorded outcome: the deadline.
		_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: sleep}, client.WithIdempotencyKey(key))
		if again := wantCode(t, err, "deadline_exceeded", http.StatusGatewayTimeout); again.Detail != first.Detail {
			t.Fatalf("replayed %q, first %q", again.Detail, first.Detail)
		}
	})
	// streamed runs a streamed sleep and returns its final event's problem.
	streamed := func(t *testing.T, e *e2e, opts ...client.CallOption) error {
		s, err := c.VM(vm.ID).ExecStream(ctxT(t), client.ExecRequest{Command: sleep}, opts...)
		if err != nil {
			return err
		}
		evs := e.collect(s, e.eventReq("POST", "/v1/vms/"+vm.ID+"/exec"), e2eTimeout)
		p, err := evs[len(evs)-1].Problem()
		if err != nil {
			t.Fatalf("final event %s: %v", summarize(evs), err)
		}
		return p
	}
	t.Run("keyed streamed exec", func(t *testing.T) {
		e := e.sub(t)
		var key string
		killedAt(t, def, func() error {
			key = e.uniq("keyed-streamed")
			return streamed(t, e, client.WithIdempotencyKey(key))
		})
		// The retry answers the recorded deadline, and runs nothing.
		req, _ := http.NewRequestWithContext(ctxT(t), "POST", e.gw.URL+"/v1/vms/"+vm.ID+"/exec", strings.NewReader(`{"command":"sleep 30"}`))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Idempotency-Key", key)
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	})
	t.Run("streamed exec", func(t *testing.T) {
		e := e.sub(t)
		killedAt(t, def, func() error { return streamed(t, e) })
	})
	t.Run("the output before the kill", func(t *testing.T) {
		e := e.sub(t)
		// A warm VM, so that the echoes run well within the deadline. The
		// warm-up itself is not under test: on a loaded machine a first
		// exec can outlive even the maximum deadline, so it is tried
		// again until one fits.
		warm := false
		for try := 0; !warm && try < 6; try++ {
			_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: "echo warm", Timeout: max})
			var ce *client.Error
			switch {
			case err == nil:
				warm = true
			case !errors.As(err, &ce) || ce.Code != "deadline_exceeded":
				t.Fatalf("warm-up: %v", err)
			}
		}
		if !warm {
			t.Fatalf("warm-up: six execs of echo outlived the maximum deadline (%v)", max)
		}
		for _, key := range []string{"", e.uniq("partial")} {
			var opts []client.CallOption
			if key != "" {
				opts = append(opts, client.WithIdempotencyKey(key))
			}
			// The retry of a keyed one replays the recorded outcome, output included.
			for range len(opts) + 1 {
				_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: "echo partial; echo oops >&2; sleep 30", Timeout: max}, opts...)
				ce := wantCode(t, err, "deadline_exceeded", http.StatusGatewayTimeout)
				d := ce.Details
				if d["partial"] != true || d["stdout"] != "partial\n" || d["stderr"] != "oops\n" || d["encoding"] != "utf8" || d["truncated"] != false {
					t.Fatalf("details %v (%s)", d, ce.Detail)
				}
				if ms, _ := d["durationMs"].(float64); ms < float64(max.Milliseconds())-500 || !strings.Contains(ce.Detail, "partial") {
					t.Fatalf("durationMs %v, detail %q", d["durationMs"], ce.Detail)
				}
			}
		}
	})
}

// killedAt runs attempt, which starts a command that outlives its deadline
// and returns the problem it ended with, and checks that the problem is
// the deadline and came after it (and well before the command's end). An
// attempt the engine stalled on instead (503 engine_refused or
// engine_timeout, or a launch it never answered: seen on a loaded CI
// machine, 30 s, the engine's bridge timeout) is the engine's stall, not
// this test's subject: it is logged and run again, at most twice. Returns
// the deadline's problem.
func killedAt(t *testing.T, deadline time.Duration, attempt func() error) *client.Error {
	t.Helper()
	for try := 1; ; try++ {
		start := time.Now()
		err := attempt()
		took := time.Since(start)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == "unavailable" && try < 3 && strings.Contains(ce.Detail, "the engine") {
			t.Logf("attempt %d: the engine stalled after %s (%s); again", try, took.Round(time.Millisecond), ce.Detail)
			continue
		}
		// A stream's final event carries the problem without a status.
		if !errors.As(err, &ce) || ce.Code != "deadline_exceeded" || (ce.Status != 0 && ce.Status != http.StatusGatewayTimeout) {
			t.Fatalf("want deadline_exceeded (504), got %v", err)
		}
		if took < deadline || took > 25*time.Second {
			t.Fatalf("ended after %s, want the %s deadline", took, deadline)
		}
		return ce
	}
}

func TestParseConfigExecTimeouts(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := parseConfig(nil, env(nil))
	if err != nil || c.execTimeoutDefault != 10*time.Minute || c.execTimeoutMax != time.Hour {
		t.Fatalf("defaults %s %s %v", c.execTimeoutDefault, c.execTimeoutMax, err)
	}
	c, err = parseConfig(nil, env(map[string]string{"AGENTOS_GATEWAY_EXEC_TIMEOUT_DEFAULT": "30s", "AGENTOS_GATEWAY_EXEC_TIMEOUT_MAX": "2m"}))
	if err != nil || c.execTimeoutDefault != 30*time.Second || c.execTimeoutMax != 2*time.Minute {
		t.Fatalf("from env %s %s %v", c.execTimeoutDefault, c.execTimeoutMax, err)
	}
	for _, args := range [][]string{{"--exec-timeout-default=2h"}, {"--exec-timeout-default=0s"}, {"--exec-timeout-max=soon"}} {
		if _, err := parseConfig(args, env(nil)); err == nil || !strings.Contains(err.Error(), "exec-timeout") {
			t.Errorf("%v: err %v", args, err)
		}
	}
}

// heapSampler records the largest HeapInuse seen while it runs.
type heapSampler struct {
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	peak     uint64
}

// sampleHeap starts sampling until done, or the test's end.
func sampleHeap(t *testing.T) *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	t.Cleanup(func() { h.done() })
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			h.mu.Lock()
			h.peak = max(h.peak, ms.HeapInuse)
			h.mu.Unlock()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// done stops sampling and returns the peak.
func (h *heapSampler) done() uint64 {
	h.stopOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestE2EExecBinaryOutput: binary output comes back base64, oversized
// output is cut before it is encoded, and 20 MB of NUL bytes neither make a
// huge answer nor leave the gateway's heap grown (the gateway runs in this
// process, so its heap is this test's).
func TestE2EExecBinaryOutput(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	for _, tc := range []struct {
		command  string
		encoding string
		stdout   string
	}{
		{"printf 'a\\0b'", "base64", "a\x00b"},
		{"printf '\\377\\376'", "base64", "\xff\xfe"},
		{"printf '\\033[1mX\\033[0m'", "base64", "\x1b[1mX\x1b[0m"},
		{"printf '<<<<>>>>&&'", "base64", "<<<<>>>>&&"},
		{"printf 'text\\twith\\ttabs\\r\\n'", "utf8", "text\twith\ttabs\r\n"},
		{"printf 'héllo <b>'", "utf8", "héllo <b>"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			e := e.sub(t)
			res := e.execWire(t, vm.ID, client.ExecRequest{Command: tc.command})
			if out := res.stdout(t); res.Encoding != tc.encoding || string(out) != tc.stdout {
				t.Fatalf("%s %q, want %s %q", res.Encoding, out, tc.encoding, tc.stdout)
			}
		})
	}

	t.Run("maxOutputBytes above the cap", func(t *testing.T) {
		_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: "true", MaxOutputBytes: 16<<20 + 1})
		wantCode(t, err, "invalid_argument", http.StatusBadRequest)
	})

	t.Run("20 MB of NUL bytes", func(t *testing.T) {
		e := e.sub(t)
		const n = 20_000_000
		before := heapAfterGC()
		h := sampleHeap(t)
		req, _ := http.NewRequestWithContext(ctxT(t), "POST", e.gw.URL+"/v1/vms/"+vm.ID+"/exec",
			strings.NewReader(fmt.Sprintf(`{"command":"head -c %d /dev/zero","timeoutMs":120000}`, n)))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		resp.Body.Close()
		peak := h.done()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %v: %.200s", resp.StatusCode, err, body.Bytes())
		}
		// 1 MiB kept, base64: about 1.4 MB of JSON, nowhere near 5 x 20 MB.
		if body.Len() > 2<<20 {
			t.Fatalf("the answer is %d bytes", body.Len())
		}
		var res execJSON
		if err := json.Unmarshal(body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		out := res.stdout(t)
		if res.ExitCode != 0 || res.Encoding != "base64" || !res.Truncated || len(out) != 1<<20 || bytes.ContainsFunc(out, func(r rune) bool { return r != 0 }) {
			t.Fatalf("exit %d encoding %s truncated %v, %d bytes", res.ExitCode, res.Encoding, res.Truncated, len(out))
		}
		body = bytes.Buffer{}
		after := heapAfterGC()
		t.Logf("heap in use: %d MiB before, %d MiB at the peak, %d MiB after", before>>20, peak>>20, after>>20)
		// Generous bounds: the output went through the gateway in chunks and
		// only 1 MiB of it was kept; the heap must not have held the whole
		// output several times over, and must come back.
		if peak > before+192<<20 {
			t.Errorf("heap in use peaked %d MiB above its %d MiB start", (peak-before)>>20, before>>20)
		}
		if after > before+32<<20 {
			t.Errorf("heap in use is %d MiB after the exec, %d MiB before", after>>20, before>>20)
		}
	})

	t.Run("streamed binary output", func(t *testing.T) {
		e := e.sub(t)
		const n = 3_000_000
		s, err := c.VM(vm.ID).ExecStream(ctxT(t), client.ExecRequest{Command: fmt.Sprintf("head -c %d /dev/zero", n)})
		if err != nil {
			t.Fatal(err)
		}
		req := e.eventReq("POST", "/v1/vms/"+vm.ID+"/exec")
		evs := e.collect(s, req, e2eTimeout)
		total := 0
		for _, ev := range evs[:len(evs)-1] {
			var o struct{ Encoding string }
			if err := json.Unmarshal(ev.Data, &o); err != nil || ev.Type != "stdout" || o.Encoding != "base64" {
				t.Fatalf("event %s %.100s", ev.Type, ev.Data)
			}
			d, _ := ev.Output()
			total += len(d.Data)
		}
		if total != n {
			t.Fatalf("%d bytes streamed, want %d", total, n)
		}
		// The exit event has an id of its own, after the last output's.
		last, _ := strconv.ParseUint(evs[len(evs)-2].ID, 10, 64)
		if exit := evs[len(evs)-1]; exit.Type != "exit" || exit.ID != strconv.FormatUint(last+1, 10) {
			t.Fatalf("final event %s id %s after output id %d", exit.Type, exit.ID, last)
		}
	})
}

// TestE2EProcessResumePastEnd: a Last-Event-ID past the last output
// sequence of a process is refused, exited or running; the exit event of an
// exited process has an id of its own, one after its last output's, and a
// resume after it is 204 with nothing.
func TestE2EProcessResumePastEnd(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	path := func(pid uint32) *http.Request {
		return e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm.ID, pid))
	}

	t.Run("exited", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "echo one"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.VM(vm.ID).Process(p.Pid()).Wait(ctx, e2eTimeout); err != nil {
			t.Fatal(err)
		}
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, path(p.Pid()), e2eTimeout)
		if len(evs) < 2 {
			t.Fatalf("stream %s", summarize(evs))
		}
		last, _ := strconv.ParseUint(evs[len(evs)-2].ID, 10, 64)
		exitID := strconv.FormatUint(last+1, 10)
		if last == 0 || evs[len(evs)-1].Type != "exit" || evs[len(evs)-1].ID != exitID {
			t.Fatalf("stream %s: the exit event's id is not one after the last output's", summarize(evs))
		}
		// A resume after the exit event: nothing is left.
		req := path(p.Pid())
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		req.Header.Set("Last-Event-ID", exitID)
		resp, err := e.hc.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("resume after the exit event: %d %q", resp.StatusCode, body)
		}
		for _, after := range []uint64{last + 2, 999} {
			_, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(after, 10)})
			ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest)
			if ce.Details["field"] != "Last-Event-ID" || ce.Details["latestSequence"] != float64(last) {
				t.Fatalf("Last-Event-ID %d: details %v", after, ce.Details)
			}
		}
		// Resuming at the last sequence gets the exit event, with its id.
		s, err = c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(last, 10)})
		if err != nil {
			t.Fatal(err)
		}
		evs = e.collect(s, path(p.Pid()), e2eTimeout)
		if len(evs) != 1 || evs[0].Type != "exit" || evs[0].ID != exitID {
			t.Fatalf("resumed at the end: %s", summarize(evs))
		}
	})

	t.Run("running", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: `sh -c "echo start; read x; echo after $x"`})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := next(ctx, s)
		s.Close()
		if err != nil || ev.Type != "stdout" {
			t.Fatalf("first event %s %v", ev.Type, err)
		}
		first, _ := strconv.ParseUint(ev.ID, 10, 64)
		_, err = c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(first+5, 10)})
		if ce := wantCode(t, err, "invalid_argument", http.StatusBadRequest); ce.Details["latestSequence"] != float64(first) {
			t.Fatalf("details %v", ce.Details)
		}
		s, err = c.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{LastEventID: ev.ID})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VM(vm.ID).Process(p.Pid()).WriteStdin(ctx, []byte("done\n")); err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, path(p.Pid()), e2eTimeout)
		if got := output(t, evs, "stdout"); got != "after done\n" {
			t.Fatalf("resumed output %q (%s)", got, summarize(evs))
		}
	})
}
