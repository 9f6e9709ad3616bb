package vms

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/archive"
)

// A checkpoint keeps a running VM's files in the store, so that a VM lost
// with its sidecar or its node can be restored under its id (Wake). It is a
// list of layers in the image store: a full capture of the tree, then the
// changes of each later checkpoint, as tars in the snapshot format (names
// relative to /) whose first entry may be a PAX global header listing the
// paths deleted since the layer before. Restoring merges the layers into
// one snapshot tar, newest entry of each path first, and wakes the VM from
// it as from a hibernation image.
//
// The engine (0.2.21) answers every file call in about 10 ms plus 0.3 ms
// per MiB the VM holds, so a checkpoint never walks the whole tree when it
// can help it. It knows what changed from two sources:
//   - the files API's own changes (uploads, deletes, moves, directories,
//     archive extracts), journaled as each call begins, which are exact;
//   - guest code: a process, shell, exec or agent session that ran since
//     the last checkpoint may have written anywhere, so the tree is
//     compared with the last checkpoint's manifest: in one call when the
//     tree fits one snapshot frame (content hashes), else with one find
//     the VM runs itself (size, modification and change times of every
//     entry in about 0.7 s for a 100 MiB tree, where a stat per entry from
//     the host takes 40 ms each), and a stat of each changed entry for its
//     owner and mode. A VM that cannot run find (its permissions or limits
//     refuse it) is compared with a listing and a stat of each entry.
//
// Only what differs is read and stored. After maxCheckpointLayers layers,
// or once the changes outweigh the full capture, the next checkpoint is a
// full one again, and the layers it replaces are removed. What a checkpoint
// reads is consistent per file, not across files: a process writing while
// it runs may leave a mix of older and newer files, as a crash would.

// ReasonRestore is the reason of a VM woken from its checkpoint after it
// was lost.
const ReasonRestore = "restore"

const (
	// maxCheckpointLayers bounds the layers a restore merges.
	maxCheckpointLayers = 8
	// checkpointParallel bounds the checkpoints the service runs at once
	// on its own schedule: each keeps a sidecar busy with file calls.
	checkpointParallel = 2
	// checkpointTimeout bounds one checkpoint.
	checkpointTimeout = 10 * time.Minute
	// maxJournal bounds the files API's changes kept between checkpoints;
	// past it the next checkpoint compares the whole tree.
	maxJournal = 4096
	// spoolMemory is the largest file a checkpoint holds in memory while it
	// reads it; a larger one is spooled through a temporary file.
	spoolMemory = 4 << 20
	// deletedRecord is the PAX record of a layer's global header that
	// lists, as a JSON array, the paths deleted since the layer before.
	deletedRecord = "AGENTOS.deleted"
)

// stamp is what a checkpoint knows of one entry of the VM's tree, to tell
// whether it changed since. A stamp from a stat has the modification and
// change times (to the millisecond, as the engine keeps them); one from a
// one-frame export has the content's hash instead; two stamps that share
// neither say "changed", which costs a copy, never a loss. The guest's find
// sees modes and owners of its own (every entry 0777, root's) and no change
// time (it prints the modification time for it), so its stamps have
// neither (hasOwner false): between two of its scans a change of mode
// alone goes unseen until the content changes too.
type stamp struct {
	kind         byte // tar.TypeDir, tar.TypeSymlink or tar.TypeReg
	perm         fs.FileMode
	uid, gid     int
	hasOwner     bool
	size         int64
	mtime, ctime time.Time
	sum          [sha256.Size]byte
	hasSum       bool
}

func (a stamp) same(b stamp) bool {
	if a.kind != b.kind {
		return false
	}
	if a.hasOwner && b.hasOwner && (a.perm != b.perm || a.uid != b.uid || a.gid != b.gid) {
		return false
	}
	switch {
	case a.kind == tar.TypeDir && a.hasOwner && b.hasOwner:
		// A directory's times move with its entries, whose own stamps
		// tell their changes.
		return true
	case a.kind != tar.TypeDir && a.size != b.size:
		return false
	case a.hasSum && b.hasSum:
		return a.sum == b.sum
	case !a.mtime.IsZero() && !b.mtime.IsZero():
		return a.mtime.Equal(b.mtime) && (!a.hasOwner || !b.hasOwner || a.ctime.Equal(b.ctime))
	}
	return false
}

// manifest is the VM's tree as a checkpoint saw it, by absolute path.
type manifest map[string]stamp

// journalEntry is a path the files API changed: with tree, everything below
// it too.
type journalEntry struct {
	path string
	tree bool
}

// checkpoints is a live VM's checkpoint state, guarded by the liveVM's mu
// (run serializes the checkpoints themselves).
type checkpoints struct {
	run sync.Mutex
	// every is how often the service checkpoints the VM (0: never), and
	// last when the last checkpoint began or the VM came up.
	every time.Duration
	last  time.Time
	// layers are the recorded checkpoint's; seen the manifest of its
	// tree (nil: the next checkpoint is a full one).
	layers      []gateway.Checkpoint
	baseBytes   int64
	deltaBytes  int64
	seen        manifest
	journal     []journalEntry
	journalFull bool
	// guestHeld counts the guest runs in progress (execs, processes,
	// shells, agent sessions) and guestGen moves at each start and end;
	// scannedGen is guestGen when the last scan began.
	guestHeld  int
	guestGen   uint64
	scannedGen uint64
}

// guestRuns marks the start of guest code that may write files, and returns
// the mark of its end.
func (lv *liveVM) guestRuns() func() {
	lv.mu.Lock()
	lv.ckpt.guestHeld++
	lv.ckpt.guestGen++
	lv.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			lv.mu.Lock()
			lv.ckpt.guestHeld--
			lv.ckpt.guestGen++
			lv.mu.Unlock()
		})
	}
}

// journal records paths the files API is about to change.
func (lv *liveVM) journal(tree bool, paths ...string) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	for _, p := range paths {
		if len(lv.ckpt.journal) >= maxJournal {
			lv.ckpt.journalFull = true
			lv.ckpt.journal = nil
			return
		}
		if !lv.ckpt.journalFull {
			lv.ckpt.journal = append(lv.ckpt.journal, journalEntry{path: path.Clean(p), tree: tree})
		}
	}
}

// Checkpoint checkpoints a tenant's running VM now and returns its record.
// A hibernated VM, whose files are all in the store, is returned as it is;
// a VM in another state is CodeConflict.
func (s *Service) Checkpoint(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	if s.cfg.Images == nil {
		return gateway.VM{}, errNoImages()
	}
	lv := s.liveOf(tenantID, id)
	if lv == nil {
		return s.storedOrConflict(ctx, tenantID, id)
	}
	if err := s.checkpoint(ctx, lv); err != nil {
		return gateway.VM{}, err
	}
	return s.store.GetVM(ctx, tenantID, id)
}

// checkpointDue starts the checkpoints whose interval has passed, at most
// checkpointParallel at once; one still running is not started again.
func (s *Service) checkpointDue() {
	if s.cfg.Images == nil {
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	type dueVM struct {
		lv   *liveVM
		last time.Time
	}
	var due []dueVM
	for _, lv := range s.live {
		lv.mu.Lock()
		if lv.ckpt.every > 0 && !lv.ended && !lv.hibernating && now.Sub(lv.ckpt.last) >= lv.ckpt.every {
			due = append(due, dueVM{lv, lv.ckpt.last})
		}
		lv.mu.Unlock()
	}
	// The longest waiting go first.
	slices.SortFunc(due, func(a, b dueVM) int { return a.last.Compare(b.last) })
	for _, d := range due {
		lv := d.lv
		select {
		case s.ckptSlots <- struct{}{}:
		default:
			s.mu.Unlock()
			return
		}
		if s.closing {
			<-s.ckptSlots
			break
		}
		s.goLocked(func() {
			defer func() { <-s.ckptSlots }()
			ctx, cancel := context.WithTimeout(s.life, checkpointTimeout)
			defer cancel()
			if err := s.checkpoint(ctx, lv); err != nil && !errors.Is(err, errCheckpointSkipped) {
				s.log.Warn().Err(err).Str("vm", lv.id).Msg("checkpoint")
			}
		})
	}
	s.mu.Unlock()
}

// errCheckpointSkipped is a scheduled checkpoint that another one, or the
// VM's end, is ahead of.
var errCheckpointSkipped = errors.New("vms: checkpoint skipped")

// checkpoint stores what changed in lv's tree since its last checkpoint as
// a new layer, or a full capture when a new chain is due, and records it.
func (s *Service) checkpoint(ctx context.Context, lv *liveVM) error {
	// Not a hold on the VM (lv.hold): a checkpoint is no use of the VM,
	// and must not keep an idle one from hibernating.
	lv.ckpt.run.Lock()
	defer lv.ckpt.run.Unlock()
	start := s.cfg.Now()
	lv.mu.Lock()
	if lv.ended || lv.hibernating {
		lv.mu.Unlock()
		return gateway.Wrap(gateway.CodeConflict, errCheckpointSkipped, "the VM is hibernating or ending")
	}
	c := &lv.ckpt
	c.last = start
	full := c.seen == nil || len(c.layers) == 0 || len(c.layers) >= maxCheckpointLayers || c.deltaBytes > c.baseBytes
	guest := c.guestHeld > 0 || c.guestGen != c.scannedGen || c.journalFull
	gen := c.guestGen
	journal := c.journal
	c.journal, c.journalFull = nil, false
	old, layers := c.seen, slices.Clone(c.layers)
	lv.mu.Unlock()
	// A checkpoint that fails gives its journal back, for the next one.
	keepJournal := func() {
		lv.mu.Lock()
		if full || guest {
			lv.ckpt.journalFull = true
		}
		lv.ckpt.journal = append(journal, lv.ckpt.journal...)
		lv.mu.Unlock()
	}

	sc := newScanner(lv.vm)
	// One reconcile of the engine's shadow for the scan (agentos.VM.Settle).
	ctx, err := lv.vm.Settle(ctx)
	if err != nil {
		keepJournal()
		return err
	}
	var (
		cur     manifest
		changed []string
		deleted []string
	)
	switch {
	case full || guest:
		var err error
		base := old
		if full {
			base = nil
		}
		if cur, err = sc.scanAll(ctx, base); err != nil {
			keepJournal()
			return err
		}
		if full {
			changed = slices.Sorted(maps.Keys(cur))
		} else {
			changed, deleted = diffManifests(old, cur, nil)
		}
	case len(journal) == 0:
		// Nothing changed: the recorded layers describe the VM now.
	default:
		var err error
		cur = maps.Clone(old)
		if changed, deleted, err = sc.scanJournal(ctx, old, cur, journal); err != nil {
			keepJournal()
			return err
		}
	}

	var layer gateway.Checkpoint
	if full || len(changed) > 0 || len(deleted) > 0 {
		name, size, err := s.putImage(ctx, func(w io.Writer) error { return sc.writeLayer(ctx, w, cur, changed, deleted) })
		if err != nil {
			keepJournal()
			return gateway.Wrap(gateway.CodeUnavailable, err, "the VM's checkpoint could not be stored")
		}
		layer = gateway.Checkpoint{Image: name, Bytes: size}
		if full {
			layers = nil
		}
		layers = append(layers, layer)
	}
	if len(layers) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
	dropped, err := s.store.RecordCheckpoint(wctx, lv.id, layers, start)
	cancel()
	if err != nil {
		s.deleteImage(layer.Image)
		keepJournal()
		return err
	}
	for _, name := range dropped {
		s.deleteImage(name)
	}
	lv.mu.Lock()
	if cur != nil {
		lv.ckpt.seen = cur
	}
	if full || guest {
		lv.ckpt.scannedGen = gen
	}
	lv.ckpt.layers = layers
	if full {
		lv.ckpt.baseBytes, lv.ckpt.deltaBytes = layer.Bytes, 0
	} else {
		lv.ckpt.deltaBytes += layer.Bytes
	}
	lv.mu.Unlock()
	s.log.Debug().Str("vm", lv.id).Bool("full", full).Bool("scanned", full || guest).Int("changed", len(changed)).
		Int("deleted", len(deleted)).Int64("bytes", layer.Bytes).Dur("took", s.cfg.Now().Sub(start)).Msg("vm checkpointed")
	return nil
}

// dropCheckpoint removes the checkpoint of a VM that ended for good.
func (s *Service) dropCheckpoint(ctx context.Context, lv *liveVM) {
	lv.mu.Lock()
	had := len(lv.ckpt.layers) > 0
	lv.ckpt.layers, lv.ckpt.seen = nil, nil
	lv.mu.Unlock()
	if !had {
		return
	}
	dropped, err := s.store.DropCheckpoint(ctx, lv.id)
	if err != nil {
		s.log.Warn().Err(err).Str("vm", lv.id).Msg("drop the checkpoint of a disposed vm")
		return
	}
	for _, name := range dropped {
		s.deleteImage(name)
	}
}

// diffManifests returns the paths of cur that are new or changed since old,
// sorted, and the paths of old that cur lacks, the topmost of each deleted
// tree only. With within, only the paths it accepts are compared.
func diffManifests(old, cur manifest, within func(string) bool) (changed, deleted []string) {
	for p, st := range cur {
		if within != nil && !within(p) {
			continue
		}
		if o, ok := old[p]; !ok || !o.same(st) {
			changed = append(changed, p)
		}
	}
	for p := range old {
		if within != nil && !within(p) {
			continue
		}
		if _, ok := cur[p]; !ok {
			deleted = append(deleted, p)
		}
	}
	slices.Sort(changed)
	slices.Sort(deleted)
	return changed, topmost(deleted)
}

// topmost keeps, of sorted paths, those no other one is an ancestor of.
func topmost(sorted []string) []string {
	out := sorted[:0]
	for _, p := range sorted {
		if n := len(out); n > 0 && under(p, out[n-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// mountPoints are the guest paths of a VM's host directory mounts, whose
// files are the host's and stay out of its checkpoints.
func mountPoints(vm *agentos.VM) []string {
	var out []string
	for _, m := range vm.MountDescriptors() {
		out = append(out, path.Clean(m.GuestPath))
	}
	return out
}

// scanner reads a VM's tree for a checkpoint. After a one-frame export it
// keeps the entries, whose content a layer then takes without another call.
type scanner struct {
	vm *agentos.VM
	// cut are the mount points whose content is not the VM's own: the
	// kernel's and the engine's (mountedDirs), and the tenant's mounts.
	// The points themselves are kept, empty.
	cut      []string
	exported map[string]protocol.RootFilesystemEntry
}

func newScanner(vm *agentos.VM) *scanner {
	return &scanner{vm: vm, cut: append(slices.Clone(mountedDirs), mountPoints(vm)...)}
}

// skipped reports whether p is out of the checkpoint's tree: the content
// of the kernel's and the engine's mounts, and of host directory mounts.
func (sc *scanner) skipped(p string) bool {
	return slices.ContainsFunc(sc.cut, func(m string) bool { return p != m && under(p, m) })
}

// scanAll reads the stamps of the whole tree: from one export when it fits
// a frame; else, to compare with old, with the guest's find, and for a
// full capture (old nil), or when find does not run, with a listing and a
// stat of each entry.
func (sc *scanner) scanAll(ctx context.Context, old manifest) (manifest, error) {
	es, err := sc.vm.ExportRootFilesystemFrame(ctx)
	switch {
	case errors.Is(err, agentos.ErrSnapshotTooLarge):
		if old != nil {
			cur, err := sc.findAll(ctx, old)
			if !errors.Is(err, errNoFind) {
				return cur, err
			}
		}
		cur := manifest{}
		return cur, sc.statTree(ctx, "/", cur)
	case err != nil:
		return nil, EngineError(err, "checkpoint")
	}
	cur := manifest{}
	sc.exported = map[string]protocol.RootFilesystemEntry{}
	for _, e := range es {
		p := path.Clean(e.Path)
		if p == "/" || sc.skipped(p) {
			continue
		}
		st, err := exportStamp(e)
		if err != nil {
			return nil, gateway.Wrap(gateway.CodeInternal, err, "the VM's export could not be read")
		}
		cur[p] = st
		sc.exported[p] = e
	}
	return cur, nil
}

// exportStamp is the stamp of an exported entry: its content's hash stands
// for its modification time, which exports lack.
func exportStamp(e protocol.RootFilesystemEntry) (stamp, error) {
	var perm fs.FileMode = 0o644
	if e.Mode != nil {
		perm = archive.PermFromUnix(*e.Mode)
	} else if e.Kind == protocol.RootFilesystemEntryKindDirectory || e.Executable {
		perm = 0o755
	}
	st := stamp{perm: perm, hasSum: true, hasOwner: true}
	if e.UID != nil && e.GID != nil {
		st.uid, st.gid = int(*e.UID), int(*e.GID)
	}
	switch e.Kind {
	case protocol.RootFilesystemEntryKindDirectory:
		st.kind = tar.TypeDir
	case protocol.RootFilesystemEntryKindSymlink:
		st.kind = tar.TypeSymlink
		target := ""
		if e.Target != nil {
			target = *e.Target
		}
		st.size, st.sum = int64(len(target)), sha256.Sum256([]byte(target))
	default:
		data, err := agentos.DecodeContent(e)
		if err != nil {
			return stamp{}, err
		}
		st.kind, st.size, st.sum = tar.TypeReg, int64(len(data)), sha256.Sum256(data)
	}
	return st, nil
}

// statTree adds the stamps of p and, for a directory, of everything below
// it to m: one recursive listing per subtree that holds no mount, then a
// stat of each entry. Entries that vanish meanwhile are left out.
func (sc *scanner) statTree(ctx context.Context, p string, m manifest) error {
	if p != "/" {
		st, ok, err := sc.stat(ctx, p)
		if err != nil || !ok {
			return err
		}
		m[p] = st
		if st.kind != tar.TypeDir || slices.Contains(sc.cut, p) {
			return nil
		}
	}
	if !slices.ContainsFunc(sc.cut, func(c string) bool { return c != p && under(c, p) }) {
		es, err := sc.vm.ReadDirRecursive(ctx, p, agentos.ReadDirOptions{})
		if err != nil {
			return EngineError(err, "checkpoint")
		}
		for _, e := range es {
			if sc.skipped(e.Path) {
				continue
			}
			st, ok, err := sc.stat(ctx, e.Path)
			if err != nil {
				return err
			}
			if ok {
				m[path.Clean(e.Path)] = st
			}
		}
		return nil
	}
	es, err := sc.vm.ReadDir(ctx, p)
	if err != nil {
		return EngineError(err, "checkpoint")
	}
	for _, e := range es {
		if err := sc.statTree(ctx, path.Clean(e.Path), m); err != nil {
			return err
		}
	}
	return nil
}

// stat returns the stamp of p, and false when p does not exist.
func (sc *scanner) stat(ctx context.Context, p string) (stamp, bool, error) {
	info, err := sc.vm.Lstat(ctx, p)
	if errors.Is(err, agentos.ErrNotFound) {
		return stamp{}, false, nil
	}
	if err != nil {
		return stamp{}, false, EngineError(err, "checkpoint")
	}
	st := stamp{perm: archive.PermFromUnix(info.RawMode), uid: int(info.UID), gid: int(info.GID), hasOwner: true,
		size: info.Size, mtime: info.ModTime, ctime: info.ChangeTime}
	switch info.RawMode & modeTypeMask {
	case modeDir:
		st.kind, st.size = tar.TypeDir, 0
	case modeSymlink:
		st.kind = tar.TypeSymlink
	case modeRegular:
		st.kind = tar.TypeReg
	default:
		// Fifos, sockets and devices are not kept, as in snapshots.
		return stamp{}, false, nil
	}
	return st, true, nil
}

// findFormat is what the guest's find prints of each entry: its type, size,
// modification time (seconds, with a fraction) and path, NUL-terminated,
// since a path may hold any other byte.
const findFormat = `%y\t%s\t%T@\t%p\0`

// errNoFind is a guest find that did not run to the end.
var errNoFind = errors.New("vms: the VM's find did not run")

// findAll stamps the whole tree with one find the VM runs, pruned at the
// mounts. The contents of directories the guest user may not read (find
// says "Permission denied") cannot have changed by guest code either: their
// stamps are taken over from old. errNoFind says to compare another way.
func (sc *scanner) findAll(ctx context.Context, old manifest) (manifest, error) {
	top, err := sc.vm.ReadDir(ctx, "/")
	if err != nil {
		return nil, EngineError(err, "checkpoint")
	}
	argv := []string{"find"}
	for _, e := range top {
		if p := path.Clean(e.Path); !slices.Contains(sc.cut, p) {
			argv = append(argv, p)
		}
	}
	argv = append(argv, "(")
	for i, p := range sc.cut {
		if i > 0 {
			argv = append(argv, "-o")
		}
		argv = append(argv, "-path", p)
	}
	argv = append(argv, ")", "-prune", "-o", "-printf", findFormat)
	res, err := sc.vm.ExecArgv(ctx, argv, agentos.ExecOptions{Timeout: time.Minute, MaxOutputBytes: 64 << 20})
	if err != nil || res.StdoutTruncated || res.StderrTruncated {
		return nil, errNoFind
	}
	var denied []string
	for line := range strings.SplitSeq(string(res.Stderr), "\n") {
		if p, ok := strings.CutSuffix(line, ": Permission denied (os error 2)"); ok && strings.HasPrefix(p, "Error: /") {
			denied = append(denied, strings.TrimPrefix(p, "Error: "))
		} else if line != "" {
			return nil, fmt.Errorf("%w: %s", errNoFind, line)
		}
	}
	if res.ExitCode != 0 && len(denied) == 0 {
		return nil, errNoFind
	}
	cur := manifest{}
	for rec := range strings.SplitSeq(string(res.Stdout), "\x00") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, "\t", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("%w: a record %q", errNoFind, rec)
		}
		var st stamp
		switch f[0] {
		case "d":
			st.kind = tar.TypeDir
		case "f":
			st.kind = tar.TypeReg
		case "l":
			st.kind = tar.TypeSymlink
		default:
			continue
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		mtime, err2 := findTime(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%w: a record %q: %v", errNoFind, rec, err)
		}
		if st.kind != tar.TypeDir {
			st.size = size
		}
		st.mtime = mtime
		if p := path.Clean(f[3]); p != "/" && !sc.skipped(p) {
			cur[p] = st
		}
	}
	for _, d := range denied {
		for p, st := range old {
			if p != d && under(p, d) {
				cur[p] = st
			}
		}
	}
	// The mount points themselves are kept, empty, as a stat stamps them;
	// find, pruned at them, does not print them.
	for _, m := range sc.cut {
		if st, ok := old[m]; ok {
			cur[m] = st
		}
	}
	return cur, nil
}

// findTime reads a time find printed as seconds with a fraction, to the
// millisecond the engine keeps.
func findTime(s string) (time.Time, error) {
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	frac = (frac + "000000000")[:9]
	ns, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(sec, ns).Round(time.Millisecond).UTC(), nil
}

// scanJournal re-reads the paths the files API changed, updates cur (a copy
// of old) with what it finds, and returns what changed and what went.
func (sc *scanner) scanJournal(ctx context.Context, old, cur manifest, journal []journalEntry) (changed, deleted []string, err error) {
	// A path journaled twice is scanned once, as a tree when either entry
	// was one; a path below a tree being scanned needs no scan of its own.
	trees := map[string]bool{}
	for _, j := range journal {
		trees[j.path] = trees[j.path] || j.tree
	}
	roots := slices.Sorted(maps.Keys(trees))
	var kept []string
	for _, p := range roots {
		if slices.ContainsFunc(kept, func(t string) bool { return trees[t] && under(p, t) }) || sc.skipped(p) {
			continue
		}
		kept = append(kept, p)
	}
	for _, p := range kept {
		within := func(q string) bool { return q == p }
		if trees[p] {
			within = func(q string) bool { return under(q, p) }
		}
		for q := range cur {
			if within(q) {
				delete(cur, q)
			}
		}
		if trees[p] {
			err = sc.statTree(ctx, p, cur)
		} else {
			var st stamp
			var ok bool
			if st, ok, err = sc.stat(ctx, p); ok {
				cur[p] = st
			}
		}
		if err != nil {
			return nil, nil, err
		}
		c, d := diffManifests(old, cur, within)
		changed, deleted = append(changed, c...), append(deleted, d...)
	}
	slices.Sort(changed)
	slices.Sort(deleted)
	return slices.Compact(changed), topmost(slices.Compact(deleted)), nil
}

// writeLayer writes a layer into w: a global header with the deleted
// paths, when there are some, then the changed entries, parents first.
func (sc *scanner) writeLayer(ctx context.Context, w io.Writer, cur manifest, changed, deleted []string) error {
	tw := tar.NewWriter(w)
	if len(deleted) > 0 {
		list, err := json.Marshal(deleted)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
			PAXRecords: map[string]string{deletedRecord: string(list)}, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, p := range changed {
		if err := sc.writeEntry(ctx, tw, p, cur[p]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeEntry writes one entry of a layer. A file is read whole before its
// header is written, so that one that grows or shrinks meanwhile is kept
// as read; one that went meanwhile is left out (the next scan sees it gone).
func (sc *scanner) writeEntry(ctx context.Context, tw *tar.Writer, p string, st stamp) error {
	if !st.hasOwner {
		// The guest's find told that the entry changed; the host's stat
		// tells its mode and owner.
		var ok bool
		var err error
		if st, ok, err = sc.stat(ctx, p); err != nil || !ok {
			return err
		}
	}
	hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: archive.UnixPerm(st.perm), Uid: st.uid, Gid: st.gid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	e, exported := sc.exported[p]
	switch st.kind {
	case tar.TypeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		return tw.WriteHeader(hdr)
	case tar.TypeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		switch {
		case exported && e.Target != nil:
			hdr.Linkname = *e.Target
		default:
			target, err := sc.vm.Readlink(ctx, p)
			if errors.Is(err, agentos.ErrNotFound) {
				return nil
			}
			if err != nil {
				return EngineError(err, "checkpoint")
			}
			hdr.Linkname = target
		}
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if exported {
		data, err := agentos.DecodeContent(e)
		if err != nil {
			return err
		}
		hdr.Size = int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	sp := &spool{}
	defer sp.close()
	if _, err := sc.vm.ReadFileTo(ctx, p, sp); err != nil {
		if errors.Is(err, agentos.ErrNotFound) {
			return nil
		}
		return EngineError(err, "checkpoint")
	}
	hdr.Size = sp.size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	r, err := sp.reader()
	if err != nil {
		return err
	}
	_, err = io.Copy(tw, r)
	return err
}

// spool holds a file's bytes in memory up to spoolMemory, and the rest of
// them in a temporary file.
type spool struct {
	mem  bytes.Buffer
	file *os.File
	n    int64
}

func (s *spool) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	if s.file == nil && s.mem.Len()+len(p) <= spoolMemory {
		return s.mem.Write(p)
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "agentos-checkpoint-*")
		if err != nil {
			return 0, err
		}
		s.file = f
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			return 0, err
		}
		s.mem.Reset()
	}
	return s.file.Write(p)
}

func (s *spool) size() int64 { return s.n }

func (s *spool) reader() (io.Reader, error) {
	if s.file == nil {
		return &s.mem, nil
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.file, nil
}

func (s *spool) close() {
	if s.file != nil {
		s.file.Close()
		os.Remove(s.file.Name())
	}
}

// restoreImage merges the layers of a checkpoint into one snapshot tar, in
// a temporary file of dir that goes when the returned file is closed. The
// layers are read where the image store keeps them (its opens seek, on disk
// and in PostgreSQL alike), so the merged image is the only local copy: a
// restore's peak disk use is the merged tree, not every layer besides.
func (s *Service) restoreImage(ctx context.Context, layers []gateway.Checkpoint, dir string) (io.ReadSeekCloser, error) {
	opened := make([]io.ReadSeekCloser, 0, len(layers))
	defer func() {
		for _, rc := range opened {
			_ = rc.Close()
		}
	}()
	rs := make([]io.ReadSeeker, 0, len(layers))
	for _, l := range layers {
		rc, err := s.cfg.Images.Open(ctx, l.Image)
		if err != nil {
			return nil, fmt.Errorf("open checkpoint layer %s: %w", l.Image, err)
		}
		opened = append(opened, rc)
		rs = append(rs, rc)
	}
	out, err := os.CreateTemp(dir, "agentos-restore-*")
	if err != nil {
		return nil, err
	}
	img := &tempFile{out}
	if err := mergeLayers(out, rs); err != nil {
		img.Close()
		return nil, err
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		img.Close()
		return nil, err
	}
	return img, nil
}

// tempFile is a file removed when closed.
type tempFile struct{ *os.File }

func (f *tempFile) Close() error {
	err := f.File.Close()
	os.Remove(f.Name())
	return err
}

// layerEntry is where the newest version of one path is in the layers.
type layerEntry struct {
	layer  int
	hdr    *tar.Header
	offset int64
}

// mergeLayers writes into w the snapshot tar of the tree that layers, oldest
// first, describe: each path as its newest layer has it, unless a later
// layer deleted it, parents before children.
func mergeLayers(w io.Writer, layers []io.ReadSeeker) error {
	tree := map[string]layerEntry{}
	for i, r := range layers {
		cr := &countingReader{r: r}
		tr := tar.NewReader(cr)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("checkpoint layer %d: %w", i, err)
			}
			if hdr.Typeflag == tar.TypeXGlobalHeader {
				var gone []string
				if err := json.Unmarshal([]byte(hdr.PAXRecords[deletedRecord]), &gone); err != nil && hdr.PAXRecords[deletedRecord] != "" {
					return fmt.Errorf("checkpoint layer %d: deleted paths: %w", i, err)
				}
				for _, g := range gone {
					g = strings.TrimPrefix(path.Clean("/"+g), "/")
					for name := range tree {
						if name == g || strings.HasPrefix(name, g+"/") {
							delete(tree, name)
						}
					}
				}
				continue
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			if name == "" || path.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
				return fmt.Errorf("checkpoint layer %d: entry %q outside the root", i, hdr.Name)
			}
			tree[path.Clean(name)] = layerEntry{layer: i, hdr: hdr, offset: cr.n}
		}
	}
	tw := tar.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(tree)) {
		e := tree[name]
		hdr := *e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			continue
		}
		r := layers[e.layer]
		if _, err := r.Seek(e.offset, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, r, hdr.Size); err != nil {
			return fmt.Errorf("checkpoint layer %d: %s: %w", e.layer, name, err)
		}
	}
	return tw.Close()
}

// countingReader counts the bytes read through it: after tar.Reader.Next,
// the offset of the entry's content (the reader reads no further ahead).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// DefaultCheckpointSeconds is the checkpointSeconds of a VM created without
// one: the service's CheckpointInterval, or 0 when VMs cannot be
// checkpointed (no image store).
func (s *Service) DefaultCheckpointSeconds() int {
	if s.cfg.Images == nil {
		return 0
	}
	return int(s.cfg.CheckpointInterval / time.Second)
}

// checkpointEvery is the interval of a VM's checkpoints its spec gives.
func checkpointEvery(spec gateway.VMSpec) time.Duration {
	return time.Duration(spec.CheckpointSeconds) * time.Second
}
