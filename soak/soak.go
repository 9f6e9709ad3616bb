// Package soak drives a real gateway binary under mixed load for minutes
// while SIGKILLing one of its sidecars at a fixed period, and reports what
// it saw: operations by kind with their latency, errors by code, and the
// figures that must stay at zero (acknowledged writes lost, streams hung,
// goroutines, processes and temporary files leaked).
//
// Each tenant has three workers, each owning one VM at a time: a mixed
// worker (buffered and streamed execs, file writes each read back, and
// earlier writes read back again), a process worker (spawned processes
// whose output stream is closed and resumed from its last event id on the
// way to the exit) and an agent worker (pi turns against the mock
// Anthropic model). A VM whose sidecar was killed turns lost: its worker
// counts the failures as caused by the kills, forgets its writes and creates
// another VM. A write the gateway acknowledged on a VM that was not lost
// must read back identical, now and at the end of the run.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// Config says what a run does. The zero values of the optional fields
// take the defaults of make soak.
type Config struct {
	// GatewayBin is the gateway binary (go build ./cmd/server).
	GatewayBin string
	// Duration is how long the load runs (default 10 minutes).
	Duration time.Duration
	// KillEvery is the period of the sidecar kills (default 60 s).
	KillEvery time.Duration
	// Tenants is the number of tenants (default 3).
	Tenants int
	// Dir holds the gateway's data directory, TMPDIR and log; empty: a
	// new temporary directory, removed after the run unless Keep is set.
	Dir  string
	Keep bool
	// Progress, when set, gets a line about the run every ProgressEvery
	// (default 30 s).
	Progress      io.Writer
	ProgressEvery time.Duration
}

func (c Config) withDefaults() Config {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Minute
	}
	if c.KillEvery <= 0 {
		c.KillEvery = 60 * time.Second
	}
	if c.Tenants <= 0 {
		c.Tenants = 3
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 30 * time.Second
	}
	return c
}

// Pool settings of the soak's gateway: three VMs to a sidecar, so that the
// nine VMs of three tenants share about three sidecars and a kill loses
// about a third of them.
const (
	vmsPerSidecar = 3
	maxSidecars   = 6
)

// run is the state of one soak run.
type run struct {
	cfg   Config
	began time.Time // when Run was called, for the phase lines
	gw    *gateway
	mock  *mockanthropic.Server
	tr    *http.Transport
	rec   *recorder

	// baseSidecars is how many sidecars ran when the goroutine baseline
	// was taken.
	baseSidecars int

	// tenants are the tenants' clients, whose listings catch a VM whose
	// create ended on the gateway after the worker had given up on it.
	tenants []*client.Client

	mu     sync.Mutex
	vms    map[string]*client.Client // every VM created, by id, with its tenant's client
	groups map[int]bool              // the process groups of the gateway and every sidecar seen
}

func (r *run) addVM(c *client.Client, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vms[id] = c
}

func (r *run) addGroup(pgid int) {
	if pgid <= 1 {
		return // a sidecar still starting has no pid yet
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[pgid] = true
}

// Run runs a soak and returns its report; an error means the soak could
// not run (the gateway did not start, a tenant could not be created), not
// that it failed: see Report.Passed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	began := time.Now()
	cfg = cfg.withDefaults()
	if cfg.GatewayBin == "" {
		return nil, errors.New("soak: no gateway binary")
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "agentos-soak-")
		if err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		dir = d
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	}
	mock, err := mockanthropic.Listen()
	if err != nil {
		return nil, fmt.Errorf("soak: mock model: %w", err)
	}
	defer mock.Close()
	gw, err := startGateway(ctx, cfg.GatewayBin, dir, vmsPerSidecar, maxSidecars)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	defer tr.CloseIdleConnections()
	r := &run{cfg: cfg, began: began, gw: gw, mock: mock, tr: tr, rec: newRecorder(),
		vms: map[string]*client.Client{}, groups: map[int]bool{gw.pid(): true}}
	rep, err := r.soak(ctx)
	if err != nil {
		gw.Kill()
		return nil, fmt.Errorf("%w (gateway log: %s)", err, gw.logPath)
	}
	return rep, nil
}

// logf writes a line about the run's phases to Progress.
func (r *run) logf(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "soak: [%s] %s\n", time.Since(r.began).Round(time.Second), fmt.Sprintf(format, args...))
	}
}

func (r *run) client(key string) (*client.Client, error) {
	c, err := client.New(r.gw.url, key, client.WithHTTPClient(&http.Client{Transport: r.tr}))
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	return c, nil
}

func (r *run) soak(ctx context.Context) (*Report, error) {
	admin, err := r.client(r.gw.key)
	if err != nil {
		return nil, err
	}
	var tenants []*client.Client
	for i := range r.cfg.Tenants {
		tn, err := admin.CreateTenant(ctx, client.TenantCreate{Name: fmt.Sprintf("soak-%d", i+1)})
		if err != nil {
			return nil, fmt.Errorf("soak: create tenant: %w", err)
		}
		k, err := admin.CreateKey(ctx, tn.ID)
		if err != nil {
			return nil, fmt.Errorf("soak: create key: %w", err)
		}
		c, err := r.client(k.Key)
		if err != nil {
			return nil, err
		}
		tenants = append(tenants, c)
	}
	r.tenants = tenants
	if n, err := goroutines(ctx, admin); err == nil {
		r.logf("gateway ready (%d goroutines), %d tenants created; warming up", n, len(tenants))
	}
	var workers []*worker
	for i, c := range tenants {
		for _, k := range []workerKind{mixedWorker, processWorker, agentWorker} {
			workers = append(workers, &worker{r: r, name: fmt.Sprintf("t%d-%s", i+1, k), c: c, kind: k,
				rng: rand.New(rand.NewPCG(uint64(i), uint64(k)))})
		}
	}

	// A first round of every kind of operation, before the baseline: a
	// goroutine the gateway starts on first use and keeps is not a leak.
	warm := workers[:3]
	eachAtOnce(warm, func(w *worker) { w.once(ctx) })
	r.deleteVMs(ctx)
	for _, w := range warm {
		w.dropVM()
	}
	baseline, err := r.settledGoroutines(ctx, -1)
	if err != nil {
		return nil, err
	}
	r.logf("warmed up; the gateway's baseline is %d goroutines; every worker makes its VM", baseline)
	r.rec = newRecorder()
	// Every worker makes its VM (and an agent worker its session) before
	// the load's clock starts: on a loaded machine a session takes a minute
	// to open, which would leave no time in the load for the turns it is
	// opened for. These steps are recorded with the load's.
	eachAtOnce(workers, func(w *worker) { _ = w.prepare(ctx) })
	r.logf("workers ready; load for %s", r.cfg.Duration)

	start := time.Now()
	stop := make(chan struct{})
	wctx, abandon := context.WithCancel(ctx)
	defer abandon()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(wctx, stop)
		}()
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		r.killer(wctx, admin, stop)
	}()
	go func() {
		defer bg.Done()
		r.watchSidecars(wctx, admin, stop, start)
	}()

	select {
	case <-ctx.Done():
	case <-time.After(r.cfg.Duration):
	}
	close(stop)
	// Every operation is bounded by its deadline; past a generous bound
	// the run is abandoned rather than left waiting.
	done := make(chan struct{})
	go func() {
		wg.Wait()
		bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		abandon()
		<-done
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("soak: interrupted: %w", ctx.Err())
	}

	r.logf("load stopped after %s; reading back every write still promised", elapsed.Round(time.Second))
	// Every write still promised must read back as written.
	for _, w := range workers {
		w.verifyAll(ctx)
	}
	r.deleteVMs(ctx)

	rep := &Report{Duration: elapsed, Tenants: r.cfg.Tenants, GoroutinesBaseline: baseline}
	after, err := r.settledGoroutines(ctx, baseline)
	if err != nil {
		return nil, err
	}
	rep.GoroutinesAfter = after
	rep.LeakedGoroutines = max(0, after-baseline)
	r.tr.CloseIdleConnections()
	r.logf("VMs deleted, %d goroutines; stopping the gateway", after)
	defer r.logf("gateway stopped, leaks checked")

	rep.GatewayExit = r.gw.stop(60 * time.Second)
	rep.LeakedProcesses = r.waitProcessesGone(15 * time.Second)
	rep.LeakedTempDirs = leakedTempFiles(r.gw)
	r.rec.fill(rep)
	rep.judge()
	return rep, nil
}

// eachAtOnce runs f for every worker, each on a goroutine of its own, and
// waits for all of them.
func eachAtOnce(ws []*worker, f func(*worker)) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { f(w) })
	}
	wg.Wait()
}

// prepare makes the worker's VM and, for an agent worker, its session,
// reporting whether both exist.
func (w *worker) prepare(ctx context.Context) bool {
	if w.vm == nil && !w.createVM(ctx) {
		return false
	}
	return w.kind != agentWorker || w.sessID != "" || w.openSession(ctx)
}

// once makes one round of the worker's operations, for the warm-up.
func (w *worker) once(ctx context.Context) {
	if !w.prepare(ctx) {
		return
	}
	switch w.kind {
	case mixedWorker:
		w.exec(ctx)
		w.execStream(ctx)
		w.writeFile(ctx)
	case processWorker:
		w.processStream(ctx)
	case agentWorker:
		w.piTurn(ctx)
	}
}

// deleteVMs deletes every VM the run created: a live one is disposed, and
// the record of a lost one removed. Then it deletes whatever the tenants'
// listings still hold: under load a create can end on the gateway after
// the worker gave up waiting for it, and its VM is in no record of ours.
func (r *run) deleteVMs(ctx context.Context) {
	r.mu.Lock()
	vms := r.vms
	r.vms = map[string]*client.Client{}
	r.mu.Unlock()
	for id, c := range vms {
		dctx, cancel := context.WithTimeout(ctx, callDeadline)
		_, _ = c.VM(id).Delete(dctx)
		cancel()
	}
	r.sweepVMs(ctx)
}

// sweepVMs deletes every VM the tenants' listings hold and reports how
// many it found.
func (r *run) sweepVMs(ctx context.Context) int {
	found := 0
	for _, c := range r.tenants {
		lctx, cancel := context.WithTimeout(ctx, callDeadline)
		var ids []string
		for vm, err := range c.VMs(lctx, client.ListVMsOptions{}) {
			if err != nil {
				break
			}
			ids = append(ids, vm.ID)
		}
		cancel()
		for _, id := range ids {
			found++
			dctx, cancel := context.WithTimeout(ctx, callDeadline)
			_, _ = c.VM(id).Delete(dctx)
			cancel()
		}
	}
	return found
}

// settledGoroutines waits until the gateway holds no tenant's VM (only
// its warm VMs) on no more sidecars than at the baseline, and returns its
// goroutine count: the lowest of a few samples, or the first one at or
// below target once there (target < 0: this is the baseline, whose sidecar
// count the later call must match, since each sidecar has goroutines of
// its own). While it waits it sweeps the tenants' VMs now and then, for a
// create that ended after its worker gave up.
func (r *run) settledGoroutines(ctx context.Context, target int) (int, error) {
	admin, err := r.client(r.gw.key)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	lowest, samples, shape := -1, 0, -1
	// last is the latest reading; lastRead the latest that succeeded, which
	// says what the gateway still held when a failure ends the wait.
	var last, lastRead settleState
	sweep := time.NewTicker(10 * time.Second)
	defer sweep.Stop()
	for {
		r.tr.CloseIdleConnections()
		last = r.settleState(ctx, admin)
		if last.err == nil {
			lastRead = last
		}
		if last.settled() && (target < 0 || last.sidecars <= r.baseSidecars) {
			n := last.sidecars
			if target < 0 && n != shape {
				lowest, samples, shape = -1, 0, n
			}
			g, err := goroutines(ctx, admin)
			if err != nil {
				return 0, fmt.Errorf("soak: read goroutines: %w", err)
			}
			if lowest < 0 || g < lowest {
				lowest = g
			}
			samples++
			if target >= 0 && g <= target {
				return lowest, nil
			}
			if target < 0 && samples >= 3 {
				r.baseSidecars = shape
				return lowest, nil
			}
		}
		select {
		case <-ctx.Done():
			if lowest < 0 {
				return 0, fmt.Errorf("soak: the gateway never settled to its warm VMs alone on at most %d sidecars (last seen: %s; last read: %s): %w", r.baseSidecars, last, lastRead, ctx.Err())
			}
			if target < 0 {
				r.baseSidecars = shape
			}
			return lowest, nil
		case <-sweep.C:
			if n := r.sweepVMs(ctx); n > 0 {
				r.logf("deleted %d VMs the tenants still held while settling", n)
			}
		case <-time.After(time.Second):
		}
	}
}

// settleState is what the gateway reported of its sidecars and warm VMs,
// read while waiting for it to settle.
type settleState struct {
	err                 error
	sidecars, vms, warm int
}

// settled reports whether every VM on the sidecars is a warm VM.
func (s settleState) settled() bool { return s.err == nil && s.vms <= s.warm }

func (s settleState) String() string {
	if s.err != nil {
		return s.err.Error()
	}
	return fmt.Sprintf("%d VMs on %d sidecars, %d of them warm", s.vms, s.sidecars, s.warm)
}

// settleState reads how many sidecars run, how many VMs they hold, and how
// many of those are warm VMs ready to be taken.
func (r *run) settleState(ctx context.Context, admin *client.Client) settleState {
	scs, err := sidecars(ctx, admin)
	if err != nil {
		return settleState{err: err}
	}
	b, err := admin.Metrics(ctx)
	if err != nil {
		return settleState{err: err}
	}
	warm, _ := metricValue(b, "agentos_gateway_warm_vms")
	st := settleState{sidecars: len(scs), warm: int(warm)}
	for _, sc := range scs {
		st.vms += sc.VMCount
	}
	return st
}

// everyTick calls f every period until stop is closed or ctx ends.
func everyTick(ctx context.Context, stop <-chan struct{}, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// sidecars lists the gateway's sidecars, within a call's deadline.
func sidecars(ctx context.Context, admin *client.Client) ([]client.Sidecar, error) {
	ctx, cancel := context.WithTimeout(ctx, callDeadline)
	defer cancel()
	return admin.Sidecars(ctx)
}

// killer SIGKILLs one sidecar that hosts VMs every KillEvery, until stop.
// It kills only processes whose parent is the gateway.
func (r *run) killer(ctx context.Context, admin *client.Client, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(7, 7))
	everyTick(ctx, stop, r.cfg.KillEvery, func() {
		scs, err := sidecars(ctx, admin)
		if err != nil {
			return
		}
		var pids []int
		for _, sc := range scs {
			if sc.VMCount > 0 && parentOf(sc.Pid) == r.gw.pid() {
				pids = append(pids, sc.Pid)
			}
		}
		if len(pids) == 0 {
			return
		}
		pid := pids[rng.IntN(len(pids))]
		r.addGroup(pid)
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			r.rec.killed(time.Now())
		}
	})
}

// watchSidecars records the process group of every sidecar it sees, for
// the leak check, and writes the progress lines.
func (r *run) watchSidecars(ctx context.Context, admin *client.Client, stop <-chan struct{}, start time.Time) {
	lastProgress := time.Now()
	everyTick(ctx, stop, 2*time.Second, func() {
		scs, err := sidecars(ctx, admin)
		if err == nil {
			for _, sc := range scs {
				r.addGroup(sc.Pid) // a sidecar leads its own process group
			}
		}
		if r.cfg.Progress != nil && time.Since(lastProgress) >= r.cfg.ProgressEvery {
			lastProgress = time.Now()
			r.progress(time.Since(start), len(scs))
		}
	})
}

func (r *run) progress(elapsed time.Duration, sidecars int) {
	r.rec.mu.Lock()
	ok, failed := 0, 0
	for _, d := range r.rec.ok {
		ok += len(d)
	}
	for _, n := range r.rec.failed {
		failed += n
	}
	kills, lost, hung, lostWrites := r.rec.kills, r.rec.vmsLost, r.rec.hung, r.rec.lostWrites
	r.rec.mu.Unlock()
	fmt.Fprintf(r.cfg.Progress, "soak: %s: %d ops ok, %d failed, %d kills, %d VMs lost, %d hung, %d lost writes, %d sidecars\n",
		elapsed.Round(time.Second), ok, failed, kills, lost, hung, lostWrites, sidecars)
}

// waitProcessesGone waits up to d for the gateway's sidecars and their
// children to be gone, and returns those still alive.
func (r *run) waitProcessesGone(d time.Duration) []string {
	r.mu.Lock()
	groups := make(map[int]bool, len(r.groups))
	for g := range r.groups {
		groups[g] = true
	}
	r.mu.Unlock()
	deadline := time.Now().Add(d)
	for {
		left := leakedProcesses(groups, r.gw.tmpDir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}
