package warmpool

// These tests run the pool over fakeEngine (fake_test.go), a fake of the
// Placer, Lease and VM interfaces the pool declares, because they need
// interleavings the real engine cannot produce on demand; the pool over real
// sidecars is covered by cmd/server/e2e_warm_test.go.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// fakeConfig is a pool of size warm VMs on clk, sweeping every millisecond so
// that the refill loop reads the clock again soon after a test moves it.
func fakeConfig(size int, clk *fakeClock) Config {
	return Config{Size: size, Now: clk.Now, Sweep: time.Millisecond, Log: zerolog.Nop()}
}

// checkTaken checks a VM just handed out: warmed up, alive, on a sidecar that
// takes VMs, and assigned to the tenant that took it.
func checkTaken(t *testing.T, vm *fakeVM, lease Lease, tenant string) {
	t.Helper()
	if lease != Lease(vm.lease) {
		t.Errorf("VM on %s handed out with the lease of %s", vm.lease.id, lease.SidecarID())
	}
	if got := vm.warmedUp(); !slices.Equal(got, warmUpCommands) {
		t.Errorf("VM on %s handed out after the warm-up %q, want %q", vm.lease.id, got, warmUpCommands)
	}
	if st, _ := vm.State(); st != agentos.VMReady || vm.lease.Draining() || vm.disposals() != 0 {
		t.Errorf("VM on %s handed out in state %s (draining %v, disposed %d times)", vm.lease.id, st, vm.lease.Draining(), vm.disposals())
	}
	if _, assigned := vm.lease.counts(); !slices.Equal(assigned, []string{tenant}) {
		t.Errorf("VM on %s assigned to %q, want [%s]", vm.lease.id, assigned, tenant)
	}
}

// TestTakeNeverHandsOutAVMTwice races many Takes against each other, and
// against the refills, and checks that no VM is handed out twice: on a frozen
// clock (no refill during a round, so each round hands out exactly Size VMs)
// and on the real clock with a quiet period short enough for refills to
// land between Takes.
func TestTakeNeverHandsOutAVMTwice(t *testing.T) {
	const size, takers = 4, 16
	for _, tc := range []struct {
		name string
		// realClock runs the refills on the real clock, quiet for 1 µs.
		realClock bool
		rounds    int
		// takes is how many Takes each taker makes per round.
		takes int
	}{
		{name: "frozen clock, rounds of one take each", rounds: 10, takes: 1},
		{name: "real clock, refills racing the takes", realClock: true, rounds: 5, takes: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := fakeConfig(size, clk)
			if tc.realClock {
				cfg.Now, cfg.Quiet = nil, time.Microsecond
			}
			eng := &fakeEngine{}
			var taken takeList
			p := newTestPool(t, cfg, eng, taken.all)
			seen := map[*fakeVM]bool{}
			var misses uint64
			for round := range tc.rounds {
				if !tc.realClock {
					clk.Advance(DefaultQuiet)
				}
				waitReady(t, p, eng, size)
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					mu    sync.Mutex
					got   []*fakeVM
				)
				for i := range takers {
					tenant := fmt.Sprintf("tenant-%d", i)
					wg.Go(func() {
						<-start
						for range tc.takes {
							vm, lease, ok := p.Take(tenant, false)
							if !ok {
								mu.Lock()
								misses++
								mu.Unlock()
								runtime.Gosched()
								continue
							}
							taken.add(vm)
							checkTaken(t, vm, lease, tenant)
							mu.Lock()
							got = append(got, vm)
							mu.Unlock()
						}
					})
				}
				close(start)
				wg.Wait()
				if !tc.realClock && len(got) != size {
					t.Fatalf("round %d handed out %d VMs, want the %d ready", round, len(got), size)
				}
				for _, vm := range got {
					if seen[vm] {
						t.Fatalf("round %d: the VM on %s was handed out twice", round, vm.lease.id)
					}
					seen[vm] = true
				}
			}
			st := p.Stats()
			if st.Hits != uint64(len(seen)) || st.Misses != misses {
				t.Fatalf("stats count %d hits and %d misses; the takers got %d VMs and %d misses", st.Hits, st.Misses, len(seen), misses)
			}
		})
	}
}

// TestTakeMiss checks that a Take no warm VM can serve reports a miss and is
// counted as one, whatever the reason.
func TestTakeMiss(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		// prepare brings the pool to the state in which the Take misses.
		prepare func(t *testing.T, p *Pool[*fakeVM], eng *fakeEngine, taken *takeList)
		tenant  string
		iso     bool
	}{
		{name: "no warm VMs configured", size: 0, tenant: "t"},
		{name: "shared class emptied", size: 1, tenant: "t", prepare: func(t *testing.T, p *Pool[*fakeVM], eng *fakeEngine, taken *takeList) {
			waitReady(t, p, eng, 1)
			vm, _, ok := p.Take("other", false)
			if !ok {
				t.Fatal("the one warm VM was not handed out")
			}
			taken.add(vm)
		}},
		{name: "isolated class never asked before", size: 1, tenant: "iso", iso: true, prepare: func(t *testing.T, p *Pool[*fakeVM], eng *fakeEngine, _ *takeList) {
			waitReady(t, p, eng, 1)
		}},
		{name: "after shutdown", size: 1, tenant: "t", prepare: func(t *testing.T, p *Pool[*fakeVM], eng *fakeEngine, _ *takeList) {
			waitReady(t, p, eng, 1)
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			eng := &fakeEngine{}
			var taken takeList
			p := newTestPool(t, fakeConfig(tc.size, clk), eng, taken.all)
			if tc.prepare != nil {
				tc.prepare(t, p, eng, &taken)
			}
			before := p.Stats()
			if vm, lease, ok := p.Take(tc.tenant, tc.iso); ok || vm != nil || lease != nil {
				t.Fatalf("Take = %v, %v, %v; want a miss", vm, lease, ok)
			}
			after := p.Stats()
			if after.Misses != before.Misses+1 || after.Hits != before.Hits {
				t.Fatalf("hits %d→%d, misses %d→%d; want one more miss", before.Hits, after.Hits, before.Misses, after.Misses)
			}
		})
	}
}

// TestRefill checks that the pool fills up to Size and no further, one
// create at a time, and refills only once creates (Takes and Misses) have
// been quiet for the quiet period.
func TestRefill(t *testing.T) {
	const size = 3
	clk := newFakeClock()
	eng := &fakeEngine{}
	stalled := eng.stall(1, false)
	var taken takeList
	p := newTestPool(t, fakeConfig(size, clk), eng, taken.all)

	// Every create stalls until the test lets it go on: one running
	// alongside would be counted in maxCreating.
	for range size {
		<-stalled
		eng.step()
	}
	eng.release()
	waitReady(t, p, eng, size)
	clk.settle(t)
	if _, n, most := eng.snapshot(); n != size || most != 1 {
		t.Fatalf("filling %d warm VMs made %d creates, up to %d at once; want %d, one at a time", size, n, most, size)
	}

	for range 2 {
		vm, _, ok := p.Take("t", false)
		if !ok {
			t.Fatal("a warm VM of the full pool was not handed out")
		}
		taken.add(vm)
	}
	for _, step := range []struct {
		name    string
		advance time.Duration
		miss    bool
		// want is how many creates have been made once the loop settled,
		// and ready how many warm VMs there are.
		want, ready int
	}{
		{name: "right after the takes", want: size, ready: size - 2},
		{name: "just short of the quiet period", advance: DefaultQuiet - time.Nanosecond, want: size, ready: size - 2},
		{name: "a miss restarts the quiet period", miss: true, advance: time.Nanosecond, want: size, ready: size - 2},
		{name: "half the quiet period after the miss", advance: DefaultQuiet / 2, want: size, ready: size - 2},
		{name: "quiet since the miss", advance: DefaultQuiet / 2, want: size + 2, ready: size},
	} {
		if step.miss {
			p.Miss("t", false)
		}
		clk.Advance(step.advance)
		if step.want > size {
			waitReady(t, p, eng, size)
		}
		clk.settle(t)
		if _, n, most := eng.snapshot(); n != step.want || most != 1 {
			t.Fatalf("%s: %d creates, up to %d at once; want %d, one at a time", step.name, n, most, step.want)
		}
		if got := p.Stats().Ready; got != step.ready {
			t.Fatalf("%s: %d warm VMs ready, want %d", step.name, got, step.ready)
		}
	}
	if st := p.Stats(); st.Refills != size+2 || st.RefillFailures != 0 || st.Hits != 2 || st.Misses != 1 {
		t.Fatalf("stats %+v: want %d refills, no failure, 2 hits, 1 miss", st, size+2)
	}
}

// TestRefillFailure checks that a failed refill, wherever it fails, is
// counted, leaks nothing, and is retried after a backoff that doubles,
// with no attempt in between however often the loop looks.
func TestRefillFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   failure
	}{
		{name: "placement", at: failPlace},
		{name: "creation", at: failCreate},
		{name: "warm-up", at: failWarmUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const failures = 3
			clk := newFakeClock()
			eng := &fakeEngine{fail: func(n int) failure {
				if n <= failures {
					return tc.at
				}
				return failNone
			}}
			var taken takeList
			p := newTestPool(t, fakeConfig(1, clk), eng, taken.all)
			backoff := time.Second
			for k := 1; k <= failures; k++ {
				waitFor(t, fmt.Sprintf("failure %d counted", k), func() bool { return p.Stats().RefillFailures == uint64(k) })
				clk.Advance(backoff - time.Nanosecond)
				clk.settle(t)
				if n := eng.attemptCount(); n != k {
					t.Fatalf("%d attempts before the backoff of %v after failure %d ended", n, backoff, k)
				}
				clk.Advance(time.Nanosecond)
				waitFor(t, fmt.Sprintf("attempt %d", k+1), func() bool { return eng.attemptCount() == k+1 })
				backoff *= 2
			}
			waitReady(t, p, eng, 1)
			if st := p.Stats(); st.RefillFailures != failures || st.Refills != 1 {
				t.Fatalf("stats %+v: want %d failures, 1 refill", st, failures)
			}
			vm, lease, ok := p.Take("t", false)
			if !ok {
				t.Fatal("the VM refilled after the failures was not handed out")
			}
			taken.add(vm)
			checkTaken(t, vm, lease, "t")
		})
	}
}

// TestUnusableWarmVMDiscarded checks that a warm VM whose sidecar drains or
// dies is never handed out but disposed, whether a Take or the sweep finds
// it first, and also while the refill loop waits out a quiet period.
func TestUnusableWarmVMDiscarded(t *testing.T) {
	spoils := map[string]func(*fakeVM){
		"sidecar draining": func(vm *fakeVM) { vm.lease.drain() },
		"sidecar dead":     func(vm *fakeVM) { vm.lose() },
	}
	for _, tc := range []struct {
		name string
		// sweep is the sweep interval: an hour leaves it to the Take.
		sweep time.Duration
		// takeFirst takes one warm VM before the other is spoiled, which
		// starts a quiet period (an hour) that the loop waits out.
		takeFirst bool
	}{
		{name: "found by a take", sweep: time.Hour},
		{name: "found by the sweep", sweep: time.Millisecond},
		{name: "found by the sweep while a refill waits", sweep: time.Millisecond, takeFirst: true},
	} {
		for spoilName, spoil := range spoils {
			t.Run(tc.name+"/"+spoilName, func(t *testing.T) {
				clk := newFakeClock()
				cfg := fakeConfig(2, clk)
				cfg.Sweep, cfg.Quiet = tc.sweep, time.Hour
				eng := &fakeEngine{}
				var taken takeList
				p := newTestPool(t, cfg, eng, taken.all)
				waitReady(t, p, eng, 2)
				vms, _, _ := eng.snapshot()
				// Takes hand out the oldest warm VM first.
				bad, good := vms[0], vms[1]
				if tc.takeFirst {
					bad, good = vms[1], vms[0]
					vm, _, ok := p.Take("t", false)
					if !ok || vm != good {
						t.Fatalf("Take = %v, %v; want the oldest warm VM", vm, ok)
					}
					taken.add(vm)
					clk.settle(t)
				}
				spoil(bad)
				if tc.sweep != time.Hour {
					waitFor(t, "the sweep to discard the spoiled VM", func() bool { return bad.disposals() == 1 })
				}
				// Take until a miss: the VM still usable (unless taken
				// already) and any refilled since, never the spoiled one.
				var got []*fakeVM
				for {
					vm, lease, ok := p.Take("t", false)
					if !ok {
						break
					}
					if vm == bad || slices.Contains(got, vm) || len(got) == 3 {
						t.Fatalf("Take handed out the VM on %s after %v (spoiled: %s)", vm.lease.id, got, bad.lease.id)
					}
					taken.add(vm)
					checkTaken(t, vm, lease, "t")
					got = append(got, vm)
				}
				if !tc.takeFirst && (len(got) == 0 || got[0] != good) {
					t.Fatalf("Takes handed out %v; want the usable warm VM first", got)
				}
				waitFor(t, "the spoiled VM disposed", func() bool { return bad.disposals() == 1 })
				if st := p.Stats(); st.Discarded != 1 {
					t.Fatalf("stats %+v: want 1 discarded", st)
				}
			})
		}
	}
}

// TestClose checks that Close disposes every warm VM, stops the
// refills, one in flight included (a VM it still creates is disposed, not
// leaked), returns only once the pool's goroutines have, and leaves a pool
// whose Takes miss.
func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		// stallFrom stalls the creates from that attempt on, giving up
		// when Close cancels them if honour is set; stallWarmUps
		// stalls the warm-up commands until Close cancels them.
		stallFrom    int
		honour       bool
		stallWarmUps bool
		// ready is how many warm VMs Close finds; created how many VMs
		// there are in the end, all disposed by Close.
		ready, created int
	}{
		{name: "ready VMs", size: 3, ready: 3, created: 3},
		{name: "no warm VMs configured", size: 0},
		{name: "create in flight that gives up", size: 2, stallFrom: 1, honour: true},
		{name: "create in flight that finishes after shutdown began", size: 2, stallFrom: 1, created: 1},
		{name: "warm-up in flight", size: 2, stallWarmUps: true, created: 1},
		{name: "ready VMs and a create in flight", size: 3, stallFrom: 3, ready: 2, created: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			eng := &fakeEngine{}
			var stalled <-chan struct{}
			if tc.stallFrom > 0 {
				stalled = eng.stall(tc.stallFrom, tc.honour)
			}
			if tc.stallWarmUps {
				eng.stallWarmUps()
			}
			p := newTestPool(t, fakeConfig(tc.size, clk), eng, func() []*fakeVM { return nil })
			if stalled != nil {
				<-stalled
			}
			if tc.stallWarmUps {
				waitFor(t, "a VM created", func() bool { vms, _, _ := eng.snapshot(); return len(vms) == 1 })
			}
			waitFor(t, fmt.Sprintf("%d warm VMs", tc.ready), func() bool { return p.Stats().Ready == tc.ready })

			done := make(chan error, 1)
			go func() { done <- p.Close(context.Background()) }()
			if stalled != nil && !tc.honour {
				// Close has begun once the refills' context ended; it
				// must still wait for the create that ignores it.
				waitFor(t, "Close to begin", func() bool { return p.life.Err() != nil })
				select {
				case err := <-done:
					t.Fatalf("Close returned (%v) while a create was still running", err)
				default:
				}
				eng.release()
			}
			if err := <-done; err != nil {
				t.Fatalf("Close: %v", err)
			}
			goleak.VerifyNone(t)
			vms, attempts, _ := eng.snapshot()
			if len(vms) != tc.created {
				t.Fatalf("%d VMs created, want %d", len(vms), tc.created)
			}
			for _, vm := range vms {
				if vm.disposals() != 1 {
					t.Fatalf("VM on %s disposed %d times by Close, want once", vm.lease.id, vm.disposals())
				}
			}
			before := p.Stats()
			if vm, _, ok := p.Take("t", false); ok {
				t.Fatalf("Take after Close handed out the VM on %s", vm.lease.id)
			}
			if st := p.Stats(); st.Misses != before.Misses+1 || st.Ready != 0 || st.RefillFailures != 0 {
				t.Fatalf("stats after Close and a Take %+v: want none ready, no refill failure, one more miss than %d", st, before.Misses)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, n, _ := eng.snapshot(); n != attempts {
				t.Fatalf("%d creates attempted after Close", n-attempts)
			}
		})
	}
}

// TestIsolationClasses checks that each isolated tenant's warm VMs serve it
// alone and are placed as its, that shared warm VMs never serve an isolated
// tenant nor its warm VMs anyone else, and that an isolated tenant idle for
// IsolatedIdle loses its warm VMs while the shared ones stay.
func TestIsolationClasses(t *testing.T) {
	clk := newFakeClock()
	eng := &fakeEngine{}
	var taken takeList
	p := newTestPool(t, fakeConfig(1, clk), eng, taken.all)
	for i, step := range []struct {
		tenant string
		iso    bool
		// advance moves the clock past the quiet period first, letting
		// the classes asked for so far fill up to ready warm VMs.
		advance bool
		ready   int
		hit     bool
	}{
		{tenant: "iso-a", iso: true, ready: 1},
		{tenant: "iso-b", iso: true, advance: true, ready: 2},
		// The same name, not isolated, is served by the shared class.
		{tenant: "iso-b", advance: true, ready: 3, hit: true},
		{tenant: "iso-c", iso: true, ready: 2},
		{tenant: "iso-a", iso: true, ready: 2, hit: true},
		{tenant: "iso-b", iso: true, advance: true, ready: 4, hit: true},
		{tenant: "plain", ready: 3, hit: true},
	} {
		if step.advance {
			clk.Advance(DefaultQuiet)
		}
		waitReady(t, p, eng, step.ready)
		vm, lease, ok := p.Take(step.tenant, step.iso)
		if ok != step.hit {
			t.Fatalf("step %d: Take(%s, isolated %v) hit %v, want %v", i, step.tenant, step.iso, ok, step.hit)
		}
		if !ok {
			continue
		}
		taken.add(vm)
		checkTaken(t, vm, lease, step.tenant)
		wantTenant := ""
		if step.iso {
			wantTenant = step.tenant
		}
		if vm.lease.tenant != wantTenant || vm.lease.isolated != step.iso {
			t.Fatalf("step %d: Take(%s, isolated %v) got a VM placed for tenant %q, isolated %v", i, step.tenant, step.iso, vm.lease.tenant, vm.lease.isolated)
		}
	}

	// Refilled: shared, iso-a, iso-b, iso-c. Idle for IsolatedIdle, the
	// isolated classes go with their VMs; the shared one stays.
	clk.Advance(DefaultQuiet)
	waitReady(t, p, eng, 4)
	if got := p.Stats().Target; got != 4 {
		t.Fatalf("target %d with four classes of one, want 4", got)
	}
	clk.Advance(DefaultIsolatedIdle)
	waitFor(t, "the isolated warm VMs discarded", func() bool { return p.Stats().Discarded == 3 })
	clk.settle(t)
	waitReady(t, p, eng, 1)
	if got := p.Stats().Target; got != 1 {
		t.Fatalf("target %d once the isolated classes went idle, want the shared class's 1", got)
	}
	for _, vm := range isolatedReady(eng, taken.all()) {
		waitFor(t, "an idle tenant's warm VM disposed", func() bool { return vm.disposals() == 1 })
	}
	if vm, _, ok := p.Take("iso-c", true); ok {
		taken.add(vm)
		t.Fatalf("an idle isolated tenant was served the VM on %s", vm.lease.id)
	}
	vm, lease, ok := p.Take("plain", false)
	if !ok {
		t.Fatal("the shared warm VM went with the idle isolated ones")
	}
	taken.add(vm)
	checkTaken(t, vm, lease, "plain")
}

// isolatedReady returns the VMs created for isolated tenants and not taken.
func isolatedReady(eng *fakeEngine, taken []*fakeVM) []*fakeVM {
	vms, _, _ := eng.snapshot()
	var out []*fakeVM
	for _, vm := range vms {
		if vm.lease.isolated && !slices.Contains(taken, vm) {
			out = append(out, vm)
		}
	}
	return out
}

// TestEvict checks that Evict disposes, before returning, one warm VM of the
// tenant's class, else a shared one, and none of another isolated tenant's;
// that with none ready it waits for one being created, bounded by its
// context; and that it reports false when it freed nothing.
func TestEvict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tenant string
		iso    bool
		// takeShared takes the shared warm VM before the Evict;
		// stallRefill also stalls its refill, and cancel ends the Evict's
		// context meanwhile.
		takeShared, stallRefill, cancel bool
		// want is the tenant whose class the evicted VM was placed for
		// ("" the shared class); evicted whether one was.
		want    string
		evicted bool
	}{
		{name: "the isolated tenant's own", tenant: "iso-a", iso: true, want: "iso-a", evicted: true},
		{name: "a shared one when the tenant has none", tenant: "iso-z", iso: true, want: "", evicted: true},
		{name: "a shared one for a shared tenant", tenant: "plain", want: "", evicted: true},
		{name: "none of another isolated tenant's", tenant: "iso-b", iso: true, takeShared: true},
		{name: "the one being created", tenant: "plain", takeShared: true, stallRefill: true, want: "", evicted: true},
		{name: "none when the wait ends first", tenant: "plain", takeShared: true, stallRefill: true, cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			eng := &fakeEngine{}
			var taken takeList
			p := newTestPool(t, fakeConfig(1, clk), eng, taken.all)
			waitReady(t, p, eng, 1)
			if vm, _, ok := p.Take("iso-a", true); ok {
				t.Fatalf("iso-a's first Take was served the VM on %s", vm.lease.id)
			}
			clk.Advance(DefaultQuiet)
			waitReady(t, p, eng, 2)
			if tc.stallRefill {
				eng.stall(3, false)
			}
			if tc.takeShared {
				vm, _, ok := p.Take("other", false)
				if !ok {
					t.Fatal("the shared warm VM was not handed out")
				}
				taken.add(vm)
			}
			if tc.stallRefill {
				clk.Advance(DefaultQuiet)
				waitFor(t, "the refill to stall", func() bool { return eng.attemptCount() == 3 })
			}
			before := p.Stats()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Evict marks the pool asked for as it looks for a warm VM:
			// on a clock moved on, that shows it found none ready.
			clk.Advance(time.Nanosecond)
			done := make(chan bool, 1)
			go func() { done <- p.Evict(ctx, tc.tenant, tc.iso) }()
			if tc.stallRefill {
				waitFor(t, "Evict to find no warm VM ready", func() bool {
					now := clk.Now()
					p.mu.Lock()
					defer p.mu.Unlock()
					return p.quietSince.Equal(now)
				})
				if tc.cancel {
					cancel()
				} else {
					eng.release()
				}
			}
			if got := <-done; got != tc.evicted {
				t.Fatalf("Evict = %v, want %v", got, tc.evicted)
			}
			eng.release()
			vms, _, _ := eng.snapshot()
			var disposed []*fakeVM
			for _, vm := range vms {
				if vm.disposals() > 0 {
					disposed = append(disposed, vm)
				}
			}
			wantDisposed := 0
			if tc.evicted {
				wantDisposed = 1
			}
			if len(disposed) != wantDisposed {
				t.Fatalf("%d VMs disposed when Evict returned, want %d", len(disposed), wantDisposed)
			}
			if tc.evicted && (disposed[0].lease.tenant != tc.want || disposed[0].lease.isolated != (tc.want != "")) {
				t.Fatalf("Evict disposed a VM placed for %q (isolated %v), want one of class %q", disposed[0].lease.tenant, disposed[0].lease.isolated, tc.want)
			}
			if st := p.Stats(); st.Discarded != before.Discarded+uint64(wantDisposed) {
				t.Fatalf("%d discarded, want %d", st.Discarded, before.Discarded+uint64(wantDisposed))
			}
		})
	}
}

// TestTakeSkipsAnotherTenantsSidecar: a warm VM on a sidecar that holds
// another tenant's VMs is not handed to a tenant the placement keeps apart
// from them; it stays warm for a tenant it suits, and the take goes on to
// the next warm VM or misses.
func TestTakeSkipsAnotherTenantsSidecar(t *testing.T) {
	clk := newFakeClock()
	cfg := fakeConfig(2, clk)
	cfg.Quiet = time.Hour // no refill: the two warm VMs are all there is
	eng := &fakeEngine{}
	var taken takeList
	p := newTestPool(t, cfg, eng, taken.all)
	waitReady(t, p, eng, 2)
	vms, _, _ := eng.snapshot()
	vms[0].lease.keepFrom("b")
	vms[1].lease.keepFrom("b")
	if vm, _, ok := p.Take("b", false); ok {
		taken.add(vm)
		t.Fatalf("tenant b was handed the VM on %s, a sidecar of another tenant's", vm.lease.id)
	}
	vm, lease, ok := p.Take("a", false)
	if !ok || vm != vms[0] {
		t.Fatalf("Take(a) = %v, %v; want the oldest warm VM", vm, ok)
	}
	taken.add(vm)
	checkTaken(t, vm, lease, "a")
	if st := p.Stats(); st.Hits != 1 || st.Misses != 1 || st.Discarded != 0 {
		t.Fatalf("stats %+v: want 1 hit, 1 miss, nothing discarded", st)
	}
	vm, _, ok = p.Take("a", false)
	if !ok || vm != vms[1] {
		t.Fatalf("second Take(a) = %v, %v; want the warm VM b left", vm, ok)
	}
	taken.add(vm)
}
