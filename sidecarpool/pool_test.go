package sidecarpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: every pool a
// test creates is closed by its cleanup, and Close waits for all of them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requireEngine fails (not skips) without the engine: `make setup` installs it.
func requireEngine(t testing.TB) agentos.Engine {
	t.Helper()
	e, err := agentos.LocateEngine()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return e
}

// newPool returns a pool closed when the test ends; the close must succeed.
func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	requireEngine(t)
	p := New(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return p
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it returns nil, failing with its last error.
func eventually(t *testing.T, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sidecarAlive reports whether pid is still a live agentos-sidecar. A pid the
// kernel already gave to an unrelated program does not count.
func sidecarAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
		return true // a zombie is a child nobody reaped: a leak all the same
	}
	cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Contains(string(cmd), "agentos-sidecar")
}

func findInfo(infos []SidecarInfo, id string) (SidecarInfo, bool) {
	for _, in := range infos {
		if in.ID == id {
			return in, true
		}
	}
	return SidecarInfo{}, false
}

func ids(infos []SidecarInfo) []string {
	var out []string
	for _, in := range infos {
		out = append(out, in.ID)
	}
	return out
}

// describe renders the pool for failure messages.
func describe(infos []SidecarInfo) string {
	var b strings.Builder
	for _, in := range infos {
		fmt.Fprintf(&b, "[%s %s holds=%d owner=%q tenants=%v] ", in.ID, in.State, in.Holds, in.Owner, in.Tenants)
	}
	return b.String()
}

func wantCode(t *testing.T, err error, code gateway.Code) {
	t.Helper()
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Code != code {
		t.Fatalf("err = %v, want a *gateway.Error with code %s", err, code)
	}
}

// step is one line of a placement script: acquire a named lease (and expect
// the sidecar it lands on, or an error code), or release one.
type step struct {
	op       string // "acquire", "release"
	lease    string
	tenant   string
	isolated bool
	want     string       // acquire: the expected sidecar id
	wantErr  gateway.Code // acquire: the expected error code instead
	holds    map[string]int
}

// runScript plays steps against p; after each step with holds set, the
// sidecars' holds must equal it exactly.
func runScript(t *testing.T, p *Pool, steps []step) map[string]*Lease {
	t.Helper()
	leases := map[string]*Lease{}
	for i, s := range steps {
		switch s.op {
		case "acquire":
			l, err := p.Acquire(testContext(t, 30*time.Second), s.tenant, s.isolated)
			if s.wantErr != "" {
				if err == nil {
					t.Fatalf("step %d (%s): got lease on %s, want %s", i, s.lease, l.SidecarID(), s.wantErr)
				}
				wantCode(t, err, s.wantErr)
				break
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, s.lease, err)
			}
			if l.SidecarID() != s.want {
				t.Fatalf("step %d (%s): placed on %s, want %s; pool: %s", i, s.lease, l.SidecarID(), s.want, describe(p.Sidecars()))
			}
			leases[s.lease] = l
		case "release":
			leases[s.lease].Release()
		}
		if s.holds != nil {
			got := map[string]int{}
			for _, in := range p.Sidecars() {
				got[in.ID] = in.Holds
			}
			if fmt.Sprint(got) != fmt.Sprint(s.holds) {
				t.Fatalf("step %d: holds %v, want %v", i, got, s.holds)
			}
		}
	}
	t.Cleanup(func() {
		for _, l := range leases {
			l.Release()
		}
	})
	return leases
}

// TestPlacement checks, on real sidecars, each placement rule: pack fills a
// sidecar before it uses another, spread takes the least-loaded one; under
// both a new sidecar is spawned only when none has room, MaxSidecars is a
// hard cap, and Release is exactly-once.
func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		placement Placement
		// after frees one hold on each sidecar (sc-1 at 1, sc-2 at 0), then
		// acquires twice.
		after []step
	}{
		{PlacementPack, []step{
			{op: "acquire", lease: "g", tenant: "t3", want: "sc-1"}, // the fuller one
			{op: "acquire", lease: "h", tenant: "t3", want: "sc-2", holds: map[string]int{"sc-1": 2, "sc-2": 1}},
		}},
		{PlacementSpread, []step{
			{op: "acquire", lease: "g", tenant: "t3", want: "sc-2"},                                              // 0 holds beats 1
			{op: "acquire", lease: "h", tenant: "t3", want: "sc-1", holds: map[string]int{"sc-1": 2, "sc-2": 1}}, // tie: the older one
		}},
	} {
		t.Run(string(tc.placement), func(t *testing.T) {
			p := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 2, Placement: tc.placement})
			runScript(t, p, append([]step{
				{op: "acquire", lease: "a", tenant: "t1", want: "sc-1"},
				{op: "acquire", lease: "b", tenant: "t2", want: "sc-1"}, // room left: no spawn
				{op: "acquire", lease: "c", tenant: "t1", want: "sc-2"}, // sc-1 full: spawn
				{op: "acquire", lease: "d", tenant: "t1", want: "sc-2", holds: map[string]int{"sc-1": 2, "sc-2": 2}},
				{op: "acquire", lease: "e", tenant: "t1", wantErr: gateway.CodeResourceExhausted},
				{op: "release", lease: "a", holds: map[string]int{"sc-1": 1, "sc-2": 2}},
				{op: "release", lease: "a", holds: map[string]int{"sc-1": 1, "sc-2": 2}}, // second Release is a no-op
				{op: "acquire", lease: "f", tenant: "t3", want: "sc-1"},
				{op: "release", lease: "c"},
				{op: "release", lease: "d"},
				{op: "release", lease: "b", holds: map[string]int{"sc-1": 1, "sc-2": 0}},
			}, tc.after...))
			if st := p.Stats(); st.Spawned != 2 || st.Live != 2 || st.SpawnFailures != 0 {
				t.Fatalf("stats %+v, want 2 spawned and live, no failures", st)
			}
			if !p.Ready() {
				t.Fatal("Ready() = false after a sidecar started")
			}
		})
	}
}

// TestLeaseAssign checks that a hold taken for no tenant, as a warm VM's is,
// is listed under no tenant until it is assigned, then under that tenant
// only, and that the sidecar reports draining once it is over the
// high-water mark.
func TestLeaseAssign(t *testing.T) {
	p := newPool(t, Config{MaxSidecars: 1, VMsPerSidecar: 2, MemoryHighWater: 1, IdleTimeout: time.Hour})
	ctx := testContext(t, time.Minute)
	l, err := p.Acquire(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	tenants := func() []string { return p.Sidecars()[0].Tenants }
	if got := tenants(); len(got) != 0 || l.Draining() {
		t.Fatalf("tenants %v, draining %v; want none and a ready sidecar", got, l.Draining())
	}
	l.Assign("t1")
	if got := tenants(); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("tenants %v after Assign, want [t1]", got)
	}
	// The sidecar served and is over 1 byte: the next Acquire drains it,
	// and with MaxSidecars 1 finds no room.
	_, err = p.Acquire(ctx, "t2", false)
	wantCode(t, err, gateway.CodeResourceExhausted)
	if !l.Draining() {
		t.Fatalf("lease on %s does not report draining; pool %s", l.SidecarID(), describe(p.Sidecars()))
	}
}

// TestLeasesHostRealVMs creates real VMs through leases on two sidecars and
// runs echo hi in each.
func TestLeasesHostRealVMs(t *testing.T) {
	p := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 2})
	ctx := testContext(t, 2*time.Minute)
	wantIDs := []string{"sc-1", "sc-1", "sc-2"}
	for i, want := range wantIDs {
		l, err := p.Acquire(ctx, "t1", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Release)
		if l.SidecarID() != want {
			t.Fatalf("lease %d on %s, want %s", i, l.SidecarID(), want)
		}
		start := time.Now()
		vm, err := l.Sidecar().CreateVM(ctx, agentos.VMOptions{})
		if err != nil {
			t.Fatalf("create vm on %s: %v\n%s", l.SidecarID(), err, l.Sidecar().Stderr())
		}
		created := time.Since(start)
		t.Cleanup(func() {
			if err := vm.Dispose(testContext(t, 30*time.Second)); err != nil {
				t.Errorf("dispose: %v", err)
			}
		})
		res, err := vm.Exec(ctx, "echo hi", agentos.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != "hi\n" || res.ExitCode != 0 {
			t.Fatalf("echo hi on %s: stdout %q, exit %d", l.SidecarID(), res.Stdout, res.ExitCode)
		}
		if vm.Sidecar() != l.Sidecar() {
			t.Fatal("the VM is not on the leased sidecar")
		}
		t.Logf("%s: vm created in %v", l.SidecarID(), created.Round(time.Millisecond))
	}
	for _, in := range p.Sidecars() {
		if in.State != StateReady || in.Pid == 0 || in.RSS == 0 || in.StartedAt.IsZero() {
			t.Fatalf("info %+v: want a ready sidecar with pid, RSS and start time", in)
		}
	}
}

// TestIsolatedTenants checks that isolated tenants only ever land on sidecars
// spawned for them, that shared tenants never land there, and that isolated
// sidecars count toward MaxSidecars.
func TestIsolatedTenants(t *testing.T) {
	p := newPool(t, Config{MaxSidecars: 3, VMsPerSidecar: 2})
	runScript(t, p, []step{
		{op: "acquire", lease: "s1", tenant: "a", want: "sc-1"},
		{op: "acquire", lease: "i1", tenant: "iso", isolated: true, want: "sc-2"}, // sc-1 has room but is shared
		{op: "acquire", lease: "s2", tenant: "b", want: "sc-1"},                   // sc-2 has room but is iso's
		{op: "acquire", lease: "i2", tenant: "iso", isolated: true, want: "sc-2"},
		{op: "acquire", lease: "i3", tenant: "iso", isolated: true, want: "sc-3"},
		{op: "acquire", lease: "x", tenant: "iso2", isolated: true, wantErr: gateway.CodeResourceExhausted},
		{op: "acquire", lease: "s3", tenant: "c", wantErr: gateway.CodeResourceExhausted}, // sc-3 has room but is iso's
		{op: "release", lease: "i3", holds: map[string]int{"sc-1": 2, "sc-2": 2, "sc-3": 0}},
		{op: "acquire", lease: "s4", tenant: "c", wantErr: gateway.CodeResourceExhausted}, // idle, but still iso's
		{op: "acquire", lease: "i4", tenant: "a", isolated: true, wantErr: gateway.CodeResourceExhausted},
	})
	infos := p.Sidecars()
	want := []SidecarInfo{
		{ID: "sc-1", Tenants: []string{"a", "b"}, Holds: 2},
		{ID: "sc-2", Tenants: []string{"iso"}, Holds: 2, Isolated: true, Owner: "iso"},
		{ID: "sc-3", Tenants: []string{}, Isolated: true, Owner: "iso"},
	}
	if len(infos) != len(want) {
		t.Fatalf("sidecars %s, want 3", describe(infos))
	}
	for i, w := range want {
		g := infos[i]
		if g.ID != w.ID || !slices.Equal(g.Tenants, w.Tenants) || g.Holds != w.Holds || g.Isolated != w.Isolated || g.Owner != w.Owner {
			t.Fatalf("sidecar %d = %+v, want %+v", i, g, w)
		}
	}
	_, err := p.Acquire(testContext(t, time.Second), "", true)
	wantCode(t, err, gateway.CodeInvalidArgument)
}

// TestTenantAffinity checks, on real sidecars, that with TenantAffinity a
// tenant's VM goes to a sidecar holding no other tenant's while one can be
// started, shares one only once MaxSidecars run (counted), and that warm
// holds (no tenant) count for nobody until assigned.
func TestTenantAffinity(t *testing.T) {
	p := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 3, TenantAffinity: true})
	leases := runScript(t, p, []step{
		{op: "acquire", lease: "a1", tenant: "a", want: "sc-1"},
		{op: "acquire", lease: "a2", tenant: "a", want: "sc-1"}, // its own: packed
		{op: "acquire", lease: "b1", tenant: "b", want: "sc-2"}, // sc-1 has room but is a's: spawn
		{op: "acquire", lease: "w1", tenant: "", want: "sc-1"},  // a warm hold goes where pack says
		{op: "acquire", lease: "b2", tenant: "b", want: "sc-2"},
		{op: "acquire", lease: "c1", tenant: "c", want: "sc-2", holds: map[string]int{"sc-1": 3, "sc-2": 3}}, // no spawn left: shares
		{op: "release", lease: "a1"},
		{op: "release", lease: "a2"},
	})
	if st := p.Stats(); st.SharedPlacements != 1 {
		t.Fatalf("stats %+v: want 1 shared placement", st)
	}
	// sc-1 holds only the warm hold: it is nobody's, so b may have it.
	w := leases["w1"]
	if w.Foreign("b") {
		t.Fatalf("a warm hold alone makes sc-1 foreign to b; pool %s", describe(p.Sidecars()))
	}
	w.Assign("a")
	if !w.Foreign("b") || w.Foreign("a") {
		t.Fatalf("sc-1 holds a's VM: Foreign(b) = %v, Foreign(a) = %v", w.Foreign("b"), w.Foreign("a"))
	}
	runScript(t, p, []step{
		{op: "acquire", lease: "a3", tenant: "a", want: "sc-1"},
		{op: "acquire", lease: "d1", tenant: "d", want: "sc-1"}, // the only room left, a's: shared
	})
	if st := p.Stats(); st.SharedPlacements != 2 {
		t.Fatalf("stats %+v: want 2 shared placements", st)
	}
	off := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 3})
	offLeases := runScript(t, off, []step{
		{op: "acquire", lease: "a1", tenant: "a", want: "sc-1"},
		{op: "acquire", lease: "b1", tenant: "b", want: "sc-1"}, // without affinity tenants share
	})
	if offLeases["a1"].Foreign("b") {
		t.Fatal("Foreign is true without TenantAffinity")
	}
}

// TestConcurrentAcquireNeverOvershoots starts 20 Acquires at once against
// MaxSidecars=2, VMsPerSidecar=3: exactly 6 get a lease, 3 per sidecar, and
// only 2 processes are ever spawned. Start is wrapped only to count calls.
func TestConcurrentAcquireNeverOvershoots(t *testing.T) {
	var starts atomic.Int32
	p := newPool(t, Config{
		MaxSidecars:   2,
		VMsPerSidecar: 3,
		Start: func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error) {
			starts.Add(1)
			return agentos.Start(ctx, o)
		},
	})
	const n = 20
	var (
		wg        sync.WaitGroup
		gate      = make(chan struct{})
		leases    = make([]*Lease, n)
		errs      = make([]error, n)
		ctx       = testContext(t, time.Minute)
		startedAt = time.Now()
	)
	for i := range n {
		wg.Go(func() {
			<-gate
			leases[i], errs[i] = p.Acquire(ctx, "t"+strconv.Itoa(i), false)
		})
	}
	close(gate)
	wg.Wait()
	t.Logf("20 concurrent acquires took %v", time.Since(startedAt).Round(time.Millisecond))

	perSidecar := map[string]int{}
	exhausted := 0
	for i := range n {
		if errs[i] != nil {
			wantCode(t, errs[i], gateway.CodeResourceExhausted)
			exhausted++
			continue
		}
		perSidecar[leases[i].SidecarID()]++
		defer leases[i].Release()
	}
	if exhausted != n-6 || perSidecar["sc-1"] != 3 || perSidecar["sc-2"] != 3 || len(perSidecar) != 2 {
		t.Fatalf("%d exhausted, leases per sidecar %v; want 14 exhausted and 3 on each of sc-1, sc-2", exhausted, perSidecar)
	}
	if got := starts.Load(); got != 2 {
		t.Fatalf("Start called %d times, want 2", got)
	}
	if st := p.Stats(); st.Spawned != 2 || st.Live != 2 {
		t.Fatalf("stats %+v, want 2 spawned and live", st)
	}
}

// fakeClock is a clock the backoff test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestSpawnFailureBacksOff injects spawn failures through Config.Start (the
// real sidecar cannot be made to fail on demand): one case returns an error
// without a process, the other starts a real child that exits before the
// handshake. A failure is returned as CodeUnavailable wrapping the cause;
// during backoff Acquire fails fast without spawning and says when it
// retries; the wait doubles, and a success resets it.
func TestSpawnFailureBacksOff(t *testing.T) {
	eng := requireEngine(t)
	errBoom := errors.New("boom: no sidecar today")
	tests := []struct {
		name string
		fail func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error)
		is   func(error) bool
	}{
		{
			name: "start error",
			fail: func(context.Context, agentos.Options) (*agentos.Sidecar, error) { return nil, errBoom },
			is:   func(err error) bool { return errors.Is(err, errBoom) },
		},
		{
			name: "handshake fails",
			fail: func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error) {
				// A real child that exits at once: the handshake fails and
				// agentos.Start reaps it.
				o.Engine = agentos.Engine{SidecarBin: "/bin/false", PackagesDir: eng.PackagesDir}
				return agentos.Start(ctx, o)
			},
			is: func(err error) bool {
				var exited *agentos.SidecarExitedError
				return errors.As(err, &exited)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			var calls, failuresLeft atomic.Int32
			failuresLeft.Store(2)
			p := newPool(t, Config{
				MaxSidecars: 3,
				Now:         clock.Now,
				Start: func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error) {
					calls.Add(1)
					if failuresLeft.Add(-1) >= 0 {
						return tc.fail(ctx, o)
					}
					return agentos.Start(ctx, o)
				},
			})
			ctx := testContext(t, time.Minute)
			acquireFails := func(wantCalls int32, wantMsg string) {
				t.Helper()
				start := time.Now()
				_, err := p.Acquire(ctx, "t1", false)
				wantCode(t, err, gateway.CodeUnavailable)
				if !tc.is(err) {
					t.Fatalf("err = %v, want it to wrap the spawn failure", err)
				}
				if !strings.Contains(gateway.ErrorMessage(err), wantMsg) {
					t.Fatalf("message %q, want it to contain %q", gateway.ErrorMessage(err), wantMsg)
				}
				if got := calls.Load(); got != wantCalls {
					t.Fatalf("Start called %d times, want %d", got, wantCalls)
				}
				if wantMsg != "could not start" && time.Since(start) > 100*time.Millisecond {
					t.Fatalf("Acquire during backoff took %v, want it to fail fast", time.Since(start))
				}
			}

			acquireFails(1, "could not start")
			if p.Ready() || len(p.Sidecars()) != 0 {
				t.Fatalf("after a failed spawn: Ready %v, sidecars %s", p.Ready(), describe(p.Sidecars()))
			}
			acquireFails(1, "retrying in 200ms")
			clock.Advance(199 * time.Millisecond)
			acquireFails(1, "retrying in 1ms")
			clock.Advance(time.Millisecond)
			acquireFails(2, "could not start") // the retry, which fails again
			clock.Advance(200 * time.Millisecond)
			acquireFails(2, "retrying in 200ms") // the wait doubled to 400ms
			clock.Advance(200 * time.Millisecond)

			l, err := p.Acquire(ctx, "t1", false)
			if err != nil {
				t.Fatalf("acquire after backoff: %v", err)
			}
			defer l.Release()
			if l.SidecarID() != "sc-3" || !p.Ready() {
				t.Fatalf("lease on %s, Ready %v; want sc-3 (ids are never reused) and ready", l.SidecarID(), p.Ready())
			}
			if st := p.Stats(); st.SpawnFailures != 2 || st.Spawned != 1 {
				t.Fatalf("stats %+v, want 2 failures and 1 spawn", st)
			}

			// The success reset the backoff: the next failure waits Initial again.
			failuresLeft.Store(1)
			_, err = p.Acquire(ctx, "iso", true) // isolated: forces a spawn
			wantCode(t, err, gateway.CodeUnavailable)
			clock.Advance(200 * time.Millisecond)
			l2, err := p.Acquire(ctx, "iso", true)
			if err != nil {
				t.Fatalf("acquire Initial after a failure that followed a success: %v", err)
			}
			l2.Release()
		})
	}
}

// TestIdleReaping checks, with a 200 ms IdleTimeout (reaper tick 50 ms), that
// sidecars idle past the timeout are stopped, that MinIdleSidecars idle ones
// are kept, and that a sidecar with a hold is never stopped.
func TestIdleReaping(t *testing.T) {
	const idle = 200 * time.Millisecond
	for _, minIdle := range []int{0, 1} {
		t.Run(fmt.Sprintf("MinIdle=%d", minIdle), func(t *testing.T) {
			p := newPool(t, Config{MaxSidecars: 3, VMsPerSidecar: 1, MinIdleSidecars: minIdle, IdleTimeout: idle})
			ctx := testContext(t, time.Minute)
			seen := map[int]bool{}
			snapshot := func() []SidecarInfo {
				infos := p.Sidecars()
				for _, in := range infos {
					if in.Pid != 0 {
						seen[in.Pid] = true
					}
				}
				return infos
			}
			held, err := p.Acquire(ctx, "t1", false)
			if err != nil {
				t.Fatal(err)
			}
			other, err := p.Acquire(ctx, "t1", false)
			if err != nil {
				t.Fatal(err)
			}
			snapshot()
			other.Release()

			// settled checks that exactly the held sidecar plus minIdle idle
			// ones are left, and fails at once if the held one disappears.
			settled := func(wantHeld int) func() error {
				return func() error {
					infos := snapshot()
					nIdle := 0
					for _, in := range infos {
						switch {
						case in.ID == held.SidecarID() && wantHeld == 1:
							if in.Holds != 1 {
								return fmt.Errorf("held sidecar %+v", in)
							}
						case in.State == StateReady && in.Holds == 0:
							nIdle++
						default:
							return fmt.Errorf("unexpected sidecar state: %s", describe(infos))
						}
					}
					if _, ok := findInfo(infos, held.SidecarID()); wantHeld == 1 && !ok {
						t.Fatalf("the held sidecar %s was stopped: %s", held.SidecarID(), describe(infos))
					}
					if nIdle != minIdle || len(infos) != wantHeld+minIdle {
						return fmt.Errorf("pool %s; want %d held + %d idle", describe(infos), wantHeld, minIdle)
					}
					return nil
				}
			}
			start := time.Now()
			eventually(t, 10*time.Second, settled(1))
			t.Logf("reaped down to held+MinIdle in %v", time.Since(start).Round(time.Millisecond))
			// Three more timeouts change nothing: the held one and the
			// MinIdle ones stay.
			time.Sleep(3 * idle)
			if err := settled(1)(); err != nil {
				t.Fatal(err)
			}

			held.Release()
			eventually(t, 10*time.Second, settled(0))
			time.Sleep(3 * idle)
			infos := snapshot()
			if err := settled(0)(); err != nil {
				t.Fatal(err)
			}
			st := p.Stats()
			if st.Spawned-st.Retired != uint64(minIdle) || st.Idle != minIdle {
				t.Fatalf("stats %+v: want every spawned sidecar but %d retired", st, minIdle)
			}
			for pid := range seen {
				if slices.ContainsFunc(infos, func(in SidecarInfo) bool { return in.Pid == pid }) {
					continue
				}
				if sidecarAlive(pid) {
					t.Fatalf("reaped sidecar %d still runs", pid)
				}
			}
		})
	}
}

// TestMemoryHighWater uses a 1-byte high-water mark, so every sidecar that has
// served is over it: such a sidecar gets no new holds ("draining"), is stopped
// once its holds are released, and is replaced when MinIdleSidecars needs it.
// A fresh sidecar still takes the holds it was spawned for.
func TestMemoryHighWater(t *testing.T) {
	t.Run("checked at Acquire", func(t *testing.T) {
		// IdleTimeout is long so that the reaper's own memory check (every
		// 5 s) stays out of the way; it would reach the same states anyway.
		p := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 2, MinIdleSidecars: 1, MemoryHighWater: 1, IdleTimeout: time.Hour})
		ctx := testContext(t, time.Minute)
		if err := p.Warm(ctx); err != nil {
			t.Fatal(err)
		}
		a1, err := p.Acquire(ctx, "t1", false)
		if err != nil || a1.SidecarID() != "sc-1" {
			t.Fatalf("a1: %v on %v, want sc-1 (fresh sidecars are not checked)", err, a1)
		}
		pid1 := a1.Sidecar().Pid()
		// The warm sidecar was used: the pool warms another.
		if err := p.Warm(ctx); err != nil {
			t.Fatal(err)
		}
		a2, err := p.Acquire(ctx, "t2", false)
		if err != nil || a2.SidecarID() != "sc-2" {
			t.Fatalf("a2: %v, want a lease on the fresh sc-2; pool %s", err, describe(p.Sidecars()))
		}
		pid2 := a2.Sidecar().Pid()
		// Both have room, both served and are over the mark: both drain,
		// and with MaxSidecars live there is nowhere to go.
		_, err = p.Acquire(ctx, "t3", false)
		wantCode(t, err, gateway.CodeResourceExhausted)
		infos := p.Sidecars()
		for _, in := range infos {
			if in.State != StateDraining || in.Holds != 1 || in.RSS <= 1 {
				t.Fatalf("pool %s: want sc-1 and sc-2 draining with their hold", describe(infos))
			}
		}

		a1.Release()
		eventually(t, 10*time.Second, func() error {
			infos := p.Sidecars()
			if got := ids(infos); !slices.Equal(got, []string{"sc-2", "sc-3"}) {
				return fmt.Errorf("pool %s; want sc-1 replaced by sc-3", describe(infos))
			}
			if in := infos[1]; in.State != StateReady || in.Holds != 0 {
				return fmt.Errorf("replacement %+v, want ready and idle", in)
			}
			return nil
		})
		if sidecarAlive(pid1) {
			t.Fatalf("retired sidecar %d still runs", pid1)
		}

		a2.Release()
		eventually(t, 10*time.Second, func() error {
			if got := ids(p.Sidecars()); !slices.Equal(got, []string{"sc-3"}) {
				return fmt.Errorf("pool %s; want only sc-3 (MinIdle is met)", describe(p.Sidecars()))
			}
			return nil
		})
		if sidecarAlive(pid2) {
			t.Fatalf("retired sidecar %d still runs", pid2)
		}
		if st := p.Stats(); st.Retired != 2 || st.Spawned != 3 {
			t.Fatalf("stats %+v, want 2 retired and 3 spawned", st)
		}
		a4, err := p.Acquire(ctx, "t4", false)
		if err != nil || a4.SidecarID() != "sc-3" {
			t.Fatalf("a4: %v, want a lease on the fresh sc-3", err)
		}
		a4.Release()
	})

	t.Run("checked by the reaper", func(t *testing.T) {
		// IdleTimeout 400ms: the reaper ticks every 100ms.
		p := newPool(t, Config{MaxSidecars: 2, VMsPerSidecar: 2, MemoryHighWater: 1, IdleTimeout: 400 * time.Millisecond})
		ctx := testContext(t, time.Minute)
		a1, err := p.Acquire(ctx, "t1", false)
		if err != nil {
			t.Fatal(err)
		}
		// No Acquire touches sc-1: the tick alone finds it over the mark,
		// and it keeps its hold.
		eventually(t, 5*time.Second, func() error {
			in, _ := findInfo(p.Sidecars(), "sc-1")
			if in.State != StateDraining || in.Holds != 1 {
				return fmt.Errorf("sc-1 %+v, want draining with its hold", in)
			}
			return nil
		})
		a2, err := p.Acquire(ctx, "t1", false)
		if err != nil || a2.SidecarID() != "sc-2" {
			t.Fatalf("a2: %v, want sc-2 (sc-1 drains)", err)
		}
		defer a2.Release()
		a1.Release()
		eventually(t, 5*time.Second, func() error {
			if _, ok := findInfo(p.Sidecars(), "sc-1"); ok {
				return errors.New("sc-1 still pooled after its last hold was released")
			}
			return nil
		})
		if st := p.Stats(); st.Retired < 1 {
			t.Fatalf("stats %+v, want sc-1 retired", st)
		}
	})
}

// TestCrashReplacesOnlyTheDeadSidecar SIGKILLs one of two pooled sidecars:
// OnExit reports it, it leaves the pool at once, a VM on the other one still
// runs, its lease's Release stays safe, and the next Acquire spawns afresh.
func TestCrashReplacesOnlyTheDeadSidecar(t *testing.T) {
	type exit struct {
		info SidecarInfo
		err  error
	}
	exits := make(chan exit, 4)
	p := newPool(t, Config{MaxSidecars: 3, VMsPerSidecar: 1, OnExit: func(in SidecarInfo, err error) { exits <- exit{in, err} }})
	t.Cleanup(func() {
		// Registered after newPool's cleanup, so this runs first; close here
		// to check that a shutdown on purpose is not reported as a crash.
		if err := p.Close(testContext(t, 30*time.Second)); err != nil {
			t.Errorf("close: %v", err)
		}
		if len(exits) != 0 {
			t.Errorf("OnExit called for a sidecar the pool closed: %+v", <-exits)
		}
	})
	ctx := testContext(t, time.Minute)
	victim, err := p.Acquire(ctx, "t1", false)
	if err != nil {
		t.Fatal(err)
	}
	survivor, err := p.Acquire(ctx, "t2", false)
	if err != nil {
		t.Fatal(err)
	}
	defer survivor.Release()
	vm, err := survivor.Sidecar().CreateVM(ctx, agentos.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Dispose(testContext(t, 30*time.Second))
	victimPid, victimID := victim.Sidecar().Pid(), victim.SidecarID()

	killed := time.Now()
	if err := syscall.Kill(victimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ex exit
	select {
	case ex = <-exits:
	case <-time.After(10 * time.Second):
		t.Fatal("OnExit not called within 10s of SIGKILL")
	}
	t.Logf("OnExit %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	var exited *agentos.SidecarExitedError
	if ex.info.ID != victimID || ex.info.Pid != victimPid || ex.info.Holds != 1 || !slices.Equal(ex.info.Tenants, []string{"t1"}) {
		t.Fatalf("OnExit info %+v, want %s (pid %d) with t1's hold", ex.info, victimID, victimPid)
	}
	if !errors.As(ex.err, &exited) || exited.Signal != "killed" {
		t.Fatalf("OnExit err = %v, want a *SidecarExitedError by SIGKILL", ex.err)
	}
	infos := p.Sidecars()
	if got := ids(infos); !slices.Equal(got, []string{survivor.SidecarID()}) {
		t.Fatalf("pool %s after the crash, want only %s", describe(infos), survivor.SidecarID())
	}
	if st := p.Stats(); st.Crashes != 1 {
		t.Fatalf("stats %+v, want 1 crash", st)
	}
	victim.Release()
	victim.Release()
	if in, _ := findInfo(p.Sidecars(), survivor.SidecarID()); in.Holds != 1 || in.State != StateReady {
		t.Fatalf("survivor %+v after releasing the dead lease, want ready with 1 hold", in)
	}
	res, err := vm.Exec(ctx, "echo hi", agentos.ExecOptions{})
	if err != nil {
		t.Fatalf("echo hi on the surviving sidecar: %v", err)
	}
	if string(res.Stdout) != "hi\n" {
		t.Fatalf("echo hi on the surviving sidecar: stdout %q", res.Stdout)
	}

	fresh, err := p.Acquire(ctx, "t1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release()
	if fresh.SidecarID() != "sc-3" || fresh.Sidecar().Pid() == victimPid {
		t.Fatalf("next lease on %s (pid %d), want a fresh sc-3", fresh.SidecarID(), fresh.Sidecar().Pid())
	}
	if st := p.Stats(); st.Restarts != 1 || st.Spawned != 3 || st.Crashes != 1 {
		t.Fatalf("stats %+v, want 1 restart, 3 spawned, 1 crash", st)
	}
}

// TestCloseLeavesNoSidecar closes a pool with a held sidecar, an idle one and
// one whose spawn is still in flight: no agentos-sidecar process remains,
// Acquire then fails with CodeUnavailable, and leases and a second Close stay
// safe. Start is wrapped to record the pid of every process it started and to
// hold the third spawn back after its process is up (a delay, not a failure),
// so that Close surely overlaps it.
func TestCloseLeavesNoSidecar(t *testing.T) {
	var (
		mu    sync.Mutex
		pids  []int
		calls atomic.Int32
	)
	spawning := make(chan struct{})
	p := newPool(t, Config{
		MaxSidecars:   3,
		VMsPerSidecar: 1,
		Start: func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error) {
			s, err := agentos.Start(ctx, o)
			if err == nil {
				mu.Lock()
				pids = append(pids, s.Pid())
				mu.Unlock()
			}
			if calls.Add(1) == 3 {
				close(spawning)
				time.Sleep(300 * time.Millisecond)
			}
			return s, err
		},
	})
	ctx := testContext(t, time.Minute)
	held, err := p.Acquire(ctx, "t1", false)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := p.Acquire(ctx, "t1", false)
	if err != nil {
		t.Fatal(err)
	}
	late := make(chan error, 1)
	go func() {
		l, err := p.Acquire(ctx, "t1", false)
		if err == nil {
			l.Release()
		}
		late <- err
	}()
	<-spawning
	idle.Release()
	if in, _ := findInfo(p.Sidecars(), "sc-3"); in.State != StateStarting {
		t.Fatalf("sc-3 %+v, want it starting", in)
	}

	start := time.Now()
	if err := p.Close(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("close: %v", err)
	}
	t.Logf("closed 3 sidecars in %v", time.Since(start).Round(time.Millisecond))
	wantCode(t, <-late, gateway.CodeUnavailable)
	mu.Lock()
	defer mu.Unlock()
	if len(pids) != 3 {
		t.Fatalf("recorded pids %v, want the held, idle and late sidecars", pids)
	}
	for _, pid := range pids {
		if sidecarAlive(pid) {
			t.Fatalf("sidecar %d still runs after Close", pid)
		}
	}
	_, err = p.Acquire(ctx, "t1", false)
	wantCode(t, err, gateway.CodeUnavailable)
	wantCode(t, p.Warm(ctx), gateway.CodeUnavailable)
	if n := len(p.Sidecars()); n != 0 || p.Ready() {
		t.Fatalf("after Close: %d sidecars, Ready %v", n, p.Ready())
	}
	held.Release()
	if err := p.Close(testContext(t, time.Second)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if st := p.Stats(); st.Crashes != 0 || st.Retired != 0 {
		t.Fatalf("stats %+v: Close is neither a crash nor a retirement", st)
	}
}

// TestSpawnOutlivesImpatientCaller slows Start down (a delay, not a
// failure): a caller whose context ends while its sidecar starts gets
// CodeDeadlineExceeded, but the spawn belongs to the pool, finishes, and the
// sidecar serves the next caller.
func TestSpawnOutlivesImpatientCaller(t *testing.T) {
	p := newPool(t, Config{
		MaxSidecars: 1,
		Start: func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error) {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return agentos.Start(ctx, o)
		},
	})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Acquire(short, "t1", false)
	wantCode(t, err, gateway.CodeDeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
	eventually(t, 10*time.Second, func() error {
		infos := p.Sidecars()
		if len(infos) != 1 || infos[0].State != StateReady || infos[0].Holds != 0 {
			return fmt.Errorf("pool %s, want sc-1 ready and idle", describe(infos))
		}
		return nil
	})
	l, err := p.Acquire(testContext(t, 10*time.Second), "t1", false)
	if err != nil || l.SidecarID() != "sc-1" {
		t.Fatalf("next acquire: %v, want the already started sc-1", err)
	}
	l.Release()
	if st := p.Stats(); st.Spawned != 1 {
		t.Fatalf("stats %+v, want a single spawn", st)
	}
}

// TestWarm checks that Warm starts exactly MinIdleSidecars idle sidecars and
// that a second Warm spawns nothing more.
func TestWarm(t *testing.T) {
	for _, minIdle := range []int{0, 2} {
		t.Run(fmt.Sprintf("MinIdle=%d", minIdle), func(t *testing.T) {
			p := newPool(t, Config{MaxSidecars: 3, MinIdleSidecars: minIdle})
			ctx := testContext(t, time.Minute)
			for range 2 {
				if err := p.Warm(ctx); err != nil {
					t.Fatal(err)
				}
			}
			st := p.Stats()
			if st.Spawned != uint64(minIdle) || st.Idle != minIdle || st.Live != minIdle {
				t.Fatalf("stats %+v, want %d spawned, idle and live", st, minIdle)
			}
			if p.Ready() != (minIdle > 0) {
				t.Fatalf("Ready() = %v with %d warm sidecars", p.Ready(), minIdle)
			}
		})
	}
}
