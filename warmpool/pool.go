// Package warmpool keeps VMs created ahead of demand: created with the
// default spec and already past the first-exec warm-up of the engine's
// runtime, so that a create they can serve costs a hand-over instead of a
// VM creation and a cold first process.
//
// Warm VMs belong to no tenant: they have no record in the store, count
// against no quota, and each is handed out at most once, to be disposed by
// whoever took it. The pool refills itself on a goroutine it owns, one VM
// at a time and only once creates have been quiet for a while, so that a
// refill does not compete with the tenants' own creates and first commands
// on a small machine.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// VMOptions create a warm VM: the engine's options of a VM.
type VMOptions = agentos.VMOptions

// EnginePool is the pool of the engine's VMs, which New returns.
type EnginePool = Pool[*agentos.VM]

// Lease is a hold on the sidecar a warm VM runs on.
type Lease interface {
	Sidecar() *agentos.Sidecar
	SidecarID() string
	Release()
	// Assign lists the hold under the tenant the VM was handed to.
	Assign(tenantID string)
	// Foreign reports that the sidecar holds VMs of tenants other than
	// tenantID that the placement keeps tenantID apart from: such a warm VM
	// is left for another tenant.
	Foreign(tenantID string) bool
	// Draining reports that the sidecar takes no new VMs (it is over its
	// memory high-water mark or going away): a warm VM there would keep it
	// alive for nothing.
	Draining() bool
}

// Placer places warm VMs on sidecars, as a tenant's VMs are placed.
type Placer interface {
	Acquire(ctx context.Context, tenantID string, isolated bool) (Lease, error)
}

// VM is what the pool needs of a warm VM: *agentos.VM in the gateway. The
// pool is generic in it so that its unit tests can play VMs whose creation,
// warm-up and sidecar fail or stall when the test says, which the engine
// cannot be made to do on demand.
type VM interface {
	State() (agentos.VMState, error)
	Exec(ctx context.Context, command string, o agentos.ExecOptions) (*agentos.ExecResult, error)
	Dispose(ctx context.Context) error
}

// createFunc creates a VM on the sidecar a lease holds.
type createFunc[V VM] func(ctx context.Context, lease Lease, opts agentos.VMOptions) (V, error)

// createEngineVM is the createFunc of engine VMs.
func createEngineVM(ctx context.Context, lease Lease, opts agentos.VMOptions) (*agentos.VM, error) {
	return lease.Sidecar().CreateVM(ctx, opts)
}

// Config defaults.
const (
	DefaultQuiet        = time.Second
	DefaultIsolatedIdle = 5 * time.Minute
	DefaultSweep        = time.Second
)

// Bounds of the work the pool does on its own.
const (
	// refillTimeout bounds one refill: a placement, a creation and the
	// warm-up command.
	refillTimeout = 2 * time.Minute
	// disposeTimeout bounds the disposal of a warm VM nobody took.
	disposeTimeout = 30 * time.Second
	// maxBackoff caps the wait between failed refills of a class.
	maxBackoff = 30 * time.Second
)

// warmUpCommands are run once in every warm VM. The first process of a VM
// pays the runtime's warm-up (measured on 0.2.21: 0.3 to 2 s), and the first
// run of each command in a VM its own (about 0.2 s more for the first echo
// after a true, against 0.1 s for the next): the commands most first
// requests start, directly or through the shell that runs any command line
// that is not simple, are run once each.
var warmUpCommands = []string{"true", "echo warm", "sh -c true"}

// Config configures a Pool.
type Config struct {
	// Size is how many warm VMs each isolation class keeps: the shared
	// sidecars, and the sidecars of each isolated tenant that created a VM
	// within IsolatedIdle (0: the pool keeps none).
	Size int
	// Options create every warm VM: the default spec's.
	Options VMOptions
	// Quiet is how long after the last create a refill waits (default 1 s).
	Quiet time.Duration
	// IsolatedIdle is how long an isolated tenant's warm VMs are kept after
	// its last create (default 5 min): they hold a sidecar of its own.
	IsolatedIdle time.Duration
	// Sweep is how often warm VMs are checked for a sidecar that drains or
	// died, and isolated classes for idleness (default 1 s); the clock
	// (Now) is consulted again at least as often.
	Sweep time.Duration
	Log   zerolog.Logger
	// Now is the clock of quiet periods and idleness (default time.Now).
	Now func() time.Time
}

// Stats are the pool's counters and current size.
type Stats struct {
	// Ready is how many warm VMs wait to be taken, over every class.
	Ready int
	// Target is how many the pool aims to hold now, over every class.
	Target int
	// Hits are creates a warm VM served; Misses creates none could (the
	// pool was empty, or the spec needs what only creation can give).
	Hits, Misses uint64
	// Refills are warm VMs created; RefillSeconds their creation and
	// warm-up time in total; RefillFailures attempts that failed.
	Refills        uint64
	RefillSeconds  float64
	RefillFailures uint64
	// Discarded are warm VMs disposed untaken: their sidecar drained or
	// died, their isolated tenant went idle, or a create needed the room.
	Discarded uint64
}

// classKey names an isolation class: the shared sidecars (the zero key), or
// one isolated tenant's.
type classKey struct {
	tenant   string
	isolated bool
}

type class[V VM] struct {
	ready   []*warmVM[V]
	filling int
	// wanted is when a create last asked this class; failures and retryAt
	// pace refills after errors.
	wanted   time.Time
	failures int
	retryAt  time.Time
}

type warmVM[V VM] struct {
	vm    V
	lease Lease
}

// Pool keeps warm VMs. Its methods are safe for concurrent use.
type Pool[V VM] struct {
	cfg    Config
	placer Placer
	create createFunc[V]
	log    zerolog.Logger

	// life ends when Close begins; refills derive from it.
	life    context.Context
	endLife context.CancelFunc
	wake    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	classes map[classKey]*class[V]
	closing bool
	// quietSince is when the last create asked the pool.
	quietSince time.Time
	// filled is closed, and replaced, whenever a refill ends.
	filled chan struct{}
	stats  Stats
}

// New returns a pool and starts its refills; Close stops them and
// disposes the VMs nobody took.
func New(cfg Config, placer Placer) *EnginePool {
	return newPool(cfg, placer, createEngineVM)
}

// newPool returns a pool whose VMs create makes, as New does with the
// engine's.
func newPool[V VM](cfg Config, placer Placer, create createFunc[V]) *Pool[V] {
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	if cfg.IsolatedIdle <= 0 {
		cfg.IsolatedIdle = DefaultIsolatedIdle
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = DefaultSweep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Pool[V]{
		cfg: cfg, placer: placer, create: create, log: cfg.Log,
		wake:    make(chan struct{}, 1),
		filled:  make(chan struct{}),
		classes: map[classKey]*class[V]{},
	}
	p.life, p.endLife = context.WithCancel(context.Background())
	if cfg.Size > 0 {
		// The shared class is always wanted; isolated ones once their
		// tenant creates a VM.
		p.classes[classKey{}] = &class[V]{}
		p.wg.Add(1)
		go p.run()
	}
	return p
}

func keyOf(tenantID string, isolated bool) classKey {
	if !isolated {
		return classKey{}
	}
	return classKey{tenant: tenantID, isolated: true}
}

// Take hands a warm VM of the tenant's isolation class to the tenant, or
// reports false (a miss) when none is ready. The VM and its lease are the
// caller's from then on: the pool never hands them out again.
func (p *Pool[V]) Take(tenantID string, isolated bool) (V, Lease, bool) {
	var none V
	if p.cfg.Size <= 0 {
		p.Miss(tenantID, isolated)
		return none, nil, false
	}
	p.mu.Lock()
	if p.closing {
		p.stats.Misses++
		p.mu.Unlock()
		return none, nil, false
	}
	c := p.wantLocked(keyOf(tenantID, isolated))
	var got *warmVM[V]
	var stale []*warmVM[V]
	kept := c.ready[:0]
	for _, w := range c.ready {
		switch {
		case got != nil:
			kept = append(kept, w)
		case !w.usable():
			stale = append(stale, w)
		case w.lease.Foreign(tenantID):
			// On another tenant's sidecar: kept for a tenant it suits.
			kept = append(kept, w)
		default:
			got = w
		}
	}
	clear(c.ready[len(kept):])
	c.ready = kept
	if got != nil {
		p.stats.Hits++
	} else {
		p.stats.Misses++
	}
	p.discardLocked(stale)
	p.mu.Unlock()
	p.poke()
	if got == nil {
		return none, nil, false
	}
	got.lease.Assign(tenantID)
	return got.vm, got.lease, true
}

// Miss records a create that no warm VM can serve: its spec needs what
// only the creation of a VM gives. It counts as a create for the quiet
// period of refills.
func (p *Pool[V]) Miss(tenantID string, isolated bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Misses++
	if p.cfg.Size > 0 && !p.closing {
		p.wantLocked(keyOf(tenantID, isolated))
	}
}

// Evict disposes one warm VM, of the tenant's class when it has one, else
// of the shared class, to make room for a create that found every sidecar
// full; it reports whether it freed a hold. A warm VM still being created
// holds its room too: with none ready, Evict waits for it (bounded by ctx).
// The disposal is done when it returns.
func (p *Pool[V]) Evict(ctx context.Context, tenantID string, isolated bool) bool {
	keys := []classKey{keyOf(tenantID, isolated), {}}
	for {
		p.mu.Lock()
		var w *warmVM[V]
		filling := 0
		for _, k := range keys {
			c := p.classes[k]
			if c == nil {
				continue
			}
			if n := len(c.ready); n > 0 && w == nil {
				w = c.ready[n-1]
				c.ready = c.ready[:n-1]
			}
			filling += c.filling
		}
		p.quietSince = p.cfg.Now()
		if w != nil {
			p.stats.Discarded++
		}
		filled := p.filled
		p.mu.Unlock()
		if w != nil {
			p.dispose(ctx, w)
			return true
		}
		if filling == 0 {
			return false
		}
		select {
		case <-filled:
		case <-ctx.Done():
			return false
		}
	}
}

// wantLocked marks a class asked for now, creating it. p.mu must be held.
func (p *Pool[V]) wantLocked(k classKey) *class[V] {
	now := p.cfg.Now()
	p.quietSince = now
	c := p.classes[k]
	if c == nil {
		c = &class[V]{}
		p.classes[k] = c
	}
	c.wanted = now
	return c
}

// usable reports whether a warm VM can still be handed out: its sidecar
// takes new VMs and the VM itself is ready.
func (w *warmVM[V]) usable() bool {
	st, _ := w.vm.State()
	return st == agentos.VMReady && !w.lease.Draining()
}

// Stats returns the pool's counters and current size.
func (p *Pool[V]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	for _, c := range p.classes {
		st.Ready += len(c.ready)
		st.Target += p.cfg.Size
	}
	return st
}

func (p *Pool[V]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run is the refill loop: it sweeps, then refills one VM of a class short
// of Size once creates are quiet, until Close.
func (p *Pool[V]) run() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Sweep)
	defer t.Stop()
	for {
		p.sweep()
		k, wait, ok := p.next()
		if ok && wait <= 0 {
			p.refill(k)
			continue
		}
		// A refill waiting out a quiet period or a backoff (up to
		// maxBackoff) still lets the sweeps run: a warm VM on a sidecar
		// that drains or died is discarded within Sweep, not when the wait
		// ends.
		var due <-chan time.Time
		if ok {
			due = time.After(wait)
		}
		select {
		case <-p.life.Done():
			return
		case <-t.C:
		case <-due:
		case <-p.wake:
		}
	}
}

// next picks the class to refill and how long to wait before doing so; ok
// is false when no class is short. A class due now is counted as filling.
func (p *Pool[V]) next() (k classKey, wait time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return k, 0, false
	}
	now := p.cfg.Now()
	quietAt := p.quietSince.Add(p.cfg.Quiet)
	for key, c := range p.classes {
		if len(c.ready)+c.filling >= p.cfg.Size {
			continue
		}
		at := quietAt
		if c.retryAt.After(at) {
			at = c.retryAt
		}
		w := at.Sub(now)
		// The shared class first, as it serves every other tenant.
		if !ok || w < wait || (w == wait && key == classKey{}) {
			k, wait, ok = key, w, true
		}
	}
	if ok && wait <= 0 {
		p.classes[k].filling++
	}
	return k, wait, ok
}

// refill creates and warms one VM for class k; next has counted it as
// filling.
func (p *Pool[V]) refill(k classKey) {
	start := time.Now()
	w, err := p.newWarmVM(k)
	elapsed := time.Since(start)
	p.mu.Lock()
	c := p.classes[k]
	if c != nil {
		c.filling--
	}
	close(p.filled)
	p.filled = make(chan struct{})
	switch {
	case err != nil:
		if c != nil {
			c.failures++
			c.retryAt = p.cfg.Now().Add(min(time.Duration(1<<min(c.failures-1, 5))*time.Second, maxBackoff))
		}
		closing := p.closing
		if !closing {
			p.stats.RefillFailures++
		}
		p.mu.Unlock()
		if !closing {
			ev := p.log.Warn()
			if gateway.ErrorCode(err) == gateway.CodeResourceExhausted {
				// A full node is no fault: a tenant's VM will free room.
				ev = p.log.Debug()
			}
			ev.Err(err).Str("tenant", k.tenant).Msg("refilling the warm VMs")
		}
	case p.closing || c == nil:
		p.mu.Unlock()
		p.dispose(context.Background(), w)
	default:
		c.failures = 0
		c.ready = append(c.ready, w)
		p.stats.Refills++
		p.stats.RefillSeconds += elapsed.Seconds()
		p.mu.Unlock()
	}
}

// create places, creates and warms up one VM.
func (p *Pool[V]) newWarmVM(k classKey) (*warmVM[V], error) {
	ctx, cancel := context.WithTimeout(p.life, refillTimeout)
	defer cancel()
	tenant := ""
	if k.isolated {
		tenant = k.tenant
	}
	lease, err := p.placer.Acquire(ctx, tenant, k.isolated)
	if err != nil {
		return nil, err
	}
	vm, err := p.create(ctx, lease, p.cfg.Options)
	if err != nil {
		lease.Release()
		return nil, fmt.Errorf("warmpool: create: %w", err)
	}
	w := &warmVM[V]{vm: vm, lease: lease}
	for _, cmd := range warmUpCommands {
		res, err := vm.Exec(ctx, cmd, agentos.ExecOptions{})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit code %d, stderr %q", res.ExitCode, res.Stderr)
		}
		if err != nil {
			p.dispose(context.WithoutCancel(ctx), w)
			return nil, fmt.Errorf("warmpool: warm-up %q: %w", cmd, err)
		}
	}
	return w, nil
}

// sweep discards warm VMs that can no longer be handed out, and the warm
// VMs of isolated tenants idle for IsolatedIdle.
func (p *Pool[V]) sweep() {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	now := p.cfg.Now()
	var stale []*warmVM[V]
	for k, c := range p.classes {
		if k.isolated && now.Sub(c.wanted) >= p.cfg.IsolatedIdle {
			stale = append(stale, c.ready...)
			c.ready = nil
			if c.filling == 0 {
				delete(p.classes, k)
			}
			continue
		}
		kept := c.ready[:0]
		for _, w := range c.ready {
			if w.usable() {
				kept = append(kept, w)
			} else {
				stale = append(stale, w)
			}
		}
		clear(c.ready[len(kept):])
		c.ready = kept
	}
	p.discardLocked(stale)
	p.mu.Unlock()
}

// discardLocked disposes warm VMs on goroutines Close waits for. p.mu
// must be held.
func (p *Pool[V]) discardLocked(ws []*warmVM[V]) {
	for _, w := range ws {
		p.stats.Discarded++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.dispose(context.Background(), w)
		}()
	}
}

// dispose ends a warm VM nobody took and gives its hold back, bounded by
// ctx and disposeTimeout.
func (p *Pool[V]) dispose(ctx context.Context, w *warmVM[V]) {
	ctx, cancel := context.WithTimeout(ctx, disposeTimeout)
	defer cancel()
	if err := w.vm.Dispose(ctx); err != nil {
		var exited *agentos.SidecarExitedError
		if !errors.As(err, &exited) {
			p.log.Warn().Err(err).Str("sidecar", w.lease.SidecarID()).Msg("dispose a warm VM")
		}
	}
	w.lease.Release()
}

// Close stops the refills and disposes every warm VM nobody took,
// waiting for all of the pool's goroutines; ctx bounds the disposals.
func (p *Pool[V]) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil
	}
	p.closing = true
	var all []*warmVM[V]
	for _, c := range p.classes {
		all = append(all, c.ready...)
		c.ready = nil
	}
	p.mu.Unlock()
	p.endLife()
	var wg sync.WaitGroup
	for _, w := range all {
		wg.Go(func() { p.dispose(ctx, w) })
	}
	wg.Wait()
	p.wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("warmpool: shutdown: %w", err)
	}
	return nil
}
