package store

import (
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestPreviewsCreateResolveListRevoke(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		twoTenants(t, db)

		p, token, err := db.CreatePreview(ctx, "acme", "vm_a", 8080, time.Minute, 2)
		if err != nil || !strings.HasPrefix(token, gateway.PreviewTokenPrefix) || len(token) < 50 || p.Port != 8080 {
			t.Fatalf("CreatePreview: %+v %q %v", p, token, err)
		}
		if d := p.ExpiresAt.Sub(p.CreatedAt); d != time.Minute {
			t.Errorf("ExpiresAt - CreatedAt = %v, want 1m", d)
		}
		got, err := db.PreviewByToken(ctx, token)
		if err != nil || got.ID != p.ID || got.VMID != "vm_a" || got.TenantID != "acme" || !got.ExpiresAt.Equal(p.ExpiresAt) {
			t.Fatalf("PreviewByToken: %+v %v", got, err)
		}
		if _, err := db.PreviewByToken(ctx, token+"x"); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("PreviewByToken(unknown): %v", err)
		}
		if _, _, err := db.CreatePreview(ctx, "globex", "vm_a", 8080, time.Minute, 2); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("CreatePreview on another tenant's VM: %v", err)
		}
		// One that expired at once does not count towards the bound.
		if _, _, err := db.CreatePreview(ctx, "acme", "vm_a", 3000, 0, 2); err != nil {
			t.Fatalf("CreatePreview(expired): %v", err)
		}
		q, _, err := db.CreatePreview(ctx, "acme", "vm_a", 3000, time.Hour, 2)
		if err != nil {
			t.Fatalf("CreatePreview(second live): %v", err)
		}
		_, _, err = db.CreatePreview(ctx, "acme", "vm_a", 3001, time.Hour, 2)
		if gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
			t.Fatalf("CreatePreview over the bound: %v", err)
		}
		list, err := db.ListPreviews(ctx, "acme", "vm_a", time.Now())
		if err != nil || len(list) != 2 || list[0].ID != p.ID || list[1].ID != q.ID {
			t.Fatalf("ListPreviews: %+v %v", list, err)
		}
		if list, err := db.ListPreviews(ctx, "globex", "vm_a", time.Now()); err != nil || len(list) != 0 {
			t.Errorf("ListPreviews as another tenant: %+v %v", list, err)
		}
		if err := db.DeletePreview(ctx, "globex", "vm_a", p.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("DeletePreview as another tenant: %v", err)
		}
		if err := db.DeletePreview(ctx, "acme", "vm_a", p.ID); err != nil {
			t.Fatalf("DeletePreview: %v", err)
		}
		if _, err := db.PreviewByToken(ctx, token); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("PreviewByToken after revoke: %v", err)
		}
		if n, err := db.DeleteVMPreviews(ctx, "vm_a"); err != nil || n != 1 {
			t.Errorf("DeleteVMPreviews = %d, %v; want 1", n, err)
		}
	})
}
