package vms_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/sidecarpool"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type poolAdapter struct{ p *sidecarpool.Pool }

func (a poolAdapter) Acquire(ctx context.Context, tenantID string, isolated bool) (vms.Lease, error) {
	l, err := a.p.Acquire(ctx, tenantID, isolated)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// TestShutdownWithExpiredContext: a shutdown whose time is up still waits
// for everything it started (the disposals fail fast on the expired
// context, the VMs' watchers stop), returns the context's error, and leaves
// nothing running once the pool is closed.
func TestShutdownWithExpiredContext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sidecar")
	}
	if _, err := agentos.LocateEngine(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.EnsureTenant(ctx, gateway.Tenant{ID: "t1", Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	pool := sidecarpool.New(sidecarpool.Config{MaxSidecars: 1, VMsPerSidecar: 4})
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := pool.Close(cctx); err != nil {
			t.Error(err)
		}
	}()
	svc := vms.New(vms.Config{DataDir: t.TempDir()}, db, poolAdapter{pool})
	var ids []string
	for range 2 {
		vm, err := svc.Create(ctx, gateway.Tenant{ID: "t1"}, gateway.VMSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, vm.ID)
	}
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := svc.Shutdown(expired); err == nil {
		t.Fatal("Shutdown with an expired context returned nil")
	}
	for _, id := range ids {
		vm, err := db.GetVM(ctx, "t1", id)
		if err != nil || vm.State != gateway.VMDisposed {
			t.Errorf("vm %s after shutdown: %+v %v", id, vm, err)
		}
	}
}
