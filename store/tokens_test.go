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
