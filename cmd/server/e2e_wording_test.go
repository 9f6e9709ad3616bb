package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2EErrorWording: errors a newcomer met (issue 36) say what is wrong
// and carry the detail a program needs: a prompt to a VM that is gone
// names the VM, not the session; a 409 never carries an empty reason; the
// 401 hint is readable; the cwd and stdin refusals name their field, and
// the stdin one its limit.
func TestE2EErrorWording(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	gone := e.vm(c, client.CreateVMRequest{})
	if _, err := c.VM(gone.ID).Delete(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	problem := func(t *testing.T, method, path, key, body string, status int) map[string]any {
		t.Helper()
		resp, b := e.send(method, path, key, strings.NewReader(body), nil)
		var p map[string]any
		if err := json.Unmarshal(b, &p); err != nil || resp.StatusCode != status {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, status)
		}
		if strings.Contains(string(b), `\u003c`) {
			t.Errorf("%s %s: HTML-escaped problem %s", method, path, b)
		}
		return p
	}
	details := func(p map[string]any) map[string]any { d, _ := p["details"].(map[string]any); return d }
	prompt := `{"content":[{"type":"text","text":"hi"}]}`

	t.Run("a prompt to a disposed VM", func(t *testing.T) {
		p := problem(t, "POST", "/v1/vms/"+gone.ID+"/sessions/demo/prompt", testAdminKey, prompt, http.StatusConflict)
		d := details(p)
		if p["detail"] != "the VM is disposed" || d["state"] != "disposed" {
			t.Fatalf("problem %v", p)
		}
		if r, ok := d["reason"]; ok && r == "" {
			t.Fatalf("an empty reason: %v", p)
		}
	})
	t.Run("a prompt to an unknown VM", func(t *testing.T) {
		p := problem(t, "POST", "/v1/vms/vm_0000000000000000/sessions/demo/prompt", testAdminKey, prompt, http.StatusNotFound)
		if d, _ := p["detail"].(string); strings.Contains(d, "session") || !strings.Contains(d, "vm_0000000000000000") {
			t.Fatalf("problem %v", p)
		}
	})
	t.Run("an exec on a disposed VM", func(t *testing.T) {
		p := problem(t, "POST", "/v1/vms/"+gone.ID+"/exec", testAdminKey, `{"command":"true"}`, http.StatusConflict)
		if r, ok := details(p)["reason"]; ok && r == "" {
			t.Fatalf("an empty reason: %v", p)
		}
	})
	t.Run("no key", func(t *testing.T) {
		p := problem(t, "GET", "/v1/vms", "", "", http.StatusUnauthorized)
		if d, _ := p["detail"].(string); !strings.Contains(d, "Bearer <key>") {
			t.Fatalf("problem %v", p)
		}
	})
	t.Run("a cwd that climbs", func(t *testing.T) {
		p := problem(t, "POST", "/v1/vms/"+vm.ID+"/exec", testAdminKey, `{"command":"true","cwd":"/workspace/../../.."}`, http.StatusBadRequest)
		if details(p)["field"] != "cwd" {
			t.Fatalf("problem %v", p)
		}
	})
	t.Run("stdin past its limit", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"command": "cat", "stdin": strings.Repeat("x", 100_000)})
		p := problem(t, "POST", "/v1/vms/"+vm.ID+"/exec", testAdminKey, string(body), http.StatusBadRequest)
		if d := details(p); d["field"] != "stdin" || d["limit"] != float64(65536) {
			t.Fatalf("problem %v", p)
		}
	})
}
