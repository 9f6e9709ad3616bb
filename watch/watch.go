// Package watch synthesises file-change events for a VM's trees: the engine
// has no inotify, so changes made through the files API are reported as
// they succeed (the vms service tells of them) and changes made inside the
// guest are found by bounded, periodic scans of the watched tree, shared by
// every watcher of the same tree. Events go into one bounded,
// sequence-numbered log per VM, which watchers follow and resume from.
package watch

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Bounds of watching, the defaults of Config.
const (
	// DefaultMaxEntries is how many entries the scans of one VM may hold.
	DefaultMaxEntries = 10000
	// MinInterval is the shortest scan interval a watcher may ask for.
	MinInterval = 500 * time.Millisecond
	// DefaultInterval is the scan interval of a watcher that asks for none.
	DefaultInterval = 2 * time.Second
	// MaxInterval is the longest scan interval a watcher may ask for.
	MaxInterval = 10 * time.Minute
	// DefaultStatBudget is how many files one scan stats for their mtime.
	DefaultStatBudget = 64
	// DefaultLogBytes bounds each VM's event log.
	DefaultLogBytes = 256 << 10
)

// scanTimeout bounds one scan of a tree.
const scanTimeout = 30 * time.Second

// Tree is what a scanner needs of a VM's filesystem; *vms.Files has it.
type Tree interface {
	List(ctx context.Context, path string, recursive bool, maxDepth int) ([]gateway.DirEntry, error)
	Stat(ctx context.Context, path string) (vms.FileInfo, error)
	Release()
}

// Opener opens a tenant's VM's filesystem, refusing another tenant's VM.
type Opener func(ctx context.Context, tenantID, vmID string) (Tree, error)

// Config tunes the service.
type Config struct {
	// MaxEntries bounds the entries the scans of one VM hold together
	// (default DefaultMaxEntries).
	MaxEntries int
	// StatBudget is how many files one scan stats, to see changes that
	// keep a file's size (default DefaultStatBudget).
	StatBudget int
	// LogBytes bounds each VM's event log (default DefaultLogBytes).
	LogBytes int
	// MinInterval is the scan interval floor (default MinInterval; tests
	// lower it).
	MinInterval time.Duration
	Log         zerolog.Logger
	Now         func() time.Time
}

// Service keeps the watches of every VM.
type Service struct {
	cfg  Config
	open Opener

	mu      sync.Mutex
	vms     map[string]*vmWatch
	closing bool
	wg      sync.WaitGroup
}

// New returns a service that opens VMs' trees with open.
func New(cfg Config, open Opener) *Service {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.StatBudget <= 0 {
		cfg.StatBudget = DefaultStatBudget
	}
	if cfg.LogBytes <= 0 {
		cfg.LogBytes = DefaultLogBytes
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = MinInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, open: open, vms: map[string]*vmWatch{}}
}

// Options say what a watcher watches.
type Options struct {
	// Path is the directory watched, absolute.
	Path      string
	Recursive bool
	// Interval is how often the tree is scanned for the guest's changes
	// (0: DefaultInterval); it may not be below the floor.
	Interval time.Duration
	// After resumes after this event sequence (Resume set).
	After  uint64
	Resume bool
}

// ErrTooManyEntries is the cause of the resource_exhausted error a watch
// gets when its VM's watched trees hold more entries than allowed.
var ErrTooManyEntries = errors.New("watch: too many entries watched")

// Validate checks o against the bounds and fills in its defaults.
func (s *Service) Validate(o *Options) error {
	if !path.IsAbs(o.Path) {
		return gateway.Errorf(gateway.CodeInvalidArgument, "path must be an absolute path in the VM, such as /workspace").WithDetail("field", "path")
	}
	o.Path = path.Clean(o.Path)
	switch {
	case o.Interval == 0:
		o.Interval = max(DefaultInterval, s.cfg.MinInterval)
	case o.Interval < s.cfg.MinInterval:
		return gateway.Errorf(gateway.CodeInvalidArgument, "interval must be at least %s: scans cannot run more often", s.cfg.MinInterval).
			WithDetail("field", "interval").WithDetail("minimumMs", s.cfg.MinInterval.Milliseconds())
	case o.Interval > MaxInterval:
		return gateway.Errorf(gateway.CodeInvalidArgument, "interval must be at most %s", MaxInterval).
			WithDetail("field", "interval").WithDetail("maximumMs", MaxInterval.Milliseconds())
	}
	return nil
}

// vmWatch is the watch state of one VM: its log and its scanners.
type vmWatch struct {
	id  string
	log *streamlog.Log[Event]

	// mu guards scanners and serialises what scans append to the log, so
	// that a change two overlapping scans find is told once.
	mu       sync.Mutex
	scanners map[scanKey]*scanner
	gen      uint64 // scan generation, raised by every scan that starts
	ended    bool
}

type scanKey struct {
	root      string
	recursive bool
}

// Watch starts watching a tenant's VM's tree: the tree is scanned once
// (the baseline later scans are compared with) before Watch returns, so a
// change made after it returns is reported.
func (s *Service) Watch(ctx context.Context, tenantID, vmID string, o Options) (*Watcher, error) {
	if err := s.Validate(&o); err != nil {
		return nil, err
	}
	tree, err := s.open(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	info, err := tree.Stat(ctx, o.Path)
	if err == nil && !info.IsDir {
		err = gateway.Errorf(gateway.CodeInvalidArgument, "%s is not a directory; a watch watches a directory", o.Path).WithDetail("field", "path")
	}
	if err != nil {
		tree.Release()
		return nil, err
	}

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		tree.Release()
		return nil, gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	vw := s.vms[vmID]
	if vw == nil {
		vw = &vmWatch{id: vmID, log: streamlog.New[Event](s.cfg.LogBytes), scanners: map[scanKey]*scanner{}}
		s.vms[vmID] = vw
	}
	s.mu.Unlock()

	key := scanKey{root: o.Path, recursive: o.Recursive}
	vw.mu.Lock()
	if vw.ended {
		vw.mu.Unlock()
		tree.Release()
		return nil, gateway.Wrap(gateway.CodeConflict, vms.ErrVMEnded, "the VM has ended")
	}
	sc := vw.scanners[key]
	fresh := sc == nil
	if fresh {
		sc = newScanner(s, vw, key, tree)
		vw.scanners[key] = sc
	} else {
		tree.Release()
	}
	w := &Watcher{s: s, vw: vw, sc: sc, root: o.Path, recursive: o.Recursive, interval: o.Interval}
	sc.watchers[w] = struct{}{}
	vw.mu.Unlock()
	if !fresh {
		sc.poke()
	}

	if fresh {
		err = sc.baseline(ctx)
		if err == nil {
			err = s.start(sc)
		}
		if err != nil {
			sc.fail(err)
		}
	}
	select {
	case <-sc.ready:
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	}
	if err := sc.failure(); err != nil {
		w.Close()
		return nil, err
	}
	last := vw.log.LastSeq()
	switch {
	case !o.Resume:
		w.cursor = last
	case o.After > last:
		// Not an id of this log (one from before a restart of the
		// gateway): the client cannot know what it missed.
		w.cursor, w.resync = last, ResyncUnknown
	default:
		w.cursor = o.After
	}
	return w, nil
}

// start runs a scanner's loop, owned by the service.
func (s *Service) start(sc *scanner) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
	}
	s.wg.Add(1)
	sc.started.Store(true)
	go func() {
		defer s.wg.Done()
		sc.run()
	}()
	return nil
}

// FilesChanged records the changes made through the files API in the VM's
// log, if anyone watches the VM. It implements vms.FileObserver.
func (s *Service) FilesChanged(vmID string, changes ...vms.FileChange) {
	s.mu.Lock()
	vw := s.vms[vmID]
	s.mu.Unlock()
	if vw == nil {
		return
	}
	now := s.cfg.Now().UTC()
	vw.mu.Lock()
	defer vw.mu.Unlock()
	for _, c := range changes {
		kind := KindFile
		if c.IsDir {
			kind = KindDirectory
		}
		vw.appendLocked(Event{Op: c.Op, Path: c.Path, From: c.From, Kind: kind, Source: SourceAPI, Time: now}, nil)
	}
}

// VMEnded ends the VM's watches: their streams end with a conflict error.
// It implements vms.FileObserver.
func (s *Service) VMEnded(vmID string) {
	s.mu.Lock()
	vw := s.vms[vmID]
	delete(s.vms, vmID)
	s.mu.Unlock()
	if vw != nil {
		vw.end(gateway.Wrap(gateway.CodeConflict, vms.ErrVMEnded, "the VM has ended"))
	}
}

// Close stops every scanner and waits for them; the watches' streams
// end with an unavailable error.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	all := make([]*vmWatch, 0, len(s.vms))
	for _, vw := range s.vms {
		all = append(all, vw)
	}
	s.vms = map[string]*vmWatch{}
	s.mu.Unlock()
	for _, vw := range all {
		vw.end(gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down"))
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch: shutdown: %w", ctx.Err())
	}
}

// end closes the log with err and stops the VM's scanners.
func (vw *vmWatch) end(err error) {
	vw.mu.Lock()
	vw.ended = true
	scs := make([]*scanner, 0, len(vw.scanners))
	for k, sc := range vw.scanners {
		scs = append(scs, sc)
		delete(vw.scanners, k)
	}
	vw.mu.Unlock()
	vw.log.Close(err)
	for _, sc := range scs {
		sc.stop()
	}
}

// appendLocked appends ev to the log and tells every scanner but from of
// it, so that their next scans do not report it again.
func (vw *vmWatch) appendLocked(ev Event, from *scanner) {
	vw.log.Append(0, len(ev.Path)+len(ev.From)+64, ev)
	for _, sc := range vw.scanners {
		if sc != from && (under(ev.Path, sc.key.root) || ev.From != "" && under(ev.From, sc.key.root)) {
			sc.pending = append(sc.pending, pending{ev: ev, gen: vw.gen})
		}
	}
}

// entriesLocked is how many entries the VM's scanners other than but hold.
func (vw *vmWatch) entriesLocked(but *scanner) int {
	n := 0
	for _, sc := range vw.scanners {
		if sc != but {
			n += len(sc.snap)
		}
	}
	return n
}

// FilesOf opens trees through the VMs service's files.
func FilesOf(svc *vms.Service) Opener {
	return func(ctx context.Context, tenantID, vmID string) (Tree, error) {
		f, err := svc.Files(ctx, tenantID, vmID)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
}
