package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// mcpClientDir holds the official TypeScript MCP client and the script
// that drives the gateway's tools with it (make setup installs it).
const mcpClientDir = "../../mcp/testdata/client"

// TestMCPOfficialClient runs the official TypeScript MCP SDK's client
// against the gateway's tools over both transports: Streamable HTTP at
// /mcp, and `agentos mcp` started as a process over stdio. The script
// lists the tools, creates a VM, runs echo hi, follows a command's output
// as progress notifications, writes, reads, lists and deletes a file,
// spawns a process and reads its log, opens a preview, checks that a token
// without the exec scope gets a tool error for exec, finds both execs in
// the audit trail as REST calls, then hibernates and deletes the VM.
func TestMCPOfficialClient(t *testing.T) {
	e2e(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run the official MCP client: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mcpClientDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP client's packages are not installed (make setup): %v", err)
	}
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			// A few VM creations and commands on a loaded machine.
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "client.mjs")
			cmd.Dir = mcpClientDir
			cmd.Env = append(os.Environ(), "MCP_TRANSPORT="+transport, "AGENTOS_URL="+gw.url,
				"AGENTOS_API_KEY="+testAdminKey, "AGENTOS_CLI="+gw.cli)
			// Its own process group, so that the agentos mcp it starts is
			// killed with it if the wait runs out.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the MCP client failed: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), transport+": ok") {
				t.Fatalf("the MCP client did not finish:\n%s", out)
			}
		})
	}
}

// TestMCPRefusals: /mcp answers a request without a credential, or with a
// wrong one, as /v1 does, with a problem and before the protocol; and a
// request the transport refuses with a problem too. GET and DELETE, a
// stateful server's stream and session end, are 405: the server is
// stateless.
func TestMCPRefusals(t *testing.T) {
	e2e(t)
	const both = "application/json, text/event-stream"
	for _, tc := range []struct {
		name, method, auth, accept string
		status                     int
	}{
		{"no Authorization", http.MethodPost, "", both, http.StatusUnauthorized},
		{"an unknown key", http.MethodPost, "Bearer agk_nosuchkey_0123456789abcdefghijkl", both, http.StatusUnauthorized},
		{"an Accept the transport refuses", http.MethodPost, "Bearer " + testAdminKey, "application/json", http.StatusBadRequest},
		{"GET, the stream of a stateful server", http.MethodGet, "Bearer " + testAdminKey, "text/event-stream", http.StatusMethodNotAllowed},
		{"DELETE, the end of a session", http.MethodDelete, "Bearer " + testAdminKey, both, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
			req, err := http.NewRequestWithContext(ctxT(t), tc.method, gw.url+"/mcp", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", tc.accept)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %s: %s, want %d application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status)
			}
			if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

// TestMCPHeartbeat: exec with a progress token opens /mcp's event stream
// at once (its "started" notification), and while the command prints
// nothing the stream carries the gateway's heartbeat (a second in these
// tests), so that a proxy does not take it for a dead connection.
func TestMCPHeartbeat(t *testing.T) {
	e2e(t)
	ctx := ctxT(t)
	c := adminClient(t)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Labels: map[string]string{"test": uniq("mcp-heartbeat")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		_, _ = c.VM(vm.ID).Delete(ctx)
	})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"vm":"` + vm.ID + `","command":"sleep 2.5; echo done"},"_meta":{"progressToken":"p"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	got := string(b)
	started := strings.Index(got, `"message":"started"`)
	beat := strings.Index(got, ": heartbeat\n\n")
	result := strings.Index(got, `"result"`)
	if started < 0 || beat < started || result < beat || !strings.Contains(got, `done\n`) {
		t.Errorf("want the start's notification, a heartbeat, then the result of the quiet exec, got:\n%s", got)
	}
}
