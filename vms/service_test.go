package vms_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestShutdownWithExpiredContext: a shutdown whose time is up still waits
// for everything it started (the disposals fail fast on the expired
// context, the VMs' watchers stop), returns the context's error, and leaves
// nothing running once the pool is closed.
func TestShutdownWithExpiredContext(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{}, tenant)
	ctx := context.Background()
	var ids []string
	for range 2 {
		vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, vm.ID)
	}
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.svc.Close(expired); err == nil {
		t.Fatal("Close with an expired context returned nil")
	}
	for _, id := range ids {
		vm, err := e.db.GetVM(ctx, "t1", id)
		if err != nil || vm.State != gateway.VMDisposed {
			t.Errorf("vm %s after shutdown: %+v %v", id, vm, err)
		}
	}
}

// refusingStore is the real store, except that it refuses to record a VM
// as ready: a database that fails at the worst moment, which a real one
// cannot be made to do on cue.
type refusingStore struct {
	*store.DB
}

func (s refusingStore) SetVMState(ctx context.Context, id string, to gateway.VMState, reason, sidecarID string) (gateway.VM, error) {
	if to == gateway.VMReady {
		return gateway.VM{}, gateway.Errorf(gateway.CodeInternal, "the disk is full")
	}
	return s.DB.SetVMState(ctx, id, to, reason, sidecarID)
}

// TestCreateFailsWhenReadyCannotBeRecorded: a VM whose ready state the store
// refuses is disposed, the error says why, its record is gone and it no
// longer counts against the tenant's quota.
func TestCreateFailsWhenReadyCannotBeRecorded(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1", Quotas: gateway.Quotas{MaxVMs: 1}}
	e := newEnvOver(t, vms.Config{}, func(db *store.DB) vms.Store { return refusingStore{db} }, tenant)
	ctx := context.Background()
	_, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if gateway.ErrorCode(err) != gateway.CodeUnavailable {
		t.Fatalf("Create = %v, want unavailable", err)
	}
	if !strings.Contains(gateway.ErrorMessage(err), "could not be recorded as ready") {
		t.Fatalf("Create = %v, want the reason", err)
	}
	page, err := e.db.ListVMs(ctx, gateway.VMFilter{TenantID: "t1", States: gateway.AllStates})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("records after a failed create: %+v %v", page, err)
	}
	if n, err := e.db.CountLiveVMs(ctx, "t1"); err != nil || n != 0 {
		t.Fatalf("live VMs counted against the quota: %d %v", n, err)
	}
	for _, sc := range e.pool.Sidecars() {
		if sc.Holds != 0 {
			t.Fatalf("sidecar %s still holds %d leases", sc.ID, sc.Holds)
		}
	}
}

// TestSpawnRacesShutdown spawns processes from several goroutines while
// Close runs: every spawn either ran (and ended with the VM) or was
// refused, and nothing the service started outlives Close and the pool.
func TestSpawnRacesShutdown(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{}, tenant)
	ctx := context.Background()
	vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var spawned, refused atomic.Int64
	for range 4 {
		wg.Go(func() {
			for range 8 {
				_, err := e.svc.Spawn(ctx, tenant, vm.ID, vms.SpawnRequest{Argv: []string{"sleep", "30"}})
				if err != nil {
					refused.Add(1)
					continue
				}
				spawned.Add(1)
			}
		})
	}
	for spawned.Load() < 2 && refused.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := e.svc.Close(sctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := e.pool.Close(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d spawned, %d refused", spawned.Load(), refused.Load())
	// The database is closed at cleanup, after this check.
	goleak.VerifyNone(t, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}
