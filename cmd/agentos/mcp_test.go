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
