package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// TestTokens: a token is found by its secret until it expires or is
// revoked, is listed (without its secret) only while live and only to its
// tenant, and keeps its scopes, bindings and origins.
func TestTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		db.now = func() time.Time { return t0 }
		tok, secret, err := db.CreateToken(ctx, gateway.Token{TenantID: "acme", Scopes: []gateway.Scope{gateway.ScopeVMRead, gateway.ScopeExec},
			VMID: "vm_1", SessionID: "s-1", Origins: []string{"https://app.example.com"}, Label: "terminal"}, 15*time.Minute)
		if err != nil || !strings.HasPrefix(secret, gateway.TokenPrefix) || !strings.HasPrefix(tok.ID, "tok_") || !tok.ExpiresAt.Equal(t0.Add(15*time.Minute)) {
			t.Fatalf("CreateToken = %+v, %q, %v", tok, secret, err)
		}
		_, _, err = db.CreateToken(ctx, gateway.Token{TenantID: "nobody", Scopes: []gateway.Scope{gateway.ScopeVMRead}}, time.Minute)
		wantCode(t, err, gateway.CodeNotFound)

		got, tenant, err := db.LookupToken(ctx, secret)
		if err != nil || tenant.ID != "acme" || got.ID != tok.ID || !slices.Equal(got.Scopes, tok.Scopes) || got.VMID != "vm_1" ||
			got.SessionID != "s-1" || !slices.Equal(got.Origins, tok.Origins) || got.Label != "terminal" || !got.ExpiresAt.Equal(tok.ExpiresAt) {
			t.Fatalf("LookupToken = %+v, %+v, %v", got, tenant, err)
		}
		_, _, err = db.LookupToken(ctx, secret+"x")
		wantCode(t, err, gateway.CodeUnauthenticated)
		if l, err := db.ListTokens(ctx, "acme"); err != nil || len(l) != 1 || l[0].ID != tok.ID {
			t.Fatalf("ListTokens = %+v, %v", l, err)
		}
		if l, err := db.ListTokens(ctx, "globex"); err != nil || len(l) != 0 {
			t.Fatalf("another tenant's ListTokens = %+v, %v", l, err)
		}
		wantCode(t, db.DeleteToken(ctx, "globex", tok.ID), gateway.CodeNotFound)

		// Expired: not found, not listed, not revocable; purged later.
		db.now = func() time.Time { return t0.Add(15 * time.Minute) }
		_, _, err = db.LookupToken(ctx, secret)
		wantCode(t, err, gateway.CodeUnauthenticated)
		if l, _ := db.ListTokens(ctx, "acme"); len(l) != 0 {
			t.Fatalf("an expired token is listed: %+v", l)
		}
		wantCode(t, db.DeleteToken(ctx, "acme", tok.ID), gateway.CodeNotFound)

		// Revoked: gone at once. A token minted an hour after the first
		// expired removes its row.
		db.now = func() time.Time { return t0.Add(80 * time.Minute) }
		tok2, secret2, err := db.CreateToken(ctx, gateway.Token{TenantID: "acme", Scopes: []gateway.Scope{gateway.ScopeShells}}, time.Hour)
		if err != nil || len(tok2.Origins) != 0 {
			t.Fatal(err)
		}
		if err := db.DeleteToken(ctx, "acme", tok2.ID); err != nil {
			t.Fatal(err)
		}
		_, _, err = db.LookupToken(ctx, secret2)
		wantCode(t, err, gateway.CodeUnauthenticated)
		var rows int
		if err := db.queryRow(ctx, db.r, `SELECT COUNT(*) FROM tokens`).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("%d token rows left, %v; want the expired one removed", rows, err)
		}
	})
}

// TestAudit: records are listed oldest first, by tenant, VM and time, a
// page at a time, and go once past their retention.
func TestAudit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		recs := []gateway.AuditRecord{
			{At: t0, TenantID: "acme", KeyID: "key_1", Method: "POST", Route: "/v1/vms", Status: 201},
			{At: t0.Add(time.Minute), TenantID: "acme", TokenID: "tok_1", Method: "POST", Route: "/v1/vms/{vm}/exec", VMID: "vm_1", Status: 403},
			{At: t0.Add(2 * time.Minute), TenantID: "globex", KeyID: "key_2", Method: "DELETE", Route: "/v1/vms/{vm}", VMID: "vm_2", Status: 200},
			{At: t0.Add(3 * time.Minute), Method: "GET", Route: "/v1/vms", Status: 401, RequestID: "r-4"},
		}
		// One record alone, then the rest as one batch (as the audit
		// writer hands them over), and an empty batch that writes nothing.
		if err := db.RecordAudit(ctx, recs[0]); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordAudit(ctx, recs[1:]...); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordAudit(ctx); err != nil {
			t.Fatal(err)
		}
		routes := func(f gateway.AuditFilter) []string {
			t.Helper()
			p, err := db.ListAudit(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range p.Items {
				out = append(out, a.Method+" "+a.Route)
			}
			return out
		}
		if got := routes(gateway.AuditFilter{TenantID: "acme"}); !slices.Equal(got, []string{"POST /v1/vms", "POST /v1/vms/{vm}/exec"}) {
			t.Errorf("acme's: %q", got)
		}
		if got := routes(gateway.AuditFilter{VMID: "vm_2"}); !slices.Equal(got, []string{"DELETE /v1/vms/{vm}"}) {
			t.Errorf("vm_2's: %q", got)
		}
		if got := routes(gateway.AuditFilter{After: t0.Add(90 * time.Second)}); !slices.Equal(got, []string{"DELETE /v1/vms/{vm}", "GET /v1/vms"}) {
			t.Errorf("after 90 s: %q", got)
		}
		first, err := db.ListAudit(ctx, gateway.AuditFilter{Limit: 3})
		if err != nil || len(first.Items) != 3 || first.NextCursor == "" {
			t.Fatalf("first page: %+v %v", first, err)
		}
		rest, err := db.ListAudit(ctx, gateway.AuditFilter{Limit: 3, Cursor: first.NextCursor})
		if err != nil || len(rest.Items) != 1 || rest.Items[0].RequestID != "r-4" || rest.NextCursor != "" {
			t.Fatalf("second page: %+v %v", rest, err)
		}
		_, err = db.ListAudit(ctx, gateway.AuditFilter{Cursor: "x"})
		wantCode(t, err, gateway.CodeInvalidArgument)
		if n, err := db.PurgeAudit(ctx, t0.Add(2*time.Minute)); err != nil || n != 2 {
			t.Fatalf("PurgeAudit = %d, %v", n, err)
		}
		if got := routes(gateway.AuditFilter{}); len(got) != 2 {
			t.Errorf("after the purge: %q", got)
		}
	})
}
