package watch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// scanner scans one tree of a VM for the changes guest processes make, at
// the shortest interval its watchers asked for, and appends what it finds
// to the VM's log. One scanner serves every watcher of the same tree; it
// stops when the last one leaves.
type scanner struct {
	s    *Service
	vw   *vmWatch
	key  scanKey
	tree Tree

	ctx    context.Context
	cancel context.CancelCauseFunc
	// ready is closed once the baseline scan ended (well or not).
	ready     chan struct{}
	readyOnce sync.Once
	done      chan struct{} // closed when run returns
	started   atomic.Bool   // set once run was started
	stopOnce  sync.Once

	// Guarded by vw.mu.
	watchers map[*Watcher]struct{}
	snap     snapshot
	pending  []pending
	// statNext is where the round of mtime stats resumes.
	statNext string
	wake     chan struct{} // a watcher's interval changed
}

func newScanner(s *Service, vw *vmWatch, key scanKey, tree Tree) *scanner {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &scanner{
		s: s, vw: vw, key: key, tree: tree, ctx: ctx, cancel: cancel,
		ready: make(chan struct{}), done: make(chan struct{}),
		watchers: map[*Watcher]struct{}{}, wake: make(chan struct{}, 1),
	}
}

// failure returns why the scanner stopped (nil while it runs).
func (sc *scanner) failure() error {
	if sc.ctx.Err() == nil {
		return nil
	}
	return context.Cause(sc.ctx)
}

// fail stops the scanner for err: its watchers' streams end with err.
func (sc *scanner) fail(err error) {
	sc.cancel(err)
	sc.readyOnce.Do(func() { close(sc.ready) })
	sc.vw.mu.Lock()
	if sc.vw.scanners[sc.key] == sc {
		delete(sc.vw.scanners, sc.key)
	}
	sc.vw.mu.Unlock()
	sc.stop()
}

// stop ends the scanner: its loop (if it runs) returns and its hold on the
// VM is released.
func (sc *scanner) stop() {
	sc.stopOnce.Do(func() {
		sc.cancel(errStopped)
		sc.readyOnce.Do(func() { close(sc.ready) })
		sc.tree.Release()
	})
}

var errStopped = gateway.Errorf(gateway.CodeUnavailable, "the watch stopped")

// poke makes the scanner look at its watchers' intervals again.
func (sc *scanner) poke() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// interval is the shortest interval the watchers ask for.
func (sc *scanner) interval() time.Duration {
	sc.vw.mu.Lock()
	defer sc.vw.mu.Unlock()
	d := MaxInterval
	for w := range sc.watchers {
		d = min(d, w.interval)
	}
	return d
}

// baseline takes the first snapshot; it reports nothing.
func (sc *scanner) baseline(ctx context.Context) error {
	cur, err := sc.scan(ctx, nil)
	if err != nil {
		return err
	}
	sc.vw.mu.Lock()
	if err := sc.checkBoundLocked(cur); err != nil {
		sc.vw.mu.Unlock()
		return err
	}
	sc.snap = cur
	sc.vw.mu.Unlock()
	sc.readyOnce.Do(func() { close(sc.ready) })
	return nil
}

func (sc *scanner) run() {
	defer close(sc.done)
	t := time.NewTimer(sc.interval())
	defer t.Stop()
	for {
		select {
		case <-sc.ctx.Done():
			return
		case <-sc.wake:
		case <-t.C:
			if err := sc.once(); err != nil {
				if sc.ctx.Err() == nil {
					sc.s.cfg.Log.Debug().Err(err).Str("vm", sc.vw.id).Str("path", sc.key.root).Msg("watch scan stopped")
					sc.fail(err)
				}
				return
			}
		}
		t.Reset(sc.interval())
	}
}

// once scans the tree and appends its changes to the log.
func (sc *scanner) once() error {
	sc.vw.mu.Lock()
	sc.vw.gen++
	gen := sc.vw.gen
	old := sc.snap
	sc.vw.mu.Unlock()

	ctx, cancel := context.WithTimeout(sc.ctx, scanTimeout)
	defer cancel()
	cur, err := sc.scan(ctx, old)
	if err != nil {
		return err
	}
	now := sc.s.cfg.Now().UTC()
	sc.vw.mu.Lock()
	defer sc.vw.mu.Unlock()
	if err := sc.checkBoundLocked(cur); err != nil {
		return err
	}
	for _, ev := range diff(old, cur) {
		if sc.coveredLocked(ev) {
			continue
		}
		ev.Source, ev.Time = SourceScan, now
		sc.vw.appendLocked(ev, sc)
	}
	// What was recorded before this scan started, this scan has seen.
	sc.pending = slices.DeleteFunc(sc.pending, func(p pending) bool { return p.gen < gen })
	sc.snap = cur
	return nil
}

func (sc *scanner) coveredLocked(ev Event) bool {
	for _, p := range sc.pending {
		if p.covers(ev) {
			return true
		}
	}
	return false
}

// checkBoundLocked refuses a snapshot that would take the VM's watched
// entries past the bound.
func (sc *scanner) checkBoundLocked(cur snapshot) error {
	limit := sc.s.cfg.MaxEntries
	if others := sc.vw.entriesLocked(sc); others+len(cur) > limit {
		return gateway.Wrap(gateway.CodeResourceExhausted, ErrTooManyEntries,
			"the watched trees of this VM hold %d entries, more than the %d a VM may watch; watch a smaller tree", others+len(cur), limit).
			WithDetail("limit", limit).WithDetail("path", sc.key.root)
	}
	return nil
}

// scan lists the tree and stats a bounded number of its files for their
// mtime: the new ones first, then the others in turn, so that a change
// that keeps a file's size is found within a few rounds however large the
// tree.
func (sc *scanner) scan(ctx context.Context, old snapshot) (snapshot, error) {
	depth := 0
	if !sc.key.recursive {
		depth = 1
	}
	es, err := sc.tree.List(ctx, sc.key.root, sc.key.recursive, depth)
	if err != nil {
		return nil, err
	}
	// A listing past the bound is refused without building its snapshot.
	if len(es) > sc.s.cfg.MaxEntries {
		return nil, gateway.Wrap(gateway.CodeResourceExhausted, ErrTooManyEntries,
			"%s holds more than the %d entries a VM may watch; watch a smaller tree", sc.key.root, sc.s.cfg.MaxEntries).
			WithDetail("limit", sc.s.cfg.MaxEntries).WithDetail("path", sc.key.root)
	}
	cur := make(snapshot, len(es))
	var files, fresh []string
	for _, e := range es {
		if temporary(e.Path, sc.key.root) {
			continue
		}
		en := entry{kind: KindFile, size: e.Size}
		switch {
		case e.IsSymlink:
			en.kind = KindSymlink
		case e.IsDir:
			en.kind, en.size = KindDirectory, 0
		}
		if o, ok := old[e.Path]; ok && o.kind == en.kind && o.size == en.size {
			en.mtime = o.mtime
		}
		cur[e.Path] = en
		if en.kind == KindFile {
			if _, ok := old[e.Path]; ok || old == nil {
				files = append(files, e.Path)
			} else {
				fresh = append(fresh, e.Path)
			}
		}
	}
	slices.Sort(files)
	// The round resumes after the last file statted.
	i, found := slices.BinarySearch(files, sc.statNext)
	if found {
		i++
	}
	budget := sc.s.cfg.StatBudget
	todo := fresh[:min(len(fresh), budget)]
	for k := 0; k < len(files) && len(todo) < budget; k++ {
		todo = append(todo, files[(i+k)%len(files)])
	}
	// Stats are bounded in time too: the engine's stat slows down with
	// every file written through the API (see the README), and a scan
	// must not take longer than its interval.
	deadline := time.Now().Add(sc.interval() / 4)
	for n, p := range todo {
		if n > 0 && time.Now().After(deadline) {
			break
		}
		mtime, ok := sc.mtime(ctx, p, cur[p].mtime)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if ok {
			en := cur[p]
			en.mtime = mtime
			cur[p] = en
		}
		if n >= len(fresh) {
			sc.statNext = p
		}
	}
	return cur, nil
}

// mtime stats p for its modification time, known is what the snapshot
// has. A time that differs from known is taken only when a second stat
// agrees: while a guest process runs, the pinned engine answers a stat of
// a file written through the API with the current time, a new one on each
// call, which would otherwise be a change. ok is false when the time is
// unknown (p is gone, or its time does not hold still).
func (sc *scanner) mtime(ctx context.Context, p string, known time.Time) (time.Time, bool) {
	info, err := sc.tree.Stat(ctx, p)
	if err != nil {
		// Gone or changed since the listing: the next scan tells.
		return time.Time{}, false
	}
	if info.ModTime.Equal(known) {
		return known, true
	}
	again, err := sc.tree.Stat(ctx, p)
	if err != nil || !again.ModTime.Equal(info.ModTime) {
		return time.Time{}, false
	}
	return info.ModTime, true
}

// temporary reports whether p, below root, is or is inside one of the
// files service's own temporary names.
func temporary(p, root string) bool {
	rel := strings.TrimPrefix(p, root)
	for _, part := range strings.Split(rel, "/") {
		if part != "" && vms.IsTemporary(part) {
			return true
		}
	}
	return false
}
