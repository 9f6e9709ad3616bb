package vms_test

// Package tests of VM life cycles: quotas, the idle reaper, deletion and
// retention, and a VM lost with its sidecar. The store is the real one
// (SQLite in memory) and the VMs run in a real sidecar; the pool is the
// real pool, or a small fake of the service's own Pool interface where the
// case is a pool that cannot place a VM.

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/sidecarpool"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// env is a service over a real store and pool, stopped at cleanup in the
// gateway's order.
type env struct {
	db   *store.DB
	pool *sidecarpool.Pool
	svc  *vms.Service
}

func newEnv(t *testing.T, cfg vms.Config, tenants ...gateway.Tenant) *env {
	t.Helper()
	return newEnvOver(t, cfg, nil, tenants...)
}

// newEnvOver is newEnv with the service's store wrapped by wrap (nil: the
// store itself), for a store that fails on purpose.
func newEnvOver(t *testing.T, cfg vms.Config, wrap func(*store.DB) vms.Store, tenants ...gateway.Tenant) *env {
	t.Helper()
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
	for _, tn := range tenants {
		if _, err := db.EnsureTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	pool := sidecarpool.New(sidecarpool.Config{MaxSidecars: 2, VMsPerSidecar: 8})
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	var st vms.Store = db
	if wrap != nil {
		st = wrap(db)
	}
	svc := vms.New(cfg, st, vms.PoolOf(pool))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := pool.Close(ctx); err != nil {
			t.Error(err)
		}
		_ = db.Close()
	})
	return &env{db: db, pool: pool, svc: svc}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestVMQuotaUnderConcurrentCreates: creates racing for a tenant's last
// slots admit exactly its quota, and a disposed VM frees its slot.
func TestVMQuotaUnderConcurrentCreates(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1", Quotas: gateway.Quotas{MaxVMs: 3}}
	e := newEnv(t, vms.Config{}, tenant)
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		created atomic.Int64
		mu      sync.Mutex
		ids     []string
	)
	for range 8 {
		wg.Go(func() {
			vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
			switch {
			case err == nil:
				created.Add(1)
				mu.Lock()
				ids = append(ids, vm.ID)
				mu.Unlock()
			case gateway.ErrorCode(err) != gateway.CodeResourceExhausted:
				t.Errorf("Create = %v, want resource_exhausted past the quota", err)
			}
		})
	}
	wg.Wait()
	if created.Load() != 3 {
		t.Fatalf("%d VMs admitted, want the quota of 3", created.Load())
	}
	if _, err := e.svc.Create(ctx, tenant, gateway.VMSpec{}); gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
		t.Fatalf("a fourth create = %v", err)
	}
	if _, _, err := e.svc.Delete(ctx, tenant.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, tenant, gateway.VMSpec{}); err != nil {
		t.Fatalf("a create after a delete = %v", err)
	}
}

// TestProcessQuota: a tenant's running processes are bounded; an exited one
// frees its slot.
func TestProcessQuota(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1", Quotas: gateway.Quotas{MaxProcesses: 1}}
	e := newEnv(t, vms.Config{}, tenant)
	ctx := context.Background()
	vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Spawn(ctx, tenant, vm.ID, vms.SpawnRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Exec(ctx, tenant, vm.ID, vms.ExecRequest{Argv: []string{"true"}}, nil); gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
		t.Fatalf("exec past the process quota = %v", err)
	}
	proc, release, err := e.svc.Process(ctx, tenant.ID, vm.ID, p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := proc.Signal(ctx, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the slot to free", func() bool {
		_, err := e.svc.Exec(ctx, tenant, vm.ID, vms.ExecRequest{Argv: []string{"true"}}, nil)
		return err == nil
	})
}

// TestIdleReaper: a VM with an idle timeout is disposed once nothing uses
// it, and not while a process runs in it.
func TestIdleReaper(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{IdleCheck: 50 * time.Millisecond}, tenant)
	ctx := context.Background()
	// The busy VM gets its process at once, and a timeout long enough for
	// that on a loaded machine; the test then waits past that timeout.
	const busyTimeout = 3 * time.Second
	busy, err := e.svc.Create(ctx, tenant, gateway.VMSpec{IdleTimeoutSeconds: int(busyTimeout / time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Spawn(ctx, tenant, busy.ID, vms.SpawnRequest{Argv: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	spawned := time.Now()
	idle, err := e.svc.Create(ctx, tenant, gateway.VMSpec{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the idle VM to be reaped", func() bool {
		vm, err := e.db.GetVM(ctx, tenant.ID, idle.ID)
		return err == nil && vm.State == gateway.VMDisposed && vm.Reason == "idle timeout"
	})
	if wait := busyTimeout + 500*time.Millisecond - time.Since(spawned); wait > 0 {
		time.Sleep(wait)
	}
	if err := e.svc.Usable(ctx, tenant.ID, busy.ID); err != nil {
		t.Fatalf("the VM running a process was reaped: %v", err)
	}
}

// TestVMLostWithItsSidecar: a VM whose sidecar dies is lost, its record says
// so, its running process answers with an error instead of an exit code,
// and the service forgets it.
func TestVMLostWithItsSidecar(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{}, tenant)
	ctx := context.Background()
	vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Spawn(ctx, tenant, vm.ID, vms.SpawnRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	proc, release, err := e.svc.Process(ctx, tenant.ID, vm.ID, p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var pid int
	for _, sc := range e.pool.Sidecars() {
		if sc.ID == vm.SidecarID {
			pid = sc.Pid
		}
	}
	if pid == 0 {
		t.Fatalf("no sidecar %s", vm.SidecarID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.svc.Ended(vm.ID):
	case <-time.After(30 * time.Second):
		t.Fatal("the VM's end was not recorded")
	}
	rec, err := e.db.GetVM(ctx, tenant.ID, vm.ID)
	if err != nil || rec.State != gateway.VMLost || rec.Reason == "" {
		t.Fatalf("record %+v, %v; want lost with a reason", rec, err)
	}
	if exit, err := proc.Wait(ctx, 30*time.Second); err == nil {
		t.Fatalf("the process of a lost VM exited %+v; want an error", exit)
	}
	if err := e.svc.Usable(ctx, tenant.ID, vm.ID); !errors.Is(err, vms.ErrVMEnded) {
		t.Fatalf("Usable = %v, want ErrVMEnded", err)
	}
}

// TestRetentionPurgesEndedRecords: with a clock past the retention, ended
// records go and live ones stay.
func TestRetentionPurgesEndedRecords(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e := newEnv(t, vms.Config{Retention: time.Hour, PurgeInterval: 20 * time.Millisecond, Now: now}, tenant)
	ctx := context.Background()
	gone, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	live, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Delete(ctx, tenant.ID, gone.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := e.db.GetVM(ctx, tenant.ID, gone.ID); err != nil {
		t.Fatalf("purged before its retention: %v", err)
	}
	offset.Store(int64(2 * time.Hour))
	waitUntil(t, "the ended record to be purged", func() bool {
		_, err := e.db.GetVM(ctx, tenant.ID, gone.ID)
		return gateway.ErrorCode(err) == gateway.CodeNotFound
	})
	if _, err := e.db.GetVM(ctx, tenant.ID, live.ID); err != nil {
		t.Fatalf("the live VM's record went: %v", err)
	}
}

// noPool cannot place any VM.
type noPool struct{ err error }

func (p noPool) Acquire(context.Context, string, bool) (vms.Lease, error) { return nil, p.err }

// TestCreateWhenThePoolIsFull: a create the pool refuses leaves no record
// and takes no quota.
func TestCreateWhenThePoolIsFull(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tenant := gateway.Tenant{ID: "t1", Name: "t1", Quotas: gateway.Quotas{MaxVMs: 1}}
	if _, err := db.EnsureTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	full := gateway.Errorf(gateway.CodeResourceExhausted, "every sidecar is full")
	svc := vms.New(vms.Config{DataDir: t.TempDir()}, db, noPool{full})
	defer func() { _ = svc.Close(ctx) }()
	for range 2 {
		if _, err := svc.Create(ctx, tenant, gateway.VMSpec{}); !errors.Is(err, full) {
			t.Fatalf("Create = %v, want the pool's refusal", err)
		}
	}
	// A failed create leaves no record: the caller never learned its id.
	page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: tenant.ID, States: gateway.AllStates})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("records %+v, %v", page, err)
	}
}
