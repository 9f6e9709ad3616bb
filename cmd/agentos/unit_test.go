package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// The pure parts of the command, without a gateway (they also run under
// -short).

func TestSplitRemote(t *testing.T) {
	for _, tc := range []struct {
		arg, vm, path string
		remote        bool
	}{
		{"vm_1:/tmp/x", "vm_1", "/tmp/x", true},
		{"vm_1:/", "vm_1", "/", true},
		{"vm_1:relative", "", "", false},
		{"./a:/b", "", "", false},
		{"dir/vm:/x", "", "", false},
		{":/x", "", "", false},
		{"plain.txt", "", "", false},
	} {
		vm, p, remote := splitRemote(tc.arg)
		if vm != tc.vm || p != tc.path || remote != tc.remote {
			t.Errorf("splitRemote(%q) = %q, %q, %v", tc.arg, vm, p, remote)
		}
	}
}

func TestLabelSelector(t *testing.T) {
	match, not, err := labelSelector([]string{"a=1", "b:2", "c!=3", "d=x!=y"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "1", "b": "2", "d": "x!=y"}; !reflect.DeepEqual(match, want) {
		t.Errorf("match %v, want %v", match, want)
	}
	if want := map[string]string{"c": "3"}; !reflect.DeepEqual(not, want) {
		t.Errorf("not %v, want %v", not, want)
	}
	for _, bad := range []string{"novalue", "=v", "!=v"} {
		if _, _, err := labelSelector([]string{bad}); err == nil {
			t.Errorf("labelSelector(%q) accepted", bad)
		}
	}
}

func TestCommandArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"vm", "--", "ls", "-l"}, []string{"ls", "-l"}},
		{[]string{"vm", "ls"}, []string{"ls"}},
		{[]string{"vm", "--"}, []string{}},
		{[]string{"vm"}, nil},
	} {
		if got := commandArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("commandArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExitStatusCode(t *testing.T) {
	for _, tc := range []struct {
		st   client.ExitStatus
		want int
	}{
		{client.ExitStatus{ExitCode: 3}, 3},
		{client.ExitStatus{ExitCode: 130, Signal: "SIGINT"}, 130},
		{client.ExitStatus{ExitCode: 0, Signal: "SIGKILL"}, 137},
		{client.ExitStatus{ExitCode: -1, Signal: "SIGTERM"}, 143},
	} {
		if got := exitStatusCode(tc.st); got != tc.want {
			t.Errorf("exitStatusCode(%+v) = %d, want %d", tc.st, got, tc.want)
		}
	}
	if got := signalName(syscall.SIGINT); got != "SIGINT" {
		t.Errorf("signalName(SIGINT) = %q", got)
	}
}

func TestDescribe(t *testing.T) {
	const gwURL = "http://gw:8080"
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("list VMs: %w", &client.Error{Status: 401, Code: client.CodeUnauthenticated, Detail: "bad key"}),
			"the gateway at http://gw:8080 refused the API key (set --key or AGENTOS_API_KEY, or run agentos login)"},
		{fmt.Errorf("get VM vm_1: %w", &client.Error{Status: 404, Code: client.CodeNotFound, Detail: "vm vm_1 not found"}),
			"get VM vm_1: vm vm_1 not found"},
		{fmt.Errorf("create a VM: %w", &client.Error{Status: 429, Code: client.CodeResourceExhausted, Detail: "quota"}),
			"create a VM: quota (resource_exhausted)"},
		{fmt.Errorf("list VMs: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}),
			"cannot reach the gateway at http://gw:8080: connection refused"},
		{errors.New("plain"), "plain"},
	} {
		if got := describe(tc.err, gwURL); got != tc.want {
			t.Errorf("describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestMessageText(t *testing.T) {
	for raw, want := range map[string]string{
		`"plain"`: "plain",
		`{"role":"assistant","content":[{"type":"text","text":"Hel"},{"type":"image"},{"type":"text","text":"lo"}]}`: "Hello",
		`{"content":"as a string"}`: "as a string",
		`null`:                      "",
	} {
		if got := messageText([]byte(raw)); got != want {
			t.Errorf("messageText(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestExitCodeOfInterrupt(t *testing.T) {
	a := &app{stderr: &syncBuffer{}, caught: syscall.SIGINT}
	if got := a.exitCode(fmt.Errorf("follow: %w", context.Canceled)); got != 130 {
		t.Errorf("exit code after SIGINT: %d", got)
	}
	a = &app{stderr: &syncBuffer{}}
	if got := a.exitCode(exitError{code: 7}); got != 7 {
		t.Errorf("exit code of a remote status: %d", got)
	}
	if got := a.exitCode(usageError{msg: "bad"}); got != 2 {
		t.Errorf("exit code of a usage error: %d", got)
	}
}

// TestSettingsReadOldNames: AGENTOS_URL and AGENTOS_API_KEY configure the
// command, and the names the examples once used still do, after them.
func TestSettingsReadOldNames(t *testing.T) {
	for _, tc := range []struct {
		env          map[string]string
		wantURL, key string
	}{
		{map[string]string{"AGENTOS_URL": "http://a:1", "AGENTOS_API_KEY": "new"}, "http://a:1", "new"},
		{map[string]string{"AGENTOS_GATEWAY_URL": "http://b:2", "AGENTOS_GATEWAY_KEY": "old"}, "http://b:2", "old"},
		{map[string]string{"AGENTOS_URL": "http://a:1", "AGENTOS_GATEWAY_URL": "http://b:2", "AGENTOS_API_KEY": "new", "AGENTOS_GATEWAY_KEY": "old"}, "http://a:1", "new"},
	} {
		a := &app{getenv: func(k string) string { return tc.env[k] }}
		u, k, err := a.settings()
		if err != nil || u != tc.wantURL || k != tc.key {
			t.Errorf("%v: %q %q %v, want %q %q", tc.env, u, k, err, tc.wantURL, tc.key)
		}
	}
}

// TestHelpListsCommands: agentos help names every command, mcp included,
// with its one-line summary.
func TestHelpListsCommands(t *testing.T) {
	var out bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	root := a.rootCommand()
	root.SetArgs([]string{"help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	_, listed, ok := strings.Cut(out.String(), "Available Commands:")
	if !ok {
		t.Fatalf("no command list in:\n%s", out.String())
	}
	for _, tc := range []struct{ name, summary string }{
		{"login", "Check a gateway URL"},
		{"vm", "Create, list"},
		{"exec", "Run a command in a VM"},
		{"shell", "interactive shell"},
		{"cp", "Copy files"},
		{"logs", "process's output"},
		{"session", "agent sessions"},
		{"token", "Mint short-lived tokens"},
		{"port-forward", "Serve a VM's HTTP port"},
		{"mcp", "Serve the gateway's tools to an MCP client over stdio"},
	} {
		found := false
		for line := range strings.Lines(listed) {
			if f := strings.Fields(line); len(f) > 0 && f[0] == tc.name && strings.Contains(line, tc.summary) {
				found = true
			}
		}
		if !found {
			t.Errorf("help does not list %s (%q):\n%s", tc.name, tc.summary, listed)
		}
	}
}
