package images

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
// list of layers in the blob store: a full capture of the tree, then the
// changes of each later checkpoint, as tars in the snapshot format (names
// relative to /) whose first entry may be a PAX global header listing the
// paths deleted since the layer before. Restoring merges the layers into
// one snapshot tar, newest entry of each path first, and the VM wakes
// from it as from a hibernation image (restore.go).
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
// Only what differs is read and stored. After maxLayers layers,
// or once the changes outweigh the full capture, the next checkpoint is a
// full one again, and the layers it replaces are removed. What a checkpoint
// reads is consistent per file, not across files: a process writing while
// it runs may leave a mix of older and newer files, as a crash would.

const (
	// maxLayers bounds the layers a restore merges.
	maxLayers = 8
	// spoolMemory is the largest file a checkpoint holds in memory while it
	// reads it; a larger one is spooled through a temporary file.
	spoolMemory = 4 << 20
	// deletedRecord is the PAX record of a layer's global header that
	// lists, as a JSON array, the paths deleted since the layer before.
	deletedRecord = "AGENTOS.deleted"
)

// Change is a path the files API changed: with Tree, everything below it
// too.
type Change struct {
	Path string
	Tree bool
}

// Changes is what the caller knows changed in the tree since the chain's
// last checkpoint.
type Changes struct {
	// Guest says that guest code ran (or that Journal is incomplete): the
	// whole tree is compared with the last checkpoint's manifest.
	Guest bool
	// Journal are the files API's changes, which are exact.
	Journal []Change
}

// Chain is a VM's checkpoint: the layers recorded of its tree, and the
// manifest of the tree they describe. Its methods may be called from any
// goroutine; the caller runs one Checkpoint of a chain at a time.
type Chain struct {
	mu sync.Mutex
	// layers are the recorded checkpoint's; seen the manifest of its
	// tree (nil: the next checkpoint is a full one).
	layers     []gateway.Checkpoint
	baseBytes  int64
	deltaBytes int64
	seen       manifest
}

// NewChain returns the chain of a VM whose checkpoint has layers (none: a
// VM never checkpointed). Its manifest is unknown, so its next checkpoint
// is a full one.
func NewChain(layers []gateway.Checkpoint) *Chain {
	return &Chain{layers: layers}
}

// Layers returns the chain's recorded layers, oldest first.
func (c *Chain) Layers() []gateway.Checkpoint {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.layers)
}

// Drop forgets the chain's layers, and says whether it had some: the
// caller drops their record and their blobs. A nil chain has none.
func (c *Chain) Drop() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	had := len(c.layers) > 0
	c.layers, c.seen = nil, nil
	return had
}

// Checkpointed is what one checkpoint did.
type Checkpointed struct {
	// Full says it captured the whole tree as a new chain; Scanned that it
	// compared the whole tree (a full one, or after guest code ran).
	Full, Scanned    bool
	Changed, Deleted int
	// Layer is the layer it stored (none when nothing changed).
	Layer gateway.Checkpoint
}

// Record records a chain's new list of layers, in the store, and returns
// the blobs of the layers the list no longer holds.
type Record func(ctx context.Context, layers []gateway.Checkpoint) (dropped []string, err error)

// Checkpoint stores what changed in t since the chain's last checkpoint as
// a new layer, or a full capture when a new chain is due, records the
// layers with record, and removes the blobs of the layers it replaced.
// What it returns is filled in as far as it got, also with an error:
// after a checkpoint that failed with Scanned set, the journal it was
// given no longer tells every change, and the next one must scan too.
func (s Store) Checkpoint(ctx context.Context, c *Chain, t Tree, ch Changes, record Record) (Checkpointed, error) {
	c.mu.Lock()
	full := c.seen == nil || len(c.layers) == 0 || len(c.layers) >= maxLayers || c.deltaBytes > c.baseBytes
	old, layers := c.seen, slices.Clone(c.layers)
	c.mu.Unlock()
	res := Checkpointed{Full: full, Scanned: full || ch.Guest}

	sc := newScanner(t, s.engineError)
	// One reconcile of the engine's shadow for the scan (agentos.VM.Settle).
	ctx, err := t.Settle(ctx)
	if err != nil {
		return res, err
	}
	var (
		cur     manifest
		changed []string
		deleted []string
	)
	switch {
	case res.Scanned:
		var err error
		base := old
		if full {
			base = nil
		}
		if cur, err = sc.scanAll(ctx, base); err != nil {
			return res, err
		}
		if full {
			changed = slices.Sorted(maps.Keys(cur))
		} else {
			changed, deleted = diffManifests(old, cur, nil)
		}
	case len(ch.Journal) == 0:
		// Nothing changed: the recorded layers describe the VM now.
	default:
		var err error
		cur = maps.Clone(old)
		if changed, deleted, err = sc.scanJournal(ctx, old, cur, ch.Journal); err != nil {
			return res, err
		}
	}
	res.Changed, res.Deleted = len(changed), len(deleted)

	if full || len(changed) > 0 || len(deleted) > 0 {
		name, size, err := Put(ctx, s.Blobs, func(w io.Writer) error { return sc.writeLayer(ctx, w, cur, changed, deleted) })
		if err != nil {
			return res, gateway.Wrap(gateway.CodeUnavailable, err, "the VM's checkpoint could not be stored")
		}
		res.Layer = gateway.Checkpoint{Image: name, Bytes: size}
		if full {
			layers = nil
		}
		layers = append(layers, res.Layer)
	}
	if len(layers) == 0 {
		return res, nil
	}
	dropped, err := record(ctx, layers)
	if err != nil {
		s.Discard(res.Layer.Image)
		return res, err
	}
	for _, name := range dropped {
		s.Discard(name)
	}
	c.mu.Lock()
	if cur != nil {
		c.seen = cur
	}
	c.layers = layers
	if full {
		c.baseBytes, c.deltaBytes = res.Layer.Bytes, 0
	} else {
		c.deltaBytes += res.Layer.Bytes
	}
	c.mu.Unlock()
	return res, nil
}

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

// scanner reads a VM's tree for a checkpoint. After a one-frame export it
// keeps the entries, whose content a layer then takes without another call.
type scanner struct {
	t Tree
	// engineError words the engine's errors (Store.EngineError).
	engineError func(err error, what string) error
	// cut are the mount points whose content is not the VM's own: the
	// kernel's and the engine's (mountedDirs), and the tenant's mounts.
	// The points themselves are kept, empty.
	cut      []string
	exported map[string]protocol.RootFilesystemEntry
}

func newScanner(t Tree, engineError func(err error, what string) error) *scanner {
	return &scanner{t: t, engineError: engineError, cut: cutPoints(t)}
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
	es, err := sc.t.ExportRootFilesystemFrame(ctx)
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
		return nil, sc.engineError(err, "checkpoint")
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
		es, err := sc.t.ReadDirRecursive(ctx, p, agentos.ReadDirOptions{})
		if err != nil {
			return sc.engineError(err, "checkpoint")
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
	es, err := sc.t.ReadDir(ctx, p)
	if err != nil {
		return sc.engineError(err, "checkpoint")
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
	info, err := sc.t.Lstat(ctx, p)
	if errors.Is(err, agentos.ErrNotFound) {
		return stamp{}, false, nil
	}
	if err != nil {
		return stamp{}, false, sc.engineError(err, "checkpoint")
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
var errNoFind = errors.New("images: the VM's find did not run")

// findAll stamps the whole tree with one find the VM runs, pruned at the
// mounts. The contents of directories the guest user may not read (find
// says "Permission denied") cannot have changed by guest code either: their
// stamps are taken over from old. errNoFind says to compare another way.
func (sc *scanner) findAll(ctx context.Context, old manifest) (manifest, error) {
	top, err := sc.t.ReadDir(ctx, "/")
	if err != nil {
		return nil, sc.engineError(err, "checkpoint")
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
	res, err := sc.t.ExecArgv(ctx, argv, agentos.ExecOptions{Timeout: time.Minute, MaxOutputBytes: 64 << 20})
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
func (sc *scanner) scanJournal(ctx context.Context, old, cur manifest, journal []Change) (changed, deleted []string, err error) {
	// A path journaled twice is scanned once, as a tree when either entry
	// was one; a path below a tree being scanned needs no scan of its own.
	trees := map[string]bool{}
	for _, j := range journal {
		trees[j.Path] = trees[j.Path] || j.Tree
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
			target, err := sc.t.Readlink(ctx, p)
			if errors.Is(err, agentos.ErrNotFound) {
				return nil
			}
			if err != nil {
				return sc.engineError(err, "checkpoint")
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
	if _, err := sc.t.ReadFileTo(ctx, p, sp); err != nil {
		if errors.Is(err, agentos.ErrNotFound) {
			return nil
		}
		return sc.engineError(err, "checkpoint")
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
