package store

import (
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

var secretFormat = regexp.MustCompile(`^agk_[0-9a-hjkmnp-tv-z]{52}$`)

func TestAPIKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")

		key, secret, err := db.CreateAPIKey(ctx, "acme", false)
		if err != nil {
			t.Fatalf("CreateAPIKey: %v", err)
		}
		if !secretFormat.MatchString(secret) {
			t.Errorf("secret %q is not agk_ and 52 unambiguous base32 characters", secret)
		}
		if key.Prefix != secret[:12] || !strings.HasPrefix(key.ID, "key_") || key.TenantID != "acme" || key.Admin || key.CreatedAt.IsZero() {
			t.Errorf("CreateAPIKey = %+v", key)
		}
		_, secret2, err := db.CreateAPIKey(ctx, "acme", false)
		if err != nil {
			t.Fatalf("CreateAPIKey: %v", err)
		}
		if secret2 == secret {
			t.Fatal("two keys with the same secret")
		}

		got, tenant, err := db.LookupAPIKey(ctx, secret)
		if err != nil {
			t.Fatalf("LookupAPIKey: %v", err)
		}
		if got.ID != key.ID || got.TenantID != "acme" || got.Prefix != key.Prefix || !got.CreatedAt.Equal(key.CreatedAt) {
			t.Errorf("LookupAPIKey = %+v, want %+v", got, key)
		}
		// The tenant comes with the key, as GetTenant has it.
		if want, err := db.GetTenant(ctx, "acme"); err != nil || !reflect.DeepEqual(tenant, want) {
			t.Errorf("LookupAPIKey tenant = %+v, want %+v (%v)", tenant, want, err)
		}

		// Only the hash is stored: the secret appears in no column.
		var n int
		if err := db.queryRow(ctx, db.r, `SELECT COUNT(*) FROM api_keys WHERE prefix = ? OR id = ? OR CAST(hash AS TEXT) = ?`,
			secret, secret, secret).Scan(&n); err != nil || n != 0 {
			t.Errorf("secret found stored in clear (%d rows, %v)", n, err)
		}

		// Wrong secrets: right prefix and wrong rest (the row is fetched and
		// its hash compared), truncated, extended, empty.
		tampered := secret[:len(secret)-1] + string("0123"[(strings.IndexByte("0123", secret[len(secret)-1])+1)%4])
		for _, bad := range []string{tampered, secret[:30], secret + "x", secret[:12], "agk_", "", "not a key at all"} {
			_, _, err := db.LookupAPIKey(ctx, bad)
			wantCode(t, err, gateway.CodeUnauthenticated)
		}

		keys, err := db.ListAPIKeys(ctx, "acme")
		if err != nil || len(keys) != 2 || keys[0].ID != key.ID {
			t.Fatalf("ListAPIKeys = %+v, %v; want 2 keys, oldest first", keys, err)
		}
		if keys, err := db.ListAPIKeys(ctx, "globex"); err != nil || keys == nil || len(keys) != 0 {
			t.Fatalf("ListAPIKeys(globex) = %v, %v; want an empty list", keys, err)
		}
		_, err = db.ListAPIKeys(ctx, "initech")
		wantCode(t, err, gateway.CodeNotFound)

		// Another tenant cannot delete the key; its owner can, at once.
		wantCode(t, db.DeleteAPIKey(ctx, "globex", key.ID), gateway.CodeNotFound)
		if err := db.DeleteAPIKey(ctx, "acme", key.ID); err != nil {
			t.Fatalf("DeleteAPIKey: %v", err)
		}
		_, _, err = db.LookupAPIKey(ctx, secret)
		wantCode(t, err, gateway.CodeUnauthenticated)
		wantCode(t, db.DeleteAPIKey(ctx, "acme", key.ID), gateway.CodeNotFound)
		if _, _, err := db.LookupAPIKey(ctx, secret2); err != nil {
			t.Fatalf("the other key stopped working: %v", err)
		}

		_, _, err = db.CreateAPIKey(ctx, "initech", false)
		wantCode(t, err, gateway.CodeNotFound)
	})
}

func TestHasAdminKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, gateway.DefaultTenantID)
		check := func(want bool) {
			t.Helper()
			if has, err := db.HasAdminKey(ctx); err != nil || has != want {
				t.Fatalf("HasAdminKey = %v, %v; want %v", has, err, want)
			}
		}
		check(false)
		if _, _, err := db.CreateAPIKey(ctx, gateway.DefaultTenantID, false); err != nil {
			t.Fatal(err)
		}
		check(false)
		admin, secret, err := db.CreateAPIKey(ctx, gateway.DefaultTenantID, true)
		if err != nil {
			t.Fatal(err)
		}
		check(true)
		if got, _, err := db.LookupAPIKey(ctx, secret); err != nil || !got.Admin {
			t.Fatalf("LookupAPIKey(admin) = %+v, %v", got, err)
		}
		if err := db.DeleteAPIKey(ctx, gateway.DefaultTenantID, admin.ID); err != nil {
			t.Fatal(err)
		}
		check(false)
	})
}

func TestImportAPIKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, gateway.DefaultTenantID)
		mustTenant(t, db, "acme")
		const secret = "operator-chosen-admin-key-0123"

		first, err := db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, secret)
		if err != nil {
			t.Fatalf("ImportAPIKey: %v", err)
		}
		if first.Prefix != secret[:12] || !first.Admin || first.TenantID != gateway.DefaultTenantID {
			t.Errorf("ImportAPIKey = %+v", first)
		}
		again, err := db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, secret)
		if err != nil {
			t.Fatalf("ImportAPIKey again: %v", err)
		}
		if again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("second import = %+v, want the first %+v", again, first)
		}
		keys, _ := db.ListAPIKeys(ctx, gateway.DefaultTenantID)
		if len(keys) != 1 {
			t.Errorf("%d keys after importing one twice", len(keys))
		}
		got, _, err := db.LookupAPIKey(ctx, secret)
		if err != nil || got.ID != first.ID || !got.Admin {
			t.Fatalf("LookupAPIKey = %+v, %v", got, err)
		}

		_, err = db.ImportAPIKey(ctx, "acme", true, secret)
		wantCode(t, err, gateway.CodeConflict)
		_, err = db.ImportAPIKey(ctx, gateway.DefaultTenantID, false, secret)
		wantCode(t, err, gateway.CodeConflict)
		_, err = db.ImportAPIKey(ctx, "initech", true, "another-operator-chosen-key-0123")
		wantCode(t, err, gateway.CodeNotFound)
		for _, bad := range []string{"", "short", strings.Repeat("x", MinImportedAPIKeyLen-1),
			strings.Repeat("x", 20) + " with space", strings.Repeat("é", 20)} {
			_, err = db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, bad)
			wantCode(t, err, gateway.CodeInvalidArgument)
		}
	})
}

// TestAPIKeysSharedPrefix covers the constant-time path with more than one
// candidate: keys whose first 12 characters (the lookup prefix) are equal
// are told apart by their hashes alone.
func TestAPIKeysSharedPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		const shared = "agk_samepfx_"
		a, err := db.ImportAPIKey(ctx, "acme", false, shared+"aaaaaaaaaaaaaaaaaaaa")
		if err != nil {
			t.Fatal(err)
		}
		b, err := db.ImportAPIKey(ctx, "globex", false, shared+"bbbbbbbbbbbbbbbbbbbb")
		if err != nil {
			t.Fatal(err)
		}
		if a.Prefix != b.Prefix {
			t.Fatalf("prefixes %q and %q differ", a.Prefix, b.Prefix)
		}
		for secret, want := range map[string]string{
			shared + "aaaaaaaaaaaaaaaaaaaa": a.ID,
			shared + "bbbbbbbbbbbbbbbbbbbb": b.ID,
		} {
			got, _, err := db.LookupAPIKey(ctx, secret)
			if err != nil || got.ID != want {
				t.Errorf("LookupAPIKey(%s) = %+v, %v; want %s", secret, got, err, want)
			}
		}
		_, _, err = db.LookupAPIKey(ctx, shared+"cccccccccccccccccccc")
		wantCode(t, err, gateway.CodeUnauthenticated)
	})
}

// TestImportAPIKeyConcurrent: gateways starting together with the same
// admin key end up with one key, and none fails.
func TestImportAPIKeyConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, gateway.DefaultTenantID)
		const secret = "operator-chosen-admin-key-0123"
		var wg sync.WaitGroup
		ids := make([]string, 10)
		for i := range ids {
			wg.Go(func() {
				k, err := db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, secret)
				if err != nil {
					t.Errorf("ImportAPIKey: %v", err)
				}
				ids[i] = k.ID
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("concurrent imports returned different keys: %v", ids)
			}
		}
	})
}
