package agentos

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHostCallbacks registers a collection with the real engine and runs
// its command in the guest: the handler gets the key and the input the
// engine parsed from the flags, its answer is what the command prints, its
// error the command's, and a VM without a handler refuses the call.
func TestHostCallbacks(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	var mu sync.Mutex
	var calls []HostCall
	vm.SetHostCallHandler(func(ctx context.Context, c HostCall) (json.RawMessage, error) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		if c.Key == "tools:fail" {
			return nil, errors.New("the host says no")
		}
		return json.RawMessage(`{"got":` + string(c.Input) + `}`), nil
	})
	n, err := vm.RegisterHostCallbacks(ctx, HostCallbackCollection{Name: "tools", Description: "Host tools", Callbacks: []HostCallback{
		{Name: "echo", Description: "Echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}},"required":["n"]}`),
			Timeout: 5 * time.Second, Examples: []HostCallbackExample{{Description: "one", Input: json.RawMessage(`{"n":1}`)}}},
		{Name: "fail", Description: "Fails", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}})
	if err != nil || n != 1 {
		t.Fatalf("register: %d commands, %v", n, err)
	}
	for _, tc := range []struct {
		command, stdout, stderr string
		exit                    int
	}{
		{"agentos-tools echo --n 2 --s hi", `{"ok":true,"result":{"got":{"n":2,"s":"hi"}}}`, "", 0},
		{`agentos-tools echo --json '{"n":3}'`, `{"ok":true,"result":{"got":{"n":3}}}`, "", 0},
		{"agentos-tools echo", "", "missing required property", 1},
		{"agentos-tools fail", "", "the host says no", 1},
	} {
		r, err := vm.Exec(ctx, tc.command, ExecOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.command, err)
		}
		if r.ExitCode != tc.exit || strings.TrimSpace(string(r.Stdout)) != tc.stdout || !strings.Contains(string(r.Stderr), tc.stderr) {
			t.Errorf("%s: exit %d stdout %q stderr %q", tc.command, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
	mu.Lock()
	if len(calls) != 3 || calls[0].Key != "tools:echo" || calls[0].InvocationID == "" || calls[0].Timeout != 5*time.Second {
		t.Errorf("calls %+v", calls)
	}
	mu.Unlock()

	vm.SetHostCallHandler(nil)
	r, err := vm.Exec(ctx, "agentos-tools echo --n 1", ExecOptions{})
	if err != nil || r.ExitCode == 0 || !strings.Contains(string(r.Stderr), "no sidecar request handler") {
		t.Errorf("without a handler: %+v %v", r, err)
	}
	if _, err := vm.RegisterHostCallbacks(ctx, HostCallbackCollection{Name: "tools", Description: "again", Callbacks: []HostCallback{
		{Name: "x", Description: "x", InputSchema: json.RawMessage(`{}`)},
	}}); err == nil {
		t.Error("the engine took a collection registered twice")
	}
}
