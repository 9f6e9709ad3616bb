package watch

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// memTree is a VM's filesystem in memory. These tests use it instead of a
// real VM because they need trees changed between two scans at exact
// moments and bounds far smaller than a VM's; cmd/server/e2e_watch_test.go
// runs the same service against the real engine.
type memTree struct {
	mu     sync.Mutex
	files  map[string]entry
	lists  atomic.Int32
	opened atomic.Int32
	// flapping makes every stat answer a new time, as the engine does for
	// API-written files while a guest process runs.
	flapping atomic.Bool
	clock    atomic.Int64
	released *atomic.Int32
}

func newMemTree(paths ...string) *memTree {
	t := &memTree{files: map[string]entry{"/w": {kind: KindDirectory}}, released: new(atomic.Int32)}
	for _, p := range paths {
		t.put(p, 1, time.Unix(1, 0))
	}
	return t
}

func (t *memTree) put(p string, size int64, mtime time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasSuffix(p, "/") {
		t.files[strings.TrimSuffix(p, "/")] = entry{kind: KindDirectory}
		return
	}
	t.files[p] = entry{kind: KindFile, size: size, mtime: mtime}
}

func (t *memTree) remove(p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.files, p)
}

func (t *memTree) List(_ context.Context, root string, recursive bool, _ int) ([]gateway.DirEntry, error) {
	t.lists.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []gateway.DirEntry
	for p, e := range t.files {
		if p == root || !under(p, root) || !recursive && path.Dir(p) != root {
			continue
		}
		out = append(out, gateway.DirEntry{Name: path.Base(p), Path: p, IsDir: e.kind == KindDirectory, Size: e.size})
	}
	return out, nil
}

func (t *memTree) Stat(_ context.Context, p string) (agentos.FileInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.files[p]
	if !ok {
		return agentos.FileInfo{}, gateway.Errorf(gateway.CodeNotFound, "%s not found", p)
	}
	mtime := e.mtime
	if t.flapping.Load() {
		mtime = time.Unix(1000+t.clock.Add(1), 0)
	}
	return agentos.FileInfo{IsDir: e.kind == KindDirectory, Size: e.size, ModTime: mtime}, nil
}

func (t *memTree) Release() { t.released.Add(1) }

func newTestService(t *testing.T, tree *memTree, cfg Config) *Service {
	cfg.MinInterval = time.Millisecond
	s := New(cfg, func(_ context.Context, tenantID, vmID string) (Tree, error) {
		if tenantID != "t1" {
			return nil, gateway.Errorf(gateway.CodeNotFound, "no VM %s", vmID)
		}
		tree.opened.Add(1)
		return tree, nil
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

func watchOf(t *testing.T, s *Service, o Options) *Watcher {
	t.Helper()
	if o.Path == "" {
		o.Path = "/w"
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Millisecond
	}
	w, err := s.Watch(context.Background(), "t1", "vm1", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// next returns the next batch within a deadline.
func next(t *testing.T, w *Watcher) Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return b
}

func describe(b Batch) []string {
	var out []string
	if b.Resync != "" {
		out = append(out, "resync "+string(b.Resync))
	}
	for _, e := range b.Events {
		s := string(e.V.Op) + " " + e.V.Path + " " + string(e.V.Source)
		if e.V.From != "" {
			s = string(e.V.Op) + " " + e.V.From + ">" + e.V.Path + " " + string(e.V.Source)
		}
		out = append(out, s)
	}
	if b.Done {
		out = append(out, "done "+string(gateway.ErrorCode(b.Err)))
	}
	return out
}

// collect reads batches until want events came, or fails.
func collect(t *testing.T, w *Watcher, want int) []string {
	t.Helper()
	var got []string
	for len(got) < want {
		got = append(got, describe(next(t, w))...)
	}
	return got
}

func equal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

func TestWatchReportsAPIChangesOnceAndGuestChanges(t *testing.T) {
	tree := newMemTree("/w/old")
	s := newTestService(t, tree, Config{})
	w := watchOf(t, s, Options{Recursive: true})

	// An API write: told at once, and not again by the scans that find it.
	tree.put("/w/api", 3, time.Unix(2, 0))
	s.FilesChanged("vm1", vms.FileChange{Op: vms.FileCreated, Path: "/w/api"})
	equal(t, describe(next(t, w)), "create /w/api api")
	// An API move of a file, and the guest's changes: a new file, one
	// that changed with the same size (mtime), one removed.
	tree.put("/w/moved", 3, time.Unix(2, 0))
	tree.remove("/w/api")
	s.FilesChanged("vm1", vms.FileChange{Op: vms.FileRenamed, From: "/w/api", Path: "/w/moved"})
	equal(t, describe(next(t, w)), "rename /w/api>/w/moved api")
	tree.put("/w/d/", 0, time.Time{})
	tree.put("/w/d/guest", 5, time.Unix(3, 0))
	equal(t, collect(t, w, 2), "create /w/d scan", "create /w/d/guest scan")
	tree.put("/w/old", 1, time.Unix(9, 0))
	equal(t, collect(t, w, 1), "modify /w/old scan")
	tree.remove("/w/d/guest")
	tree.remove("/w/d")
	equal(t, collect(t, w, 2), "delete /w/d/guest scan", "delete /w/d scan")

	// A change outside the tree is not this watcher's.
	s.FilesChanged("vm1", vms.FileChange{Op: vms.FileCreated, Path: "/elsewhere"})
	tree.put("/w/last", 1, time.Unix(4, 0))
	equal(t, collect(t, w, 1), "create /w/last scan")
}

func TestWatchIgnoresMtimesThatDoNotHoldStill(t *testing.T) {
	tree := newMemTree("/w/a")
	s := newTestService(t, tree, Config{})
	w := watchOf(t, s, Options{Recursive: true})
	tree.flapping.Store(true)
	for range 5 {
		lists := tree.lists.Load()
		for tree.lists.Load() < lists+2 {
			time.Sleep(time.Millisecond)
		}
	}
	tree.flapping.Store(false)
	// The next event is the real change, not a modify of /w/a.
	tree.put("/w/b", 1, time.Unix(1, 0))
	equal(t, collect(t, w, 1), "create /w/b scan")
}

func TestWatchNotRecursiveSeesOnlyEntries(t *testing.T) {
	tree := newMemTree()
	tree.put("/w/sub/", 0, time.Time{})
	s := newTestService(t, tree, Config{})
	w := watchOf(t, s, Options{})
	s.FilesChanged("vm1", vms.FileChange{Op: vms.FileCreated, Path: "/w/sub/deep"}, vms.FileChange{Op: vms.FileCreated, Path: "/w/top"})
	equal(t, describe(next(t, w)), "create /w/top api")
}

func TestWatchResume(t *testing.T) {
	tree := newMemTree()
	s := newTestService(t, tree, Config{LogBytes: 10 * 70})
	w := watchOf(t, s, Options{Recursive: true})
	for _, p := range []string{"/w/a", "/w/b", "/w/c"} {
		s.FilesChanged("vm1", vms.FileChange{Op: vms.FileCreated, Path: p})
	}
	b := next(t, w)
	equal(t, describe(b), "create /w/a api", "create /w/b api", "create /w/c api")

	cases := []struct {
		name  string
		after uint64
		want  []string
	}{
		{"exactly after an event", b.Events[0].Seq, []string{"create /w/b api", "create /w/c api"}},
		{"after the last", b.Events[2].Seq, nil},
		{"a cursor the log never had", b.Events[2].Seq + 100, []string{"resync unknown"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := watchOf(t, s, Options{Recursive: true, Resume: true, After: c.after})
			var got []string
			if c.want != nil {
				got = collect(t, r, len(c.want))
			}
			equal(t, got, c.want...)
		})
	}

	// Past the log's bound, the oldest events are gone: a resync, then
	// what is kept.
	for i := range 20 {
		s.FilesChanged("vm1", vms.FileChange{Op: vms.FileModified, Path: "/w/" + string(rune('d'+i))})
	}
	old := watchOf(t, s, Options{Recursive: true, Resume: true, After: b.Events[0].Seq})
	first := next(t, old)
	if first.Resync != ResyncExpired || len(first.Events) == 0 || first.Events[len(first.Events)-1].V.Path != "/w/w" {
		t.Fatalf("old cursor: %v", describe(first))
	}
}

func TestWatchEntryBound(t *testing.T) {
	tree := newMemTree("/w/a", "/w/b")
	s := newTestService(t, tree, Config{MaxEntries: 3})
	big := newMemTree("/w/1", "/w/2", "/w/3", "/w/4")
	sBig := newTestService(t, big, Config{MaxEntries: 3})
	if _, err := sBig.Watch(context.Background(), "t1", "vm1", Options{Path: "/w", Recursive: true}); !errors.Is(err, ErrTooManyEntries) || gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
		t.Fatalf("watch of 4 entries, bound 3: %v", err)
	}
	if n := big.released.Load(); n != 1 {
		t.Fatalf("refused watch released its VM %d times, want 1", n)
	}

	w := watchOf(t, s, Options{Recursive: true})
	tree.put("/w/c", 1, time.Unix(1, 0))
	equal(t, collect(t, w, 1), "create /w/c scan")
	tree.put("/w/d", 1, time.Unix(1, 0))
	equal(t, describe(next(t, w)), "done resource_exhausted")
}

func TestWatchSharesScansAndStops(t *testing.T) {
	tree := newMemTree("/w/a")
	s := newTestService(t, tree, Config{})
	slow := watchOf(t, s, Options{Recursive: true, Interval: time.Minute})
	fast := watchOf(t, s, Options{Recursive: true, Interval: 5 * time.Millisecond})
	// The shared scanner runs at the fast watcher's interval, so the slow
	// one sees the guest's change too.
	tree.put("/w/b", 1, time.Unix(1, 0))
	equal(t, collect(t, slow, 1), "create /w/b scan")
	equal(t, collect(t, fast, 1), "create /w/b scan")
	s.mu.Lock()
	n := len(s.vms["vm1"].scanners)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d scanners for one tree, want 1", n)
	}
	slow.Close()
	fast.Close()
	if r, o := tree.released.Load(), tree.opened.Load(); r != o {
		t.Fatalf("the tree was released %d times after the last watcher left, opened %d times", r, o)
	}
	lists := tree.lists.Load()
	time.Sleep(30 * time.Millisecond)
	if tree.lists.Load() != lists {
		t.Fatal("the scanner still scans after its last watcher left")
	}
}

func TestWatchEndsWithItsVM(t *testing.T) {
	tree := newMemTree()
	s := newTestService(t, tree, Config{})
	w := watchOf(t, s, Options{Recursive: true})
	s.VMEnded("vm1")
	b := next(t, w)
	if !b.Done || !errors.Is(b.Err, vms.ErrVMEnded) || gateway.ErrorCode(b.Err) != gateway.CodeConflict {
		t.Fatalf("after the VM ended: %v", describe(b))
	}
	if _, err := s.Watch(context.Background(), "t2", "vm1", Options{Path: "/w"}); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Fatalf("another tenant's watch: %v", err)
	}
}

func TestValidate(t *testing.T) {
	s := New(Config{}, nil)
	cases := []struct {
		name     string
		o        Options
		field    string
		interval time.Duration
	}{
		{"relative path", Options{Path: "w"}, "path", 0},
		{"default interval", Options{Path: "/w/"}, "", DefaultInterval},
		{"floor", Options{Path: "/w", Interval: MinInterval}, "", MinInterval},
		{"below the floor", Options{Path: "/w", Interval: MinInterval - time.Millisecond}, "interval", 0},
		{"above the ceiling", Options{Path: "/w", Interval: MaxInterval + time.Millisecond}, "interval", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Validate(&c.o)
			var ge *gateway.Error
			if c.field == "" {
				if err != nil || c.o.Interval != c.interval || c.o.Path != "/w" {
					t.Fatalf("validate: %v, %+v", err, c.o)
				}
				return
			}
			if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != c.field {
				t.Fatalf("validate: %v", err)
			}
		})
	}
}
