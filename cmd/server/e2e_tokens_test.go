package main

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2ETokens runs scoped tokens over real HTTP and WebSockets: each scope
// allowed and refused, the binding to one VM, no escalation, bad requests,
// origins, expiry, revocation, a token in the query of an event stream (as
// EventSource sends it) and refused elsewhere, the attach with a token as
// its subprotocol, and the audit trail of all of it.
func TestE2ETokens(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--token-max-ttl", "1h")
	_, key := e.tenantWithKey(e.uniq("tokens"), nil)
	c := e.client(key)
	vm := e.vm(c, client.CreateVMRequest{})
	other := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "printf hello > /workspace/hello.txt")

	mint := func(t *testing.T, req client.TokenRequest) (*client.CreatedToken, *client.Client) {
		t.Helper()
		if req.VM == "" {
			req.VM = vm.ID
		}
		tok, err := c.CreateToken(ctxT(t), req)
		if err != nil {
			t.Fatalf("mint %+v: %v", req, err)
		}
		if !strings.HasPrefix(tok.Secret, "agt_") || tok.VM != req.VM || !tok.ExpiresAt.After(time.Now()) {
			t.Fatalf("minted %+v", tok)
		}
		return tok, e.client(tok.Secret)
	}
	refused := func(t *testing.T, err error, scope string) {
		t.Helper()
		ce := wantCode(t, err, client.CodePermissionDenied, http.StatusForbidden)
		if scope != "" && ce.Details["scope"] != scope {
			t.Errorf("refusal details %v, want scope %s", ce.Details, scope)
		}
	}

	step(t, "Scopes", func(t *testing.T, ctx context.Context) {
		for _, tc := range []struct {
			scope          string
			allowed        func(h *client.VMHandle) error
			refused        func(h *client.VMHandle) error
			refusedNeeding string
		}{
			{client.ScopeVMRead,
				func(h *client.VMHandle) error { _, err := h.Get(ctx); return err },
				func(h *client.VMHandle) error { _, err := h.Exec(ctx, client.ExecRequest{Command: "true"}); return err }, client.ScopeExec},
			{client.ScopeExec,
				func(h *client.VMHandle) error {
					res, err := h.Exec(ctx, client.ExecRequest{Command: "cat /workspace/hello.txt"})
					if err == nil && string(res.Stdout) != "hello" {
						t.Errorf("exec through a token: %q", res.Stdout)
					}
					return err
				},
				func(h *client.VMHandle) error { _, err := h.Get(ctx); return err }, client.ScopeVMRead},
			{client.ScopeFilesRead,
				func(h *client.VMHandle) error {
					rc, err := h.ReadFile(ctx, "/workspace/hello.txt")
					if err == nil {
						rc.Close()
					}
					return err
				},
				func(h *client.VMHandle) error {
					_, err := h.WriteFile(ctx, "/workspace/x.txt", strings.NewReader("x"), client.WriteFileOptions{})
					return err
				}, client.ScopeFilesWrite},
			{client.ScopeFilesWrite,
				func(h *client.VMHandle) error {
					_, err := h.WriteFile(ctx, "/workspace/x.txt", strings.NewReader("x"), client.WriteFileOptions{})
					return err
				},
				func(h *client.VMHandle) error {
					rc, err := h.ReadFile(ctx, "/workspace/hello.txt")
					if err == nil {
						rc.Close()
					}
					return err
				}, client.ScopeFilesRead},
			{client.ScopeVMWrite,
				func(h *client.VMHandle) error {
					v := "yes"
					_, err := h.Update(ctx, client.UpdateVMRequest{Labels: map[string]*string{"touched": &v}})
					return err
				},
				func(h *client.VMHandle) error { _, err := h.Processes(ctx); return err }, client.ScopeVMRead},
			{client.ScopePreviews,
				func(h *client.VMHandle) error {
					_, err := h.CreatePreview(ctx, client.PreviewRequest{Port: 8080})
					return err
				},
				func(h *client.VMHandle) error { _, err := h.Shells(ctx); return err }, client.ScopeVMRead},
		} {
			t.Run(tc.scope, func(t *testing.T) {
				_, tc2 := mint(t, client.TokenRequest{Scopes: []string{tc.scope}})
				h := tc2.VM(vm.ID)
				if err := tc.allowed(h); err != nil {
					t.Fatalf("a call its scope allows: %v", err)
				}
				refused(t, tc.refused(h), tc.refusedNeeding)
			})
		}
	})

	all := []string{client.ScopeVMRead, client.ScopeVMWrite, client.ScopeExec, client.ScopeShells, client.ScopeFilesRead,
		client.ScopeFilesWrite, client.ScopeSessions, client.ScopePreviews}
	tok, tc := mint(t, client.TokenRequest{Scopes: all, Label: "everything"})

	step(t, "BoundToItsVM", func(t *testing.T, ctx context.Context) {
		_, err := tc.VM(other.ID).Get(ctx)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		_, err = tc.VM(other.ID).Exec(ctx, client.ExecRequest{Command: "true"})
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		l, err := tc.ListVMs(ctx, client.ListVMsOptions{})
		if err != nil || len(l.Items) != 1 || l.Items[0].ID != vm.ID {
			t.Fatalf("list through the token: %+v %v", l, err)
		}
		me, err := tc.Me(ctx)
		if err != nil || me.Token == nil || me.Token.ID != tok.ID || me.Token.VM != vm.ID || me.KeyID != "" || me.Admin {
			t.Fatalf("me through the token: %+v %v", me, err)
		}
	})

	step(t, "NoEscalation", func(t *testing.T, ctx context.Context) {
		_, err := tc.CreateVM(ctx, client.CreateVMRequest{})
		refused(t, err, "")
		_, err = tc.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeVMRead}, VM: vm.ID})
		refused(t, err, "")
		_, err = tc.Tokens(ctx)
		refused(t, err, "")
		refused(t, tc.RevokeToken(ctx, tok.ID), "")
		_, err = tc.VM(vm.ID).CreateSnapshot(ctx)
		refused(t, err, "")
		_, err = tc.WebhookSecret(ctx)
		refused(t, err, "")
		_, err = tc.Sidecars(ctx)
		refused(t, err, "")
		_, err = tc.ListTenants(ctx, client.ListOptions{})
		refused(t, err, "")
	})

	step(t, "BadRequests", func(t *testing.T, ctx context.Context) {
		for _, tc := range []struct {
			req   client.TokenRequest
			field string
		}{
			{client.TokenRequest{Scopes: []string{"vm:read", "root"}, VM: vm.ID}, "scopes[1]"},
			{client.TokenRequest{Scopes: []string{"vm:read"}, VM: vm.ID, TTL: 2 * time.Hour}, "ttlSeconds"},
			{client.TokenRequest{Scopes: []string{"sessions"}, Session: "s-1"}, "vm"},
			{client.TokenRequest{Scopes: nil, VM: vm.ID}, "scopes"},
		} {
			_, err := c.CreateToken(ctx, tc.req)
			if ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest); ce.Details["field"] != tc.field {
				t.Errorf("%+v: details %v, want field %s", tc.req, ce.Details, tc.field)
			}
		}
		// Another tenant's VM is not found.
		_, otherKey := e.tenantWithKey(e.uniq("tokens-other"), nil)
		_, err := e.client(otherKey).CreateToken(ctx, client.TokenRequest{Scopes: []string{"vm:read"}, VM: vm.ID})
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})

	step(t, "Origins", func(t *testing.T, ctx context.Context) {
		otok, _ := mint(t, client.TokenRequest{Scopes: []string{client.ScopeVMRead}, Origins: []string{"https://app.example.com"}})
		resp, _ := e.send("GET", "/v1/vms/"+vm.ID, otok.Secret, nil, map[string]string{"Origin": "https://evil.example.com"})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("from another origin: %d", resp.StatusCode)
		}
		resp, _ = e.send("GET", "/v1/vms/"+vm.ID, otok.Secret, nil, map[string]string{"Origin": "https://app.example.com"})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("from its origin: %d", resp.StatusCode)
		}
	})

	step(t, "QueryToken", func(t *testing.T, ctx context.Context) {
		// As EventSource sends it: a GET of an event stream.
		req, err := http.NewRequestWithContext(ctx, "GET", e.gw.URL+"/v1/vms/"+vm.ID+"/events?access_token="+tok.Secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := e.hc.Do(req.WithContext(sctx))
		if err != nil {
			t.Fatal(err)
		}
		line, rerr := bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || rerr != nil || line == "" {
			t.Fatalf("event stream with access_token: %d %v %q %v", resp.StatusCode, resp.Header, line, rerr)
		}
		// Elsewhere, and for a key, a query credential is refused.
		for _, tc := range []struct{ method, path, accept string }{
			{"POST", "/v1/vms/" + vm.ID + "/exec?access_token=" + tok.Secret, "application/json"},
			{"GET", "/v1/vms/" + vm.ID + "?access_token=" + tok.Secret, "application/json"},
			{"GET", "/v1/vms/" + vm.ID + "/events?access_token=" + key, "text/event-stream"},
		} {
			resp, _ := e.send(tc.method, tc.path, "", strings.NewReader(`{"command":"true"}`), map[string]string{"Accept": tc.accept, "Content-Type": "application/json"})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s: %d, want 401", tc.method, tc.path, resp.StatusCode)
			}
		}
	})

	step(t, "AttachWithTokenSubprotocol", func(t *testing.T, ctx context.Context) {
		sh, err := tc.VM(vm.ID).OpenShell(ctx, client.ShellRequest{})
		if err != nil {
			t.Fatal(err)
		}
		conn, resp, err := e.dialAttach(t, "/v1/vms/"+vm.ID+"/shells/"+sh.ID()+"/attach", tok.Secret)
		if err != nil {
			t.Fatalf("attach with the token: %v (%v)", err, resp)
		}
		conn.CloseNow()
		// A token without the shells scope is refused before the upgrade.
		rtok, _ := mint(t, client.TokenRequest{Scopes: []string{client.ScopeVMRead}})
		if _, resp, err := e.dialAttach(t, "/v1/vms/"+vm.ID+"/shells/"+sh.ID()+"/attach", rtok.Secret); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("attach without the shells scope: %v %v", err, resp)
		}
		if err := sh.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})

	step(t, "ExpiryAndRevocation", func(t *testing.T, ctx context.Context) {
		short, sc := mint(t, client.TokenRequest{Scopes: []string{client.ScopeVMRead}, TTL: time.Second})
		listed, err := c.Tokens(ctx)
		if err != nil || !slices.ContainsFunc(listed, hasID(short.ID)) || !slices.ContainsFunc(listed, hasID(tok.ID)) {
			t.Fatalf("tokens: %+v %v", listed, err)
		}
		eventually(t, 10*time.Second, "the short token to expire", func() bool {
			_, err := sc.VM(vm.ID).Get(ctx)
			return client.IsCode(err, client.CodeUnauthenticated)
		})
		if err := c.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		_, err = tc.VM(vm.ID).Get(ctx)
		wantCode(t, err, client.CodeUnauthenticated, http.StatusUnauthorized)
		listed, _ = c.Tokens(ctx)
		if slices.ContainsFunc(listed, hasID(tok.ID)) || slices.ContainsFunc(listed, hasID(short.ID)) {
			t.Fatalf("revoked or expired tokens listed: %+v", listed)
		}
	})

	step(t, "Audit", func(t *testing.T, ctx context.Context) {
		page, err := c.Audit(ctx, client.AuditOptions{ListOptions: client.ListOptions{Limit: 500}})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct {
			what  string
			match func(a client.AuditRecord) bool
		}{
			{"the key's mint", func(a client.AuditRecord) bool {
				return a.Method == "POST" && a.Route == "/v1/tokens" && a.Status == 201 && a.Key != "" && a.Token == ""
			}},
			{"the token's refused create", func(a client.AuditRecord) bool {
				return a.Method == "POST" && a.Route == "/v1/vms" && a.Status == 403 && a.Token == tok.ID
			}},
			{"the token's refused GET of another VM", func(a client.AuditRecord) bool {
				return a.Method == "GET" && a.Route == "/v1/vms/{vm}" && a.VM == other.ID && a.Status == 404 && a.Token == tok.ID
			}},
			{"an exec through a token", func(a client.AuditRecord) bool {
				return a.Method == "POST" && a.Route == "/v1/vms/{vm}/exec" && a.VM == vm.ID && a.Status == 200 && a.Token != ""
			}},
			{"the revocation", func(a client.AuditRecord) bool {
				return a.Method == "DELETE" && a.Route == "/v1/tokens/{token}" && a.Status == 204
			}},
		} {
			if !slices.ContainsFunc(page.Items, want.match) {
				t.Errorf("no audit record of %s in %+v", want.what, page.Items)
			}
		}
		// A GET by a key is not recorded.
		if slices.ContainsFunc(page.Items, func(a client.AuditRecord) bool { return a.Method == "GET" && a.Token == "" }) {
			t.Error("a key's GET is in the audit trail")
		}
		// One VM's records; the revoked token's use, whose tenant is
		// unknown, is the admin's to see.
		one, err := c.Audit(ctx, client.AuditOptions{VM: other.ID})
		if err != nil || len(one.Items) == 0 || slices.ContainsFunc(one.Items, func(a client.AuditRecord) bool { return a.VM != other.ID }) {
			t.Fatalf("the other VM's records: %+v %v", one, err)
		}
		all, err := e.admin.Audit(ctx, client.AuditOptions{ListOptions: client.ListOptions{Limit: 500}})
		if err != nil || !slices.ContainsFunc(all.Items, func(a client.AuditRecord) bool { return a.Status == 401 && a.Tenant == "" && a.Route == "/v1/vms/{vm}" }) {
			t.Fatalf("the admin's records lack the revoked token's use: %v", err)
		}
		_, otherKey := e.tenantWithKey(e.uniq("audit-other"), nil)
		me, _ := c.Me(ctx)
		_, err = e.client(otherKey).Audit(ctx, client.AuditOptions{Tenant: me.Tenant.ID})
		wantCode(t, err, client.CodePermissionDenied, http.StatusForbidden)
		_, err = tc.Audit(ctx, client.AuditOptions{})
		wantCode(t, err, client.CodeUnauthenticated, http.StatusUnauthorized)
	})
}

// hasID matches the token id.
func hasID(id string) func(client.Token) bool {
	return func(t client.Token) bool { return t.ID == id }
}
