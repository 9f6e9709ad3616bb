package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2EEgressRules: a VM's permissions.network as egress rules, on the
// real engine. Two host servers on loopback, A and B, are reached from the
// guest under names the rules tell apart (a.localhost and b.localhost
// resolve to loopback, and the engine matches the name the guest used):
// the first matching rule decides, the default decides the rest, the
// guest's own server stays reachable, and a PATCH changes the rules of
// the running VM at once, survives a hibernation, and loses nothing when
// it is refused.
func TestE2EEgressRules(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs real VMs")
	}
	e := newE2E(t)
	_, key := e.tenantWithKey(e.uniq("egress"), nil)
	c := e.client(key)
	serve := func(name string) int {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
		t.Cleanup(s.Close)
		return s.Listener.Addr().(*net.TCPAddr).Port
	}
	pa, pb := serve("A"), serve("B")

	// get fetches http://host:port/ from the guest: "A" or "B" when it got
	// through, "refused" when the network policy stopped it.
	get := func(t *testing.T, vm, host string, port int) string {
		t.Helper()
		script := fmt.Sprintf(`fetch("http://%s:%d/").then(r => r.text()).then(t => console.log(t), e => console.log("ERR", e.message, e.cause && e.cause.message))`, host, port)
		out := strings.TrimSpace(e.sub(t).exec(c, vm, "node -e '"+script+"'"))
		if strings.HasPrefix(out, "ERR") {
			if !strings.Contains(out, "EACCES") || !strings.Contains(out, "policy") {
				t.Fatalf("fetch %s:%d failed for another reason: %s", host, port, out)
			}
			return "refused"
		}
		return out
	}
	want := func(t *testing.T, vm string, cases ...any) {
		t.Helper()
		for i := 0; i < len(cases); i += 3 {
			host, port, w := cases[i].(string), cases[i+1].(int), cases[i+2].(string)
			if got := get(t, vm, host, port); got != w {
				t.Errorf("%s:%d from the guest: %s, want %s", host, port, got, w)
			}
		}
	}
	rules := client.NetworkRules{Default: "deny", Rules: []client.NetworkRule{
		{Mode: "deny", Hosts: []string{"a.localhost"}, Ports: []int{pb}},
		{Mode: "allow", Hosts: []string{"a.localhost"}},
		{Mode: "allow", Hosts: []string{"B.localhost"}, Ports: []int{pb}},
	}}
	vm := e.vm(c, client.CreateVMRequest{LoopbackExemptPorts: []uint16{uint16(pa), uint16(pb)},
		Permissions: map[string]any{"network": rules}})

	step(t, "Rules at create", func(t *testing.T, ctx context.Context) {
		want(t, vm.ID,
			"a.localhost", pa, "A", // the second rule
			"a.localhost", pb, "refused", // the first rule, before the second
			"b.localhost", pb, "B", // the third, case aside
			"b.localhost", pa, "refused", // no rule: the default
		)
		// The guest's own server is not egress.
		script := `const s = require("http").createServer((q, r) => r.end("self")).listen(3000, () => fetch("http://localhost:3000/").then(r => r.text()).then(t => { console.log(t); s.close() }, e => { console.log("ERR", e.message); s.close() }))`
		if out := strings.TrimSpace(e.sub(t).exec(c, vm.ID, "node -e '"+script+"'")); out != "self" {
			t.Errorf("the guest's own server: %s", out)
		}
	})

	step(t, "PATCH applies at once", func(t *testing.T, ctx context.Context) {
		got, err := c.VM(vm.ID).Update(ctx, client.UpdateVMRequest{Permissions: map[string]any{"network": client.NetworkRules{Default: "allow",
			Rules: []client.NetworkRule{{Mode: "deny", Hosts: []string{"a.localhost"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := got.Permissions["network"].(map[string]any); n["default"] != "allow" {
			t.Fatalf("patched record: %v", got.Permissions)
		}
		want(t, vm.ID, "a.localhost", pa, "refused", "b.localhost", pa, "A")
	})

	step(t, "A refused PATCH changes nothing", func(t *testing.T, ctx context.Context) {
		for _, c := range []struct {
			name, body, field string
		}{
			{"host with a port", `{"permissions": {"network": {"rules": [{"mode": "allow", "hosts": ["a.localhost:80"]}]}}}`, "permissions.network.rules[0].hosts[0]"},
			{"ask in a rule", `{"permissions": {"network": {"rules": [{"mode": "ask", "hosts": ["*"]}]}}}`, "permissions.network.rules[0].mode"},
			{"unknown capability", `{"permissions": {"net": "allow"}}`, "permissions.net"},
		} {
			resp, body := e.send("PATCH", "/v1/vms/"+vm.ID, key, strings.NewReader(c.body), map[string]string{"Content-Type": "application/merge-patch+json"})
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
				t.Errorf("%s: %d %s; want 400 naming %s", c.name, resp.StatusCode, body, c.field)
			}
		}
		got, err := c.VM(vm.ID).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := got.Permissions["network"].(map[string]any); n["default"] != "allow" {
			t.Fatalf("record after refused patches: %v", got.Permissions)
		}
		want(t, vm.ID, "a.localhost", pa, "refused", "b.localhost", pa, "A")
	})

	var tokenID string
	step(t, "A token cannot widen them", func(t *testing.T, ctx context.Context) {
		tok, err := c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeVMWrite, client.ScopeVMRead}, VM: vm.ID})
		if err != nil {
			t.Fatal(err)
		}
		tokenID = tok.ID
		tc := e.client(tok.Secret)
		_, err = tc.VM(vm.ID).Update(ctx, client.UpdateVMRequest{Permissions: map[string]any{"network": "allow"}})
		if ce := wantCode(t, err, client.CodePermissionDenied, http.StatusForbidden); ce.Details["field"] != "permissions" {
			t.Errorf("refusal details %v", ce.Details)
		}
		label := "yes"
		if _, err := tc.VM(vm.ID).Update(ctx, client.UpdateVMRequest{Labels: map[string]*string{"patched": &label}}); err != nil {
			t.Fatalf("a label with the same token: %v", err)
		}
		want(t, vm.ID, "a.localhost", pa, "refused")
	})

	step(t, "Kept across a hibernation", func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		// The exec wakes the VM, which comes back with its rules.
		want(t, vm.ID, "a.localhost", pa, "refused", "b.localhost", pb, "B")
	})

	step(t, "null allows again", func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Update(ctx, client.UpdateVMRequest{Permissions: map[string]any{"network": nil}}); err != nil {
			t.Fatal(err)
		}
		want(t, vm.ID, "a.localhost", pa, "A", "b.localhost", pb, "B")
	})

	step(t, "Left out is allowed", func(t *testing.T, ctx context.Context) {
		// A policy naming only fs leaves the network as it was without
		// one, not to the engine's default allowlist.
		other := e.vm(c, client.CreateVMRequest{LoopbackExemptPorts: []uint16{uint16(pa)}, Permissions: map[string]any{"fs": "allow"}})
		want(t, other.ID, "a.localhost", pa, "A")
	})

	step(t, "Audited", func(t *testing.T, ctx context.Context) {
		// Each change of the rules, refused or not, by key or by token.
		page, err := c.Audit(ctx, client.AuditOptions{VM: vm.ID, ListOptions: client.ListOptions{Limit: 100}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Items {
			if r.Method != http.MethodPatch {
				continue
			}
			who := "key"
			if r.Token != "" {
				who = "token"
				if r.Token != tokenID {
					t.Errorf("record %+v: token %s, want %s", r, r.Token, tokenID)
				}
			} else if r.Key == "" {
				t.Errorf("record %+v names neither a key nor a token", r)
			}
			if r.Route != "/v1/vms/{vm}" || r.RequestID == "" {
				t.Errorf("record %+v", r)
			}
			got = append(got, fmt.Sprintf("%s %d", who, r.Status))
		}
		if w := "key 200,key 400,key 400,key 400,token 403,token 200,key 200"; strings.Join(got, ",") != w {
			t.Errorf("PATCH records %v, want %s", got, w)
		}
	})

	step(t, "Bad rules at create", func(t *testing.T, ctx context.Context) {
		_, err := c.CreateVM(ctx, client.CreateVMRequest{Permissions: map[string]any{"network": client.NetworkRules{
			Rules: []client.NetworkRule{{Mode: "allow", Hosts: []string{"ok.example"}, Ports: []int{443, 70000}}}}}})
		if ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest); ce.Details["field"] != "permissions.network.rules[0].ports[1]" {
			t.Errorf("details %v", ce.Details)
		}
	})
}
