package metering

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// fakeVM is a VM the meter keeps figures by.
type fakeVM struct{ id string }

func (v *fakeVM) ID() string                { return v.id }
func (v *fakeVM) Tenant() string            { return "ten_a" }
func (v *fakeVM) Sidecar() *agentos.Sidecar { return nil }
func (v *fakeVM) State() (gateway.VMState, bool) {
	return gateway.VMReady, false
}
func (v *fakeVM) Resources(context.Context) (protocol.ResourceSnapshotResponse, error) {
	return protocol.ResourceSnapshotResponse{}, nil
}

// Readers of one VM share one collection at a time, and its figures for
// TTL; a failed collection is not kept.
func TestUsageCacheCollectsOncePerVM(t *testing.T) {
	var u Meter
	lv := &fakeVM{id: "vm_1"}
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	var calls atomic.Int32
	release := make(chan struct{})
	collect := func(ctx context.Context) (Usage, error) {
		n := calls.Add(1)
		<-release
		return Usage{VMID: "vm_1", CollectedAt: clock(), Engine: &EngineCounts{RunningProcesses: uint64(n)}}, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make([]Usage, 16)
	for i := range got {
		wg.Go(func() {
			u, err := u.get(ctx, lv, clock, collect)
			if err != nil {
				t.Error(err)
			}
			got[i] = u
		})
	}
	// Let every reader reach the cache before the one collection ends.
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d collections for 16 concurrent readers, want 1", n)
	}
	for i, g := range got {
		if g.Engine == nil || g.Engine.RunningProcesses != 1 {
			t.Fatalf("reader %d got %+v", i, g)
		}
	}

	advance(TTL - time.Millisecond)
	if _, err := u.get(ctx, lv, clock, collect); err != nil || calls.Load() != 1 {
		t.Fatalf("within the TTL: %d collections, %v", calls.Load(), err)
	}
	advance(time.Millisecond)
	if g, err := u.get(ctx, lv, clock, collect); err != nil || calls.Load() != 2 || g.Engine.RunningProcesses != 2 {
		t.Fatalf("past the TTL: %d collections, %+v, %v", calls.Load(), g, err)
	}

	// A failure is the caller's, and the next reader collects again.
	advance(TTL)
	boom := errors.New("boom")
	fail := func(ctx context.Context) (Usage, error) { calls.Add(1); return Usage{}, boom }
	if _, err := u.get(ctx, lv, clock, fail); !errors.Is(err, boom) {
		t.Fatalf("failed collection: %v", err)
	}
	if _, err := u.get(ctx, lv, clock, fail); !errors.Is(err, boom) || calls.Load() != 4 {
		t.Fatalf("after a failure: %d collections, %v", calls.Load(), err)
	}
}

// A reader waiting for another's collection gives up with its context.
func TestUsageWaiterLeavesWithItsContext(t *testing.T) {
	var u Meter
	lv := &fakeVM{id: "vm_1"}
	release := make(chan struct{})
	started := make(chan struct{})
	collect := func(ctx context.Context) (Usage, error) {
		close(started)
		<-release
		return Usage{}, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = u.get(context.Background(), lv, time.Now, collect)
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := u.get(ctx, lv, time.Now, func(context.Context) (Usage, error) {
		t.Error("a second collection ran while one was in flight")
		return Usage{}, nil
	})
	if gateway.ErrorCode(err) != gateway.CodeDeadlineExceeded {
		t.Fatalf("waiter's error: %v", err)
	}
	close(release)
	<-done
}

// CPU time counts over the stretches where the VM had its sidecar to itself
// at both ends.
func TestVMUsageAccountsOwnStretches(t *testing.T) {
	var st vmUsage
	steps := []struct {
		cpu     time.Duration
		own     bool
		want    time.Duration
		counted bool
	}{
		{cpu: 10 * time.Second, own: true},                                       // the baseline as it goes live
		{cpu: 12 * time.Second, own: true, want: 2 * time.Second, counted: true}, // had it to itself
		{cpu: 15 * time.Second, own: false, want: 2 * time.Second, counted: true},
		{cpu: 20 * time.Second, own: true, want: 2 * time.Second, counted: true}, // shared at the start
		{cpu: 21 * time.Second, own: true, want: 3 * time.Second, counted: true},
		{cpu: 1 * time.Second, own: true, want: 3 * time.Second, counted: true}, // a misread never subtracts
	}
	for i, s := range steps {
		st.account(s.cpu, s.own)
		if st.cpu != s.want || st.counted != s.counted {
			t.Fatalf("step %d: cpu %v counted %v, want %v %v", i, st.cpu, st.counted, s.want, s.counted)
		}
	}
	var shared vmUsage
	shared.account(time.Second, false)
	shared.account(2*time.Second, false)
	if shared.counted {
		t.Fatal("a VM that never had its sidecar counted CPU time")
	}
}

// The snapshot's resources are read by name; the filesystem's stay unknown
// until the engine counted them.
func TestEngineCountsFromSnapshot(t *testing.T) {
	snap := protocol.ResourceSnapshotResponse{
		RunningProcesses: 2, ExitedProcesses: 1, OpenFds: 7, Pipes: 1, Ptys: 1, Sockets: 3, SocketConnections: 1,
		QueueSnapshots: []protocol.QueueSnapshotEntry{
			{Name: "vm_processes", Category: "resource", Depth: 2, Capacity: 256},
			{Name: "vm_open_fds", Category: "resource", Depth: 7, Capacity: 256},
			{Name: "vm_filesystem_bytes", Category: "resource", Depth: 5428197, HighWater: 5428197, Capacity: 64 << 20},
			{Name: "vm_inodes", Category: "resource", Depth: 0, HighWater: 0, Capacity: 16384},
			{Name: "vm_pipes", Category: "queue", Depth: 9, Capacity: 9},
		},
	}
	c := engineCounts(snap)
	if c.RunningProcesses != 2 || c.ExitedProcesses != 1 || c.OpenFDs != 7 || c.Sockets != 3 || c.SocketConnections != 1 ||
		c.ProcessLimit != 256 || c.OpenFDLimit != 256 || c.FilesystemBytesLimit != 64<<20 || c.InodeLimit != 16384 {
		t.Fatalf("counts %+v", c)
	}
	if c.PipeLimit != 0 || c.PTYLimit != 0 {
		t.Fatalf("limits of entries that are not resources, or absent: %+v", c)
	}
	if fs := counted(snap, "vm_filesystem_bytes"); fs == nil || *fs != 5428197 {
		t.Fatalf("filesystem bytes %v", fs)
	}
	if n := counted(snap, "vm_inodes"); n != nil {
		t.Fatalf("inodes not counted yet: %v", *n)
	}
	if n := counted(snap, "vm_nothing"); n != nil {
		t.Fatalf("an absent resource: %v", *n)
	}
	// A level back at 0 after a count is a count.
	snap.QueueSnapshots[2].Depth = 0
	if fs := counted(snap, "vm_filesystem_bytes"); fs == nil || *fs != 0 {
		t.Fatalf("filesystem bytes after a count: %v", fs)
	}
}

// The first MaxTenants tenants keep labels of their own; the others
// share OtherTenants, and a tenant named like it gets no label of its own.
func TestUsageTenantLabelsAreBounded(t *testing.T) {
	var u Meter
	if l := u.labelLocked(OtherTenants); l != OtherTenants {
		t.Fatalf("label of %q: %q", OtherTenants, l)
	}
	for i := range MaxTenants {
		id := fmt.Sprintf("ten_%02d", i)
		if l := u.labelLocked(id); l != id {
			t.Fatalf("label of %s: %s", id, l)
		}
	}
	if l := u.labelLocked("ten_late"); l != OtherTenants {
		t.Fatalf("label past the cap: %s", l)
	}
	if l := u.labelLocked("ten_00"); l != "ten_00" {
		t.Fatalf("a labelled tenant lost its label: %s", l)
	}
	if len(u.labels) != MaxTenants {
		t.Fatalf("%d labels", len(u.labels))
	}
}

// A metrics pass sums by tenant: memory and CPU time of the sidecars one
// tenant has alone, CPU only between passes that both saw it so.
func TestUsageTally(t *testing.T) {
	var u Meter
	a1, a2, mixed := &agentos.Sidecar{}, &agentos.Sidecar{}, &agentos.Sidecar{}
	fs := uint64(100)
	vm := func(tenant string, procs uint64) tallyVM {
		return tallyVM{tenant: tenant, usage: &Usage{FilesystemBytes: &fs, Engine: &EngineCounts{RunningProcesses: procs}}}
	}
	tenantOf := map[*agentos.Sidecar]string{a1: "ten_a", a2: "ten_a", mixed: ""}
	u.tallyLocked([]tallyVM{vm("ten_a", 1), vm("ten_a", 2), vm("ten_b", 5), {tenant: "ten_b"}}, tenantOf,
		map[*agentos.Sidecar]agentos.ProcessUsage{a1: {RSS: 10, CPU: time.Second}, a2: {RSS: 20, CPU: 5 * time.Second}, mixed: {RSS: 1000, CPU: time.Hour}})
	want := []TenantUsage{
		{Tenant: "ten_a", VMs: 2, MemoryBytes: 30, FilesystemBytes: 200, Processes: 3},
		{Tenant: "ten_b", VMs: 2, FilesystemBytes: 100, Processes: 5},
	}
	if fmt.Sprint(u.tenants) != fmt.Sprint(want) {
		t.Fatalf("first pass %+v, want %+v", u.tenants, want)
	}
	// a2 now runs ten_b's VM too: its CPU counts for nobody; a1's counts.
	tenantOf = map[*agentos.Sidecar]string{a1: "ten_a", a2: ""}
	u.tallyLocked([]tallyVM{vm("ten_a", 1), vm("ten_b", 0)}, tenantOf,
		map[*agentos.Sidecar]agentos.ProcessUsage{a1: {RSS: 11, CPU: 3 * time.Second}, a2: {RSS: 25, CPU: 9 * time.Second}})
	want = []TenantUsage{
		{Tenant: "ten_a", VMs: 1, MemoryBytes: 11, CPU: 2 * time.Second, FilesystemBytes: 100, Processes: 1},
		{Tenant: "ten_b", VMs: 1, FilesystemBytes: 100},
	}
	if fmt.Sprint(u.tenants) != fmt.Sprint(want) {
		t.Fatalf("second pass %+v, want %+v", u.tenants, want)
	}
	// ten_a's VMs are gone: its row stays, with its counter.
	u.tallyLocked(nil, nil, nil)
	want = []TenantUsage{{Tenant: "ten_a", CPU: 2 * time.Second}, {Tenant: "ten_b"}}
	if fmt.Sprint(u.tenants) != fmt.Sprint(want) || len(u.sidecars) != 0 {
		t.Fatalf("third pass %+v, want %+v; sidecars %v", u.tenants, want, u.sidecars)
	}
}
