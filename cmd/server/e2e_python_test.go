package main

// Python end to end: the engine's Pyodide answers python3 through an exec,
// a spawned process and a shell line; --version is the runtime's; the
// engine's refusals that name their reason reach the caller as 400 with
// that reason, and pip install says why it cannot work.

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// pyJSON is the program: json from the standard library, and the
// major version of the runtime.
const pyJSON = `python3 -c "import json,sys; print(json.dumps({'v': sys.version_info[0]}))"`

func TestE2EPython(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	h := c.VM(vm.ID)

	step(t, "exec", func(t *testing.T, ctx context.Context) {
		res, err := h.Exec(ctx, client.ExecRequest{Command: pyJSON})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || string(res.Stdout) != "{\"v\": 3}\n" {
			t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	step(t, "--version", func(t *testing.T, ctx context.Context) {
		res, err := h.Exec(ctx, client.ExecRequest{Command: "python3 --version"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || !regexp.MustCompile(`^Python 3\.\d+\.\d+\n$`).Match(res.Stdout) {
			t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	step(t, "refusals are 400 with their reason", func(t *testing.T, ctx context.Context) {
		for _, tc := range []struct{ command, says, reason string }{
			{"python3 -X dev x.py", "unsupported python option: -X", "command_refused"},
			{"pip install requests", "pip install cannot work in this VM", ""},
		} {
			_, err := h.Exec(ctx, client.ExecRequest{Command: tc.command})
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != client.CodeInvalidArgument || !strings.Contains(ce.Detail, tc.says) {
				t.Errorf("%s: %v, want 400 invalid_argument saying %q", tc.command, err, tc.says)
			} else if tc.reason != "" && ce.Details["reason"] != tc.reason {
				t.Errorf("%s: details %v, want reason %s", tc.command, ce.Details, tc.reason)
			}
		}
	})
	step(t, "spawn", func(t *testing.T, ctx context.Context) {
		p, err := h.Spawn(ctx, client.SpawnRequest{Command: pyJSON})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		var last client.Event
		for ev, err := range h.Process(p.Pid()).Follow(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if o, ok := ev.(*client.Output); ok {
				out.Write(o.Data)
			}
			last = ev
		}
		if x, ok := last.(*client.Exit); !ok || x.ExitCode != 0 || out.String() != "{\"v\": 3}\n" {
			t.Fatalf("ended with %#v: %q", last, out.String())
		}
	})
	step(t, "shell line", func(t *testing.T, ctx context.Context) {
		id, sc := e.openLiveShell(t, c, vm.ID, client.ShellRequest{})
		if err := h.Shell(id).Input(ctx, []byte(pyJSON+"\r")); err != nil {
			t.Fatal(err)
		}
		if !sc.waitFor("{\"v\": 3}\r\n") {
			t.Fatalf("screen %q", sc.String())
		}
		// The line's status is the next line's $?.
		if err := h.Shell(id).Input(ctx, []byte("echo status=$?\r")); err != nil {
			t.Fatal(err)
		}
		if !sc.waitFor("status=0") {
			t.Fatalf("screen %q", sc.String())
		}
	})
}
