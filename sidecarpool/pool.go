// Package sidecarpool runs a pool of agentos-sidecar processes and places VMs
// on them. A caller acquires a lease (a hold on one sidecar) before it creates
// a VM and releases it when the VM is gone; holds decide where the next VM
// goes, when a sidecar is idle, and when a draining sidecar may be stopped.
//
// Every sidecar belongs to the pool, never to the request that caused its
// spawn: spawns, shutdowns and crash watching run on goroutines the pool owns
// and Close waits for.
package sidecarpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// Sidecar states as SidecarInfo reports them.
const (
	// StateStarting: the process is being spawned; holds may already wait on it.
	StateStarting = "starting"
	// StateReady: the sidecar takes new holds.
	StateReady = "ready"
	// StateDraining: the sidecar is over the memory high-water mark; it keeps
	// its holds but gets no new ones, and is stopped once they are released.
	StateDraining = "draining"
	// StateStopping: the sidecar is being shut down.
	StateStopping = "stopping"
)

// Config defaults.
const (
	DefaultMaxSidecars   = 4
	DefaultVMsPerSidecar = 16
	DefaultIdleTimeout   = 5 * time.Minute
)

// spawnTimeout bounds one spawn and handshake. A healthy sidecar answers in
// well under a second; this only keeps a wedged start from holding a slot
// forever.
const spawnTimeout = 30 * time.Second

// Config configures a Pool. The zero value is usable.
type Config struct {
	// MaxSidecars is the hard cap on sidecar processes, whatever their state
	// (default 4). Isolated tenants' sidecars count toward it.
	MaxSidecars int
	// VMsPerSidecar is how many holds one sidecar takes (default 16).
	VMsPerSidecar int
	// MinIdleSidecars is how many shared sidecars with no holds are kept
	// warm (default 0); only fresh ones, that never served, are kept past
	// IdleTimeout. The pool tops this up in the background; Warm does it
	// at once and reports errors.
	MinIdleSidecars int
	// IdleTimeout is how long a sidecar beyond MinIdleSidecars may sit
	// without holds before it is stopped (default 5 min). The reaper runs
	// every IdleTimeout/4, between 10 ms and 5 s.
	IdleTimeout time.Duration
	// MemoryHighWater is the RSS in bytes above which a sidecar gets no new
	// holds and is replaced once its holds are released (0: off).
	MemoryHighWater int64
	// Placement chooses among the sidecars with room (default PlacementPack).
	Placement Placement
	// TenantAffinity keeps a tenant's VMs off the shared sidecars that hold
	// another tenant's, as long as a sidecar can be started for it: on the
	// pinned engine one VM can stall every other VM of its sidecar (a
	// process waiting on stdin, a shell at its prompt), so tenants that
	// share no sidecar cannot slow each other. When MaxSidecars are
	// running, a VM shares with another tenant rather than fail (counted in
	// Stats.SharedPlacements). VMs placed for no tenant (warm VMs) go
	// where Placement says.
	TenantAffinity bool
	// Engine is the installed engine every sidecar runs (LocateEngine);
	// it takes the place of Options.Engine when set.
	Engine Engine
	// Options are passed to Start for every sidecar.
	Options agentos.Options
	// Start spawns a sidecar; nil means agentos.Start. Tests inject failures.
	Start func(ctx context.Context, o agentos.Options) (*agentos.Sidecar, error)
	// Backoff paces spawn attempts after failures.
	Backoff Backoff
	// OnExit, when set, is called on a goroutine owned by the pool when a
	// sidecar dies without being asked to, with its last info and why it died.
	// Close waits for it to return.
	OnExit func(SidecarInfo, error)
	// Now is the clock for idle and backoff decisions (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Engine != (Engine{}) {
		c.Options.Engine = c.Engine
	}
	if c.MaxSidecars <= 0 {
		c.MaxSidecars = DefaultMaxSidecars
	}
	if c.VMsPerSidecar <= 0 {
		c.VMsPerSidecar = DefaultVMsPerSidecar
	}
	c.MinIdleSidecars = min(max(c.MinIdleSidecars, 0), c.MaxSidecars)
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	c.MemoryHighWater = max(c.MemoryHighWater, 0)
	if c.Placement == "" {
		c.Placement = PlacementPack
	}
	if c.Start == nil {
		c.Start = agentos.Start
	}
	c.Backoff = c.Backoff.withDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Engine is an installed engine: its sidecar binary and software packages.
type Engine = agentos.Engine

// LocateEngine finds the installed engine (`make setup` installs it), or
// says where it looked.
func LocateEngine() (Engine, error) { return agentos.LocateEngine() }

// SidecarInfo describes one pooled sidecar; the type lives in the root
// package, so that the handlers that show it need not import the pool.
type SidecarInfo = gateway.SidecarInfo

// Stats are the pool's counters and current sizes; the type lives in the
// root package, as SidecarInfo does.
type Stats = gateway.SidecarPoolStats

// Pool places VMs on a bounded set of sidecar processes.
type Pool struct {
	cfg   Config
	every time.Duration // reaper period

	// life ends when Close begins: it stops the reaper and aborts spawns in
	// flight. Spawns derive from it, never from a caller's context.
	life    context.Context
	endLife context.CancelFunc
	// stopCtx bounds sidecar shutdowns; Close cancels it when its own context
	// ends, which turns graceful shutdowns into kills.
	stopCtx   context.Context
	abortStop context.CancelFunc

	kick   chan struct{} // wakes the reaper before its next tick
	wg     sync.WaitGroup
	closed chan struct{} // closed when Close has finished

	everReady atomic.Bool

	mu           sync.Mutex
	sidecars     []*sidecar // in id order
	nextID       int
	isClosed     bool
	tracker      restartTracker
	restartsOwed int // crashes not yet answered by a successful spawn
	stats        Stats
	closeErrs    []error
}

// sidecar is the pool's record of one sidecar. Its fields are guarded by
// Pool.mu, except ready/startErr/sc, which are written once before ready is
// closed and may be read without the lock after it is.
type sidecar struct {
	id        string
	owner     string // the isolated tenant it serves; "" when shared
	state     string
	sc        *agentos.Sidecar // nil while starting
	began     time.Time        // when the spawn began
	ready     chan struct{}    // closed when the spawn finished, either way
	startErr  error            // why the spawn failed
	holds     int
	tenants   map[string]int // holds per tenant
	served    int            // holds ever granted; a sidecar that served none is fresh
	idleSince time.Time      // when holds last reached zero
	rss       int64          // last RSS read
	removed   bool           // no longer in Pool.sidecars
}

// New returns a pool and starts its reaper; it spawns nothing itself (see
// Warm). Close must be called to stop it.
func New(cfg Config) *Pool {
	cfg = cfg.withDefaults()
	p := &Pool{
		cfg:     cfg,
		every:   min(max(cfg.IdleTimeout/4, 10*time.Millisecond), 5*time.Second),
		kick:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
		tracker: newRestartTracker(cfg.Backoff),
	}
	p.life, p.endLife = context.WithCancel(context.Background())
	p.stopCtx, p.abortStop = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.reap()
	return p
}

// Lease is a hold on one sidecar, taken by Acquire and given back by Release.
type Lease struct {
	p        *Pool
	e        *sidecar
	tenant   string
	released atomic.Bool
}

// Sidecar returns the leased sidecar.
func (l *Lease) Sidecar() *agentos.Sidecar { return l.e.sc }

// SidecarID returns the pool-assigned id of the leased sidecar.
func (l *Lease) SidecarID() string { return l.e.id }

// Release gives the hold back. Only the first call counts, and it is safe
// after the sidecar died or the pool was closed.
func (l *Lease) Release() {
	if l.released.Swap(true) {
		return
	}
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unholdLocked(l.e, l.tenant)
	if l.e.holds == 0 && l.e.state == StateDraining && !l.e.removed && !p.isClosed {
		p.retireLocked(l.e)
	}
}

// Acquire takes a hold for tenantID on the sidecar the placement rule picks
// among those it may use, spawning one when none has room. Isolated tenants
// get sidecars of their own. A shared hold for no tenant ("") is the
// caller's own, such as a warm VM not yet handed out: it is listed under no
// tenant until Lease.Assign names one. It fails with CodeResourceExhausted when MaxSidecars are all full,
// and with CodeUnavailable when the pool is closed or spawns are failing.
func (p *Pool) Acquire(ctx context.Context, tenantID string, isolated bool) (*Lease, error) {
	if isolated && tenantID == "" {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "an isolated tenant needs an id")
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, ctxError(err, "the request ended before a sidecar was acquired")
		}
		p.mu.Lock()
		pl, err := p.placeLocked(tenantID, isolated)
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		e := pl.e
		if pl.wait {
			select {
			case <-e.ready:
			case <-ctx.Done():
				// The spawn goes on without us: the sidecar is the pool's
				// and joins it idle.
				p.mu.Lock()
				p.unholdLocked(e, tenantID)
				p.mu.Unlock()
				return nil, ctxError(ctx.Err(), "the request ended while sidecar %s was starting", e.id)
			}
			if e.startErr != nil {
				return nil, e.startErr
			}
		}
		var rss int64
		if pl.checkRSS {
			// Read outside the lock: it is a file read under /proc.
			rss = e.sc.MemoryRSS()
		}
		p.mu.Lock()
		switch {
		case p.isClosed:
			p.unholdLocked(e, tenantID)
			p.mu.Unlock()
			return nil, errClosed()
		case e.removed:
			// It died between placement and now; its holds went with it.
			p.mu.Unlock()
			continue
		case pl.checkRSS:
			e.rss = rss
			if rss > p.cfg.MemoryHighWater && e.state == StateReady {
				p.unholdLocked(e, tenantID)
				p.drainLocked(e)
				p.mu.Unlock()
				continue // each pass drains one sidecar, so this ends
			}
		}
		p.mu.Unlock()
		return &Lease{p: p, e: e, tenant: tenantID}, nil
	}
}

// placement is where placeLocked put a hold.
type placement struct {
	e *sidecar
	// wait: the sidecar is still starting.
	wait bool
	// checkRSS: the sidecar served before and the high-water mark is on. A
	// fresh sidecar is not checked, so the holds that caused its spawn always
	// land on it even when the mark is below a fresh sidecar's RSS.
	checkRSS bool
}

// placeLocked puts a hold on the usable sidecar with room that the placement
// rule prefers, or on a newly spawned one. p.mu must be held.
func (p *Pool) placeLocked(tenant string, isolated bool) (placement, error) {
	if p.isClosed {
		return placement{}, errClosed()
	}
	owner := ""
	if isolated {
		owner = tenant
	}
	affine := p.cfg.TenantAffinity && owner == "" && tenant != ""
	var best, shared *sidecar
	for _, e := range p.sidecars {
		if e.owner != owner || (e.state != StateReady && e.state != StateStarting) || e.holds >= p.cfg.VMsPerSidecar {
			continue
		}
		if affine && e.foreign(tenant) {
			if shared == nil || p.cfg.Placement.better(e, shared) {
				shared = e
			}
			continue
		}
		if best == nil || p.cfg.Placement.better(e, best) {
			best = e
		}
	}
	now := p.cfg.Now()
	if best == nil && shared != nil && (len(p.sidecars) >= p.cfg.MaxSidecars || !p.tracker.allow(now)) {
		// No sidecar of the tenant's own can be started: sharing one beats
		// refusing the VM.
		best = shared
		p.stats.SharedPlacements++
	}
	if best == nil {
		if len(p.sidecars) >= p.cfg.MaxSidecars {
			return placement{}, gateway.Errorf(gateway.CodeResourceExhausted,
				"no sidecar has room: all %d sidecars are in use (at most %d VMs each)", p.cfg.MaxSidecars, p.cfg.VMsPerSidecar).
				WithDetail("maxSidecars", p.cfg.MaxSidecars).WithDetail("vmsPerSidecar", p.cfg.VMsPerSidecar)
		}
		if err := p.backoffErrLocked(now); err != nil {
			return placement{}, err
		}
		best = p.spawnLocked(owner, now)
	} else if best.holds == 0 && best.state == StateReady && owner == "" && p.cfg.MinIdleSidecars > 0 {
		// A warm sidecar is being used up; let the reaper warm another.
		p.poke()
	}
	pl := placement{
		e:        best,
		wait:     best.state == StateStarting,
		checkRSS: best.state == StateReady && best.served > 0 && p.cfg.MemoryHighWater > 0,
	}
	best.holds++
	best.served++
	best.tenants[tenant]++
	return pl, nil
}

// foreign reports whether e holds VMs of a tenant other than tenant (warm
// VMs, held for no tenant, do not count). The pool's mutex must be held.
func (e *sidecar) foreign(tenant string) bool {
	for t, n := range e.tenants {
		if n > 0 && t != tenant && t != "" {
			return true
		}
	}
	return false
}

// Foreign reports whether, under the pool's TenantAffinity, tenantID should
// not be handed a VM on the leased sidecar: it holds another tenant's VMs.
// It is always false without TenantAffinity and for an isolated tenant's
// sidecar.
func (l *Lease) Foreign(tenantID string) bool {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.TenantAffinity && l.e.owner == "" && l.e.foreign(tenantID)
}

// backoffErrLocked returns the error for an attempt to spawn during backoff,
// or nil when a spawn may begin. p.mu must be held.
func (p *Pool) backoffErrLocked(now time.Time) error {
	if p.tracker.allow(now) {
		return nil
	}
	at := p.tracker.retryAt()
	return gateway.Wrap(gateway.CodeUnavailable, p.tracker.lastErr,
		"no sidecar could be started (%d failed attempts in a row); retrying in %s, at %s",
		p.tracker.failures, at.Sub(now).Round(time.Millisecond), at.UTC().Format(time.RFC3339Nano)).
		WithDetail("retryAt", at)
}

// spawnLocked records a starting sidecar and spawns it on a pool goroutine.
// p.mu must be held and the pool open.
func (p *Pool) spawnLocked(owner string, now time.Time) *sidecar {
	p.nextID++
	e := &sidecar{
		id:      "sc-" + strconv.Itoa(p.nextID),
		owner:   owner,
		state:   StateStarting,
		began:   now,
		ready:   make(chan struct{}),
		tenants: map[string]int{},
	}
	p.sidecars = append(p.sidecars, e)
	p.wg.Add(1)
	go p.runSpawn(e)
	return e
}

// runSpawn starts e's process. Its context is the pool's, so a caller that
// gives up waiting does not abort a spawn others may be waiting on.
func (p *Pool) runSpawn(e *sidecar) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.life, spawnTimeout)
	sc, err := p.cfg.Start(ctx, p.cfg.Options)
	cancel()

	p.mu.Lock()
	now := p.cfg.Now()
	if err != nil {
		if p.isClosed {
			e.startErr = gateway.Wrap(gateway.CodeUnavailable, err, "the sidecar pool is closed")
		} else {
			p.stats.SpawnFailures++
			p.tracker.failed(e.began, now, err)
			e.startErr = gateway.Wrap(gateway.CodeUnavailable, err, "could not start a sidecar")
		}
		p.removeLocked(e)
		close(e.ready)
		p.mu.Unlock()
		return
	}
	p.stats.Spawned++
	p.tracker.succeeded()
	p.everReady.Store(true)
	if p.restartsOwed > 0 {
		p.restartsOwed--
		p.stats.Restarts++
	}
	e.sc = sc
	if p.isClosed {
		// Close began while we spawned and could not see this process.
		e.startErr = errClosed()
		e.state = StateStopping
		p.removeLocked(e)
		close(e.ready)
		p.mu.Unlock()
		p.recordCloseErr(e, sc.Close(p.stopCtx))
		return
	}
	e.state = StateReady
	if e.holds == 0 {
		e.idleSince = now
	}
	close(e.ready)
	p.wg.Add(1)
	go p.watch(e)
	p.mu.Unlock()
}

// watch reports e's death when nobody asked for it. Every sidecar dies in the
// end (Close stops them all), so this goroutine always returns.
func (p *Pool) watch(e *sidecar) {
	defer p.wg.Done()
	<-e.sc.Done()
	p.mu.Lock()
	if e.state == StateStopping || e.removed {
		p.mu.Unlock()
		return
	}
	info := p.infoLocked(e)
	p.removeLocked(e)
	p.stats.Crashes++
	p.restartsOwed++
	p.mu.Unlock()
	p.poke() // MinIdle may need a replacement
	if p.cfg.OnExit != nil {
		p.cfg.OnExit(info, e.sc.Err())
	}
}

// drainLocked stops new holds on e and retires it once it has none.
// p.mu must be held.
func (p *Pool) drainLocked(e *sidecar) {
	e.state = StateDraining
	if e.holds == 0 {
		p.retireLocked(e)
	}
}

// retireLocked stops a sidecar the pool no longer wants. p.mu must be held
// and the pool open.
func (p *Pool) retireLocked(e *sidecar) {
	p.stats.Retired++
	p.stopLocked(e)
}

// stopLocked shuts e down on a pool goroutine; it stays counted against
// MaxSidecars until its process is gone. p.mu must be held.
func (p *Pool) stopLocked(e *sidecar) {
	e.state = StateStopping
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := e.sc.Close(p.stopCtx)
		p.mu.Lock()
		p.removeLocked(e)
		p.mu.Unlock()
		p.recordCloseErr(e, err)
		p.poke() // a slot is free: MinIdle may want it
	}()
}

// recordCloseErr keeps shutdown errors for Close to return. Shutdowns while
// the pool runs (idle or memory retirement) have nobody to report to.
func (p *Pool) recordCloseErr(e *sidecar, err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isClosed {
		p.closeErrs = append(p.closeErrs, fmt.Errorf("sidecarpool: close %s: %w", e.id, err))
	}
}

// unholdLocked gives back one hold of tenant on e. p.mu must be held.
func (p *Pool) unholdLocked(e *sidecar, tenant string) {
	e.holds--
	if e.tenants[tenant]--; e.tenants[tenant] <= 0 {
		delete(e.tenants, tenant)
	}
	if e.holds == 0 {
		e.idleSince = p.cfg.Now()
	}
}

// removeLocked drops e from the pool. p.mu must be held.
func (p *Pool) removeLocked(e *sidecar) {
	if e.removed {
		return
	}
	e.removed = true
	p.sidecars = slices.DeleteFunc(p.sidecars, func(x *sidecar) bool { return x == e })
}

// poke wakes the reaper without blocking.
func (p *Pool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// reap is the pool's background loop: on every tick it checks memory, stops
// sidecars idle for too long and tops up MinIdleSidecars; on a kick it does
// the latter two without reading /proc.
func (p *Pool) reap() {
	defer p.wg.Done()
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case <-t.C:
			p.checkMemory()
			p.maintain()
		case <-p.kick:
			p.maintain()
		}
	}
}

// checkMemory drains every sidecar that served and is over the high-water
// mark. The /proc reads happen outside the lock.
func (p *Pool) checkMemory() {
	if p.cfg.MemoryHighWater <= 0 {
		return
	}
	p.mu.Lock()
	var cands []*sidecar
	for _, e := range p.sidecars {
		if e.state == StateReady && e.served > 0 {
			cands = append(cands, e)
		}
	}
	p.mu.Unlock()
	rss := make([]int64, len(cands))
	for i, e := range cands {
		rss[i] = e.sc.MemoryRSS()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isClosed {
		return
	}
	for i, e := range cands {
		e.rss = rss[i]
		if e.state == StateReady && !e.removed && rss[i] > p.cfg.MemoryHighWater {
			p.drainLocked(e)
		}
	}
}

// maintain stops sidecars idle past IdleTimeout and tops up MinIdleSidecars.
func (p *Pool) maintain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isClosed {
		return
	}
	now := p.cfg.Now()
	p.reapIdleLocked(now)
	// During backoff the top-up waits for a later tick; Warm and Acquire
	// are the ones that report spawn errors.
	_, _ = p.topUpLocked(now)
}

// reapIdleLocked retires sidecars idle for IdleTimeout or longer, keeping the
// MinIdleSidecars shared ones used most recently among those that never
// served. A sidecar that served keeps the memory its VMs made it grow to
// (measured on 0.2.21: 250 MiB after one VM, 600 after 64, against 21 MiB
// fresh), so the warm ones are fresh: a served one is retired too and
// topUpLocked spawns a fresh one in its place, so that the node's memory
// returns to its baseline once a load has passed. Isolated sidecars are
// never kept warm: no other tenant could use them. p.mu must be held.
func (p *Pool) reapIdleLocked(now time.Time) {
	var idle []*sidecar
	for _, e := range p.sidecars {
		if e.state == StateReady && e.holds == 0 {
			idle = append(idle, e)
		}
	}
	slices.SortStableFunc(idle, func(a, b *sidecar) int { return b.idleSince.Compare(a.idleSince) })
	kept := 0
	for _, e := range idle {
		if e.owner == "" && e.served == 0 && kept < p.cfg.MinIdleSidecars {
			kept++
			continue
		}
		if now.Sub(e.idleSince) >= p.cfg.IdleTimeout {
			p.retireLocked(e)
		}
	}
}

// topUpLocked spawns shared sidecars until MinIdleSidecars are idle or
// starting without holds, within MaxSidecars. It returns every such starting
// sidecar, for Warm to wait on. p.mu must be held and the pool open.
func (p *Pool) topUpLocked(now time.Time) ([]*sidecar, error) {
	var starting []*sidecar
	warm := 0
	for _, e := range p.sidecars {
		if e.owner != "" || e.holds > 0 {
			continue
		}
		switch e.state {
		case StateReady:
			warm++
		case StateStarting:
			warm++
			starting = append(starting, e)
		}
	}
	n := min(p.cfg.MinIdleSidecars-warm, p.cfg.MaxSidecars-len(p.sidecars))
	if n <= 0 {
		return starting, nil
	}
	if err := p.backoffErrLocked(now); err != nil {
		return starting, err
	}
	for range n {
		starting = append(starting, p.spawnLocked("", now))
	}
	return starting, nil
}

// Warm spawns shared sidecars until MinIdleSidecars are idle and waits for
// them; ctx bounds the wait, not the sidecars' lives.
func (p *Pool) Warm(ctx context.Context) error {
	p.mu.Lock()
	if p.isClosed {
		p.mu.Unlock()
		return errClosed()
	}
	starting, err := p.topUpLocked(p.cfg.Now())
	p.mu.Unlock()
	if err != nil {
		return err
	}
	for _, e := range starting {
		select {
		case <-e.ready:
			if e.startErr != nil {
				return e.startErr
			}
		case <-ctx.Done():
			return ctxError(ctx.Err(), "gave up waiting for sidecar %s to start", e.id)
		}
	}
	return nil
}

// Sidecars describes every pooled sidecar, in id order. RSS is read fresh.
func (p *Pool) Sidecars() []SidecarInfo {
	p.mu.Lock()
	infos := make([]SidecarInfo, len(p.sidecars))
	procs := make([]*agentos.Sidecar, len(p.sidecars))
	for i, e := range p.sidecars {
		infos[i] = p.infoLocked(e)
		procs[i] = e.sc
	}
	p.mu.Unlock()
	for i, sc := range procs {
		if sc != nil {
			infos[i].RSS = sc.MemoryRSS()
		}
	}
	return infos
}

// infoLocked describes e. p.mu must be held.
func (p *Pool) infoLocked(e *sidecar) SidecarInfo {
	info := SidecarInfo{
		ID:        e.id,
		State:     e.state,
		Holds:     e.holds,
		Tenants:   make([]string, 0, len(e.tenants)),
		Isolated:  e.owner != "",
		Owner:     e.owner,
		RSS:       e.rss,
		StartedAt: e.began,
	}
	for t := range e.tenants {
		if t != "" {
			info.Tenants = append(info.Tenants, t)
		}
	}
	slices.Sort(info.Tenants)
	if e.sc != nil {
		info.Pid = e.sc.Pid()
		info.StartedAt = e.sc.StartedAt()
	}
	return info
}

// Stats returns the pool's counters and current sizes.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.sidecars)
	for _, e := range p.sidecars {
		if e.state == StateReady && e.holds == 0 {
			s.Idle++
		}
	}
	return s
}

// Ready reports whether the pool can serve: some sidecar has completed its
// handshake since New, and Close has not been called.
func (p *Pool) Ready() bool {
	if !p.everReady.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.isClosed
}

// Close stops new leases (Acquire then fails with CodeUnavailable), shuts
// every sidecar down gracefully and in parallel, and waits for all of the
// pool's goroutines. When ctx ends first the remaining sidecars are killed
// rather than waited for. A second call waits for the first.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.isClosed {
		p.mu.Unlock()
		select {
		case <-p.closed:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("sidecarpool: close: %w", ctx.Err())
		}
	}
	p.isClosed = true
	for _, e := range p.sidecars {
		if e.state == StateReady || e.state == StateDraining {
			p.stopLocked(e)
		}
	}
	p.mu.Unlock()
	// Spawns in flight see the pool closed and stop what they started.
	p.endLife()
	stop := context.AfterFunc(ctx, p.abortStop)
	p.wg.Wait()
	stop()
	p.abortStop()

	p.mu.Lock()
	errs := slices.SortedFunc(slices.Values(p.closeErrs), func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	p.mu.Unlock()
	close(p.closed)
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("sidecarpool: close cut short: %w", err))
	}
	return errors.Join(errs...)
}

func errClosed() *gateway.Error {
	return gateway.Errorf(gateway.CodeUnavailable, "the sidecar pool is closed")
}

// ctxError turns a context's end into the domain error: a deadline keeps its
// code; a cancellation means the caller went away.
func ctxError(err error, format string, args ...any) *gateway.Error {
	code := gateway.CodeUnavailable
	if errors.Is(err, context.DeadlineExceeded) {
		code = gateway.CodeDeadlineExceeded
	}
	return gateway.Wrap(code, err, format, args...)
}
