package warmpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// fakeClock is the pool's Now: it moves only when a test advances it, and
// counts its readings so that a test can wait for the refill loop to have
// looked at it again (the loop reads it at every sweep and every decision).
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// settle waits until the refill loop has read the clock several more times,
// that is, has swept and decided again at least twice since settle was
// called: whatever it was going to do with the clock as it is, it has begun.
func (c *fakeClock) settle(t *testing.T) {
	t.Helper()
	from := c.readCount()
	waitFor(t, "the refill loop to look at the clock again", func() bool { return c.readCount() >= from+6 })
}

// waitFor polls cond until it holds, failing the test after a generous bound
// (nothing here measures speed: the bound only turns a hang into a failure).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// fakeEngine places, creates, warms up and disposes fake VMs, recording all
// of it. It is a fake, not the real engine, because the pool's tests need a
// create that fails, stalls until Close or finishes after it, and a
// sidecar that drains or dies under one given warm VM, each at the moment the
// test chooses, which real sidecars cannot be made to do on demand.
type fakeEngine struct {
	mu sync.Mutex
	// leases and vms are every lease acquired and VM created, in order.
	leases []*fakeLease
	vms    []*fakeVM
	// attempts counts creates begun (placements asked); creating those in
	// progress, and maxCreating the most at once.
	attempts, creating, maxCreating int
	// fail, when set, decides whether attempt n (from 1) fails and where.
	fail func(n int) failure
	// gate, when set, stalls every create from attempt stallFrom on (after
	// its placement) until it is closed (stall, release); honourCtx makes
	// a stalled create give up when its context ends instead. stalled is
	// signalled as each create stalls.
	gate      chan struct{}
	stallFrom int
	honourCtx bool
	stalled   chan struct{}
	// execGate, when set, stalls every warm-up command until its context
	// ends.
	execGate bool
}

// failure is where a create attempt fails.
type failure int

const (
	failNone failure = iota
	failPlace
	failCreate
	failWarmUp
)

var errFake = errors.New("fake engine: refused")

func (e *fakeEngine) Acquire(ctx context.Context, tenantID string, isolated bool) (Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts++
	if e.failure() == failPlace {
		return nil, errFake
	}
	l := &fakeLease{id: fmt.Sprintf("sidecar-%d", len(e.leases)), tenant: tenantID, isolated: isolated}
	e.leases = append(e.leases, l)
	return l, nil
}

// failure returns how the current attempt fails. e.mu must be held.
func (e *fakeEngine) failure() failure {
	if e.fail == nil {
		return failNone
	}
	return e.fail(e.attempts)
}

func (e *fakeEngine) create(ctx context.Context, lease Lease, _ agentos.VMOptions) (*fakeVM, error) {
	e.mu.Lock()
	e.creating++
	e.maxCreating = max(e.maxCreating, e.creating)
	gate, honour, stalled := e.gate, e.honourCtx, e.stalled
	if e.attempts < e.stallFrom {
		gate = nil
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.creating--
		e.mu.Unlock()
	}()
	if gate != nil {
		stalled <- struct{}{}
		if honour {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		} else {
			<-gate
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failure() == failCreate {
		return nil, errFake
	}
	vm := &fakeVM{eng: e, lease: lease.(*fakeLease), state: agentos.VMReady, failWarmUp: e.failure() == failWarmUp}
	e.vms = append(e.vms, vm)
	return vm, nil
}

// stall makes the creates from attempt from on stall until release;
// honourCtx makes them give up when their context ends instead. It returns
// the channel signalled as each create stalls.
func (e *fakeEngine) stall(from int, honourCtx bool) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gate, e.stallFrom, e.honourCtx = make(chan struct{}), from, honourCtx
	e.stalled = make(chan struct{}, 64)
	return e.stalled
}

// step lets one stalled create go on.
func (e *fakeEngine) step() {
	e.mu.Lock()
	gate := e.gate
	e.mu.Unlock()
	gate <- struct{}{}
}

// release lets the stalled creates go on, and those to come.
func (e *fakeEngine) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate != nil {
		close(e.gate)
		e.gate = nil
	}
}

// stallWarmUps makes the warm-up commands from now on stall until their
// context ends.
func (e *fakeEngine) stallWarmUps() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.execGate = true
}

// snapshot returns the VMs created so far and the attempts begun.
func (e *fakeEngine) snapshot() (vms []*fakeVM, attempts, maxCreating int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*fakeVM(nil), e.vms...), e.attempts, e.maxCreating
}

func (e *fakeEngine) attemptCount() int {
	_, n, _ := e.snapshot()
	return n
}

// fakeLease is a hold on a fake sidecar that a test can drain.
type fakeLease struct {
	id       string
	tenant   string
	isolated bool

	mu       sync.Mutex
	draining bool
	released int
	assigned []string
	// foreign are the tenants the sidecar is another tenant's to.
	foreign map[string]bool
}

func (l *fakeLease) Sidecar() *agentos.Sidecar { return nil }
func (l *fakeLease) SidecarID() string         { return l.id }

func (l *fakeLease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released++
}

func (l *fakeLease) Assign(tenantID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.assigned = append(l.assigned, tenantID)
}

func (l *fakeLease) Draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.draining
}

func (l *fakeLease) Foreign(tenantID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.foreign[tenantID]
}

// keepFrom marks the sidecar as another tenant's to tenantID.
func (l *fakeLease) keepFrom(tenantID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.foreign == nil {
		l.foreign = map[string]bool{}
	}
	l.foreign[tenantID] = true
}

func (l *fakeLease) drain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draining = true
}

func (l *fakeLease) counts() (released int, assigned []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released, append([]string(nil), l.assigned...)
}

// fakeVM is a VM on a fake sidecar.
type fakeVM struct {
	eng        *fakeEngine
	lease      *fakeLease
	failWarmUp bool

	mu       sync.Mutex
	state    agentos.VMState
	execs    []string
	disposed int
}

func (v *fakeVM) State() (agentos.VMState, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state, nil
}

func (v *fakeVM) Exec(ctx context.Context, command string, _ agentos.ExecOptions) (*agentos.ExecResult, error) {
	v.eng.mu.Lock()
	stall := v.eng.execGate
	v.eng.mu.Unlock()
	if stall {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.execs = append(v.execs, command)
	if v.failWarmUp {
		return &agentos.ExecResult{ExitCode: 1, Stderr: []byte("fake: no shell")}, nil
	}
	return &agentos.ExecResult{}, nil
}

func (v *fakeVM) Dispose(context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.disposed++
	v.state = agentos.VMDisposed
	return nil
}

// lose makes the VM's sidecar die under it.
func (v *fakeVM) lose() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.state = agentos.VMLost
}

func (v *fakeVM) disposals() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.disposed
}

func (v *fakeVM) warmedUp() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.execs...)
}

// newTestPool starts a pool over eng. When the test ends it shuts the pool
// down and checks what every pool must leave behind: no goroutine, every VM
// it created either handed out (and then neither disposed nor released by
// it) or disposed and released exactly once, and every lease of a failed
// create released. taken must hold every VM the test took.
func newTestPool(t *testing.T, cfg Config, eng *fakeEngine, taken func() []*fakeVM) *Pool[*fakeVM] {
	t.Helper()
	p := newPool(cfg, eng, eng.create)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A create stalled on the gate must not hold Close up forever.
		eng.release()
		if err := p.Close(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		checkAccounts(t, eng, taken())
		goleak.VerifyNone(t)
	})
	return p
}

// checkAccounts checks that the pool disposed and released exactly what it
// still owned: everything but the taken VMs.
func checkAccounts(t *testing.T, eng *fakeEngine, taken []*fakeVM) {
	t.Helper()
	isTaken := map[*fakeVM]bool{}
	for _, vm := range taken {
		isTaken[vm] = true
	}
	eng.mu.Lock()
	leases := append([]*fakeLease(nil), eng.leases...)
	vms := append([]*fakeVM(nil), eng.vms...)
	eng.mu.Unlock()
	withVM := map[*fakeLease]bool{}
	for _, vm := range vms {
		withVM[vm.lease] = true
		released, _ := vm.lease.counts()
		want := 1
		if isTaken[vm] {
			want = 0
		}
		if d := vm.disposals(); d != want || released != want {
			t.Errorf("VM on %s (taken %v): disposed %d times, lease released %d times; want %d", vm.lease.id, isTaken[vm], d, released, want)
		}
	}
	for _, l := range leases {
		if released, _ := l.counts(); !withVM[l] && released != 1 {
			t.Errorf("lease %s of a failed create released %d times, want once", l.id, released)
		}
	}
}

// takeList collects the VMs a test took.
type takeList struct {
	mu  sync.Mutex
	vms []*fakeVM
}

func (l *takeList) add(vm *fakeVM) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.vms = append(l.vms, vm)
}

func (l *takeList) all() []*fakeVM {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*fakeVM(nil), l.vms...)
}

// waitReady waits until the pool holds n warm VMs and creates nothing more.
func waitReady(t *testing.T, p *Pool[*fakeVM], eng *fakeEngine, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d warm VMs", n), func() bool {
		eng.mu.Lock()
		idle := eng.creating == 0
		eng.mu.Unlock()
		return idle && p.Stats().Ready == n
	})
}
