package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestTenantCRUD(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		in := gateway.Tenant{
			Name:     "Acme",
			Isolated: true,
			Quotas:   gateway.Quotas{MaxVMs: 3, MaxProcesses: 40, RequestsPerSecond: 2.5},
			Sessions: gateway.SessionSettings{
				RetentionDays:     30,
				PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionReject, TimeoutSeconds: 120},
			},
		}
		created, err := db.CreateTenant(ctx, in)
		if err != nil {
			t.Fatalf("CreateTenant: %v", err)
		}
		if !strings.HasPrefix(created.ID, "ten_") || len(created.ID) != len("ten_")+16 {
			t.Errorf("generated ID %q, want ten_ and 16 characters", created.ID)
		}
		if created.CreatedAt.IsZero() || !created.UpdatedAt.Equal(created.CreatedAt) || created.CreatedAt.Location() != time.UTC {
			t.Errorf("timestamps %v / %v, want equal, UTC and set", created.CreatedAt, created.UpdatedAt)
		}

		got, err := db.GetTenant(ctx, created.ID)
		if err != nil {
			t.Fatalf("GetTenant: %v", err)
		}
		if !tenantsEqual(got, created) || !tenantsEqual(got, withTimes(in, created)) {
			t.Errorf("GetTenant = %+v, want %+v", got, created)
		}

		_, err = db.CreateTenant(ctx, gateway.Tenant{ID: created.ID, Name: "again"})
		wantCode(t, err, gateway.CodeConflict)
		_, err = db.GetTenant(ctx, "ten_missing")
		wantCode(t, err, gateway.CodeNotFound)

		// Update: the callback's changes are stored, ID and CreatedAt are not
		// the callback's to change, UpdatedAt moves.
		db.now = func() time.Time { return created.UpdatedAt.Add(time.Second) }
		updated, err := db.UpdateTenant(ctx, created.ID, func(t *gateway.Tenant) error {
			t.Name = "Acme Corp"
			t.Quotas.MaxVMs = 10
			t.Isolated = false
			t.Sessions.RetentionDays = 7
			t.Sessions.PermissionDefault.Decision = gateway.DecisionAllow
			t.ID = "hijack"
			t.CreatedAt = time.Unix(0, 0)
			return nil
		})
		if err != nil {
			t.Fatalf("UpdateTenant: %v", err)
		}
		want := created
		want.Name, want.Quotas.MaxVMs, want.Isolated = "Acme Corp", 10, false
		want.Sessions = gateway.SessionSettings{
			RetentionDays:     7,
			PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionAllow, TimeoutSeconds: 120},
		}
		want.UpdatedAt = created.UpdatedAt.Add(time.Second)
		if !tenantsEqual(updated, want) {
			t.Errorf("UpdateTenant = %+v, want %+v", updated, want)
		}
		if got, _ := db.GetTenant(ctx, created.ID); !tenantsEqual(got, want) {
			t.Errorf("GetTenant after update = %+v, want %+v", got, want)
		}
		if _, err := db.GetTenant(ctx, "hijack"); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("the update renamed the tenant: %v", err)
		}

		// Clearing the permission default stores NULL, read back as nil.
		cleared, err := db.UpdateTenant(ctx, created.ID, func(t *gateway.Tenant) error {
			t.Sessions = gateway.SessionSettings{}
			return nil
		})
		if err != nil {
			t.Fatalf("UpdateTenant(clear sessions): %v", err)
		}
		want = cleared
		want.Sessions = gateway.SessionSettings{}
		if got, _ := db.GetTenant(ctx, created.ID); !tenantsEqual(got, want) || got.Sessions.PermissionDefault != nil {
			t.Errorf("GetTenant after clearing sessions = %+v, want %+v", got, want)
		}
		var isNull bool
		if err := db.queryRow(ctx, db.r, `SELECT permission_default IS NULL FROM tenants WHERE id = ?`, created.ID).Scan(&isNull); err != nil || !isNull {
			t.Errorf("permission_default IS NULL = %v, %v; want true", isNull, err)
		}

		// The callback's error is returned as is, and nothing is written.
		boom := errors.New("boom")
		_, err = db.UpdateTenant(ctx, created.ID, func(t *gateway.Tenant) error {
			t.Name = "never stored"
			return boom
		})
		if err != boom {
			t.Fatalf("UpdateTenant error = %v, want the callback's", err)
		}
		if got, _ := db.GetTenant(ctx, created.ID); got.Name != "Acme Corp" {
			t.Errorf("a failed update was written: name %q", got.Name)
		}

		_, err = db.UpdateTenant(ctx, "ten_missing", func(*gateway.Tenant) error {
			t.Error("update called for a missing tenant")
			return nil
		})
		wantCode(t, err, gateway.CodeNotFound)
	})
}

func TestEnsureTenant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		sessions := gateway.SessionSettings{
			RetentionDays:     3,
			PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionAllow, TimeoutSeconds: 60},
		}
		first, err := db.EnsureTenant(ctx, gateway.Tenant{ID: gateway.DefaultTenantID, Name: "Default", Sessions: sessions})
		if err != nil {
			t.Fatalf("EnsureTenant: %v", err)
		}
		if first.ID != gateway.DefaultTenantID || first.Name != "Default" || first.CreatedAt.IsZero() ||
			!sessionSettingsEqual(first.Sessions, sessions) {
			t.Fatalf("EnsureTenant = %+v", first)
		}
		// An existing tenant is returned as stored, not overwritten.
		db.now = func() time.Time { return first.CreatedAt.Add(time.Hour) }
		again, err := db.EnsureTenant(ctx, gateway.Tenant{ID: gateway.DefaultTenantID, Name: "Other"})
		if err != nil {
			t.Fatalf("EnsureTenant again: %v", err)
		}
		if !tenantsEqual(again, first) {
			t.Fatalf("EnsureTenant again = %+v, want %+v", again, first)
		}
		_, err = db.EnsureTenant(ctx, gateway.Tenant{Name: "no id"})
		wantCode(t, err, gateway.CodeInvalidArgument)
	})
}

func TestListTenantsPagination(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		// Several tenants share a creation time, so that the ID breaks ties.
		base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		for i := range 7 {
			db.now = func() time.Time { return base.Add(time.Duration(i/3) * time.Millisecond) }
			mustTenant(t, db, fmt.Sprintf("ten_%02d", 7-i)) // IDs in reverse of creation
		}
		// Oldest first; within a creation time, IDs ascend. Pages of 2 cut
		// through the ties.
		want := []string{"ten_05", "ten_06", "ten_07", "ten_02", "ten_03", "ten_04", "ten_01"}

		var got []string
		cursor, pages := "", 0
		for {
			page, err := db.ListTenants(ctx, cursor, 2)
			if err != nil {
				t.Fatalf("ListTenants: %v", err)
			}
			pages++
			if len(page.Items) != 2 && page.NextCursor != "" {
				t.Fatalf("page %d has %d items and a next page, limit 2", pages, len(page.Items))
			}
			for _, ten := range page.Items {
				got = append(got, ten.ID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || pages != 4 {
			t.Fatalf("walked %v in %d pages, want %v in 4", got, pages, want)
		}

		all, err := db.ListTenants(ctx, "", 0) // default limit
		if err != nil || len(all.Items) != 7 || all.NextCursor != "" {
			t.Fatalf("ListTenants default limit = %d items, cursor %q, %v", len(all.Items), all.NextCursor, err)
		}
		_, err = db.ListTenants(ctx, "not-a-cursor", 3)
		wantCode(t, err, gateway.CodeInvalidArgument)
	})
}

func TestListTenantsEmpty(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		page, err := db.ListTenants(testContext(t), "", 10)
		if err != nil || page.Items == nil || len(page.Items) != 0 || page.NextCursor != "" {
			t.Fatalf("ListTenants = %+v, %v; want an empty non-nil page", page, err)
		}
	})
}

func tenantsEqual(a, b gateway.Tenant) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Isolated == b.Isolated && a.Quotas == b.Quotas &&
		sessionSettingsEqual(a.Sessions, b.Sessions) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

func sessionSettingsEqual(a, b gateway.SessionSettings) bool {
	if a.RetentionDays != b.RetentionDays || (a.PermissionDefault == nil) != (b.PermissionDefault == nil) {
		return false
	}
	return a.PermissionDefault == nil || *a.PermissionDefault == *b.PermissionDefault
}

// withTimes returns t with the ID and timestamps of stored.
func withTimes(t, stored gateway.Tenant) gateway.Tenant {
	t.ID, t.CreatedAt, t.UpdatedAt = stored.ID, stored.CreatedAt, stored.UpdatedAt
	return t
}
