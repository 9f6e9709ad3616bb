package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// memTree is a live tree in memory: the engine's answers as the images
// package reads them, with a clock that moves at every change, and no
// find (so that a comparison stats each entry, as for a VM that may not
// run one).
type memTree struct {
	entries map[string]*memEntry
	// large makes the one-frame export refuse, as for a tree past a frame.
	large bool
	now   time.Time
	// reads counts the files read whole, lstats the stats.
	reads, lstats int
}

type memEntry struct {
	dir          bool
	target       string // a symlink's
	data         []byte
	perm         uint32
	mtime, ctime time.Time
}

func newMemTree() *memTree {
	t := &memTree{entries: map[string]*memEntry{}, now: time.Unix(1_700_000_000, 0).UTC()}
	for _, d := range append([]string{"/", "/opt"}, append(slices.Clone(mountedDirs), "/workspace")...) {
		t.mkdir(d)
	}
	t.write("/proc/cpuinfo", "not the VM's own")
	return t
}

func (t *memTree) tick() time.Time {
	t.now = t.now.Add(time.Millisecond)
	return t.now
}

func (t *memTree) mkdir(p string) {
	now := t.tick()
	t.entries[p] = &memEntry{dir: true, perm: 0o755, mtime: now, ctime: now}
}

func (t *memTree) write(p, data string) {
	now := t.tick()
	t.entries[p] = &memEntry{data: []byte(data), perm: 0o644, mtime: now, ctime: now}
}

func (t *memTree) symlink(target, p string) {
	now := t.tick()
	t.entries[p] = &memEntry{target: target, perm: 0o777, mtime: now, ctime: now}
}

func (t *memTree) remove(p string) {
	for q := range t.entries {
		if under(q, p) {
			delete(t.entries, q)
		}
	}
}

func (t *memTree) ExportRootFilesystemFrame(context.Context) ([]protocol.RootFilesystemEntry, error) {
	if t.large {
		return nil, agentos.ErrSnapshotTooLarge
	}
	var out []protocol.RootFilesystemEntry
	for _, p := range slices.Sorted(maps.Keys(t.entries)) {
		e := t.entries[p]
		perm := e.perm
		uid, gid := uint32(0), uint32(0)
		re := protocol.RootFilesystemEntry{Path: p, Mode: &perm, UID: &uid, GID: &gid}
		switch {
		case e.dir:
			re.Kind = protocol.RootFilesystemEntryKindDirectory
		case e.target != "":
			target := e.target
			re.Kind, re.Target = protocol.RootFilesystemEntryKindSymlink, &target
		default:
			content, enc := agentos.EncodeContent(e.data)
			re.Kind, re.Content, re.Encoding = protocol.RootFilesystemEntryKindFile, &content, enc
		}
		out = append(out, re)
	}
	return out, nil
}

func (t *memTree) Settle(ctx context.Context) (context.Context, error) { return ctx, nil }

func (t *memTree) dirEntry(p string) gateway.DirEntry {
	e := t.entries[p]
	return gateway.DirEntry{Name: path.Base(p), Path: p, IsDir: e.dir, IsSymlink: e.target != "", Size: int64(len(e.data))}
}

func (t *memTree) ReadDir(_ context.Context, p string) ([]gateway.DirEntry, error) {
	var out []gateway.DirEntry
	for _, q := range slices.Sorted(maps.Keys(t.entries)) {
		if q != "/" && path.Dir(q) == p {
			out = append(out, t.dirEntry(q))
		}
	}
	return out, nil
}

func (t *memTree) ReadDirRecursive(_ context.Context, p string, _ agentos.ReadDirOptions) ([]gateway.DirEntry, error) {
	var out []gateway.DirEntry
	for _, q := range slices.Sorted(maps.Keys(t.entries)) {
		if q != p && under(q, p) {
			out = append(out, t.dirEntry(q))
		}
	}
	return out, nil
}

func (t *memTree) Lstat(_ context.Context, p string) (agentos.FileInfo, error) {
	t.lstats++
	e, ok := t.entries[p]
	if !ok {
		return agentos.FileInfo{}, fmt.Errorf("%w: %s", agentos.ErrNotFound, p)
	}
	info := agentos.FileInfo{Path: p, ModTime: e.mtime, ChangeTime: e.ctime, Size: int64(len(e.data))}
	switch {
	case e.dir:
		info.RawMode = modeDir | e.perm
	case e.target != "":
		info.RawMode, info.Size = modeSymlink|e.perm, int64(len(e.target))
	default:
		info.RawMode = modeRegular | e.perm
	}
	return info, nil
}

func (t *memTree) Readlink(_ context.Context, p string) (string, error) {
	e, ok := t.entries[p]
	if !ok || e.target == "" {
		return "", fmt.Errorf("%w: %s", agentos.ErrNotFound, p)
	}
	return e.target, nil
}

func (t *memTree) ReadFileTo(_ context.Context, p string, w io.Writer) (int64, error) {
	e, ok := t.entries[p]
	if !ok {
		return 0, fmt.Errorf("%w: %s", agentos.ErrNotFound, p)
	}
	t.reads++
	n, err := w.Write(e.data)
	return int64(n), err
}

func (t *memTree) ExecArgv(context.Context, []string, agentos.ExecOptions) (*agentos.ExecResult, error) {
	return nil, errors.New("memTree: no processes")
}

func (t *memTree) MountDescriptors() []protocol.MountDescriptor { return nil }

func (t *memTree) ShadowSkips() int64 { return 0 }

// contents is what an image holds, as readTar lists it.
func (t *memTree) contents() []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(t.entries)) {
		e := t.entries[p]
		name := strings.TrimPrefix(p, "/")
		switch {
		case p == "/" || strings.HasPrefix(p, "/proc/"):
		case e.dir:
			out = append(out, name+"/")
		case e.target != "":
			out = append(out, name+"->"+e.target)
		default:
			out = append(out, name+"="+string(e.data))
		}
	}
	return out
}

// TestCheckpointChainInMemory: a chain of checkpoints of a tree in memory,
// compared each way (the export's hashes, a stat of each entry, the files
// API's journal), restores to the tree as it is at the last one; each
// layer after the first reads only what changed.
func TestCheckpointChainInMemory(t *testing.T) {
	for _, large := range []bool{false, true} {
		t.Run(fmt.Sprintf("past a frame %v", large), func(t *testing.T) {
			ctx := context.Background()
			s := Store{Blobs: DirBlobs{Dir: t.TempDir()}}
			tree := newMemTree()
			tree.large = large
			tree.mkdir("/workspace/src")
			tree.write("/workspace/src/a.txt", "one")
			tree.write("/workspace/src/b.txt", "keep")
			tree.symlink("src/a.txt", "/workspace/link")

			chain := NewChain(nil)
			var recorded []gateway.Checkpoint
			record := func(_ context.Context, layers []gateway.Checkpoint) ([]string, error) {
				var dropped []string
				for _, l := range recorded {
					if !slices.Contains(layers, l) {
						dropped = append(dropped, l.Image)
					}
				}
				recorded = slices.Clone(layers)
				return dropped, nil
			}
			restored := func() []string {
				t.Helper()
				img, err := s.Restore(ctx, chain.Layers(), t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer img.Close()
				b, err := io.ReadAll(img)
				if err != nil {
					t.Fatal(err)
				}
				return readTar(t, b)
			}
			step := func(name string, ch Changes, wantFull bool, wantChanged, wantDeleted int) {
				t.Helper()
				res, err := s.Checkpoint(ctx, chain, tree, ch, record)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if res.Full != wantFull || res.Changed != wantChanged || res.Deleted != wantDeleted {
					t.Fatalf("%s: full %v, %d changed, %d deleted; want %v, %d, %d", name, res.Full, res.Changed, res.Deleted, wantFull, wantChanged, wantDeleted)
				}
				if got, want := restored(), tree.contents(); !slices.Equal(got, want) {
					t.Fatalf("%s: restored\n%q\nwant\n%q", name, got, want)
				}
			}

			// The full capture: every entry but the mounted directories'
			// content (the directories themselves are kept).
			step("full", Changes{}, true, len(tree.contents()), 0)
			if n := len(chain.Layers()); n != 1 {
				t.Fatalf("%d layers after the first checkpoint", n)
			}

			// Nothing changed: no layer.
			step("unchanged", Changes{}, false, 0, 0)
			if n := len(chain.Layers()); n != 1 {
				t.Fatalf("%d layers after a checkpoint of no change", n)
			}

			// The files API's changes: the journal alone is re-read.
			tree.write("/workspace/src/a.txt", "two")
			tree.mkdir("/workspace/new")
			tree.write("/workspace/new/c.txt", "new")
			tree.reads = 0
			step("journal", Changes{Journal: []Change{{Path: "/workspace/src/a.txt"}, {Path: "/workspace/new", Tree: true}}}, false, 3, 0)
			if tree.reads != 2 {
				t.Errorf("the journal's layer read %d files, want the 2 it names", tree.reads)
			}

			// Guest code ran: the whole tree is compared, and only what
			// differs is stored.
			tree.remove("/workspace/src")
			tree.write("/workspace/new/c.txt", "newer")
			tree.reads = 0
			step("guest", Changes{Guest: true}, false, 1, 1)
			if large && tree.reads != 1 {
				t.Errorf("the guest's layer read %d files, want the one that changed", tree.reads)
			}
			if n := len(chain.Layers()); n != 3 {
				t.Fatalf("%d layers, want 3", n)
			}

			// A dropped chain starts again with a full capture, and its
			// record drops the layers it replaces.
			if !chain.Drop() || chain.Drop() {
				t.Fatal("Drop did not report the layers once")
			}
			step("again", Changes{}, true, len(tree.contents()), 0)
			if len(recorded) != 1 {
				t.Fatalf("recorded %d layers after a new full one", len(recorded))
			}
		})
	}
}

// TestCaptureInMemory: a capture of a tree in memory holds every entry of
// it, and the check against the live tree finds nothing missing; an image
// that lacks an entry both listings agree on is a mismatch.
func TestCaptureInMemory(t *testing.T) {
	ctx := context.Background()
	s := Store{Blobs: DirBlobs{Dir: t.TempDir()}}
	tree := newMemTree()
	tree.large = true
	tree.mkdir("/workspace/src")
	tree.write("/workspace/src/a.txt", "one")
	tree.symlink("src/a.txt", "/workspace/link")
	c, err := s.Capture(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Mismatches) != 0 || c.ShadowUnchecked {
		t.Fatalf("mismatches %v, unchecked %v", c.Mismatches, c.ShadowUnchecked)
	}
	rc, err := s.Blobs.Open(ctx, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readTar(t, b), tree.contents(); !slices.Equal(got, want) {
		t.Fatalf("captured\n%q\nwant\n%q", got, want)
	}
	root, err := OpenRoot(&nopCloser{bytes.NewReader(b)})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if len(root.Entries) != len(tree.contents()) {
		t.Fatalf("the create frame holds %d entries, want %d", len(root.Entries), len(tree.contents()))
	}

	seen, err := listTree(ctx, tree, cutPoints(tree))
	if err != nil {
		t.Fatal(err)
	}
	delete(seen, "/workspace/src/a.txt")
	live, _ := listTree(ctx, tree, cutPoints(tree))
	if ms := imageMismatches(seen, live, live); len(ms) != 1 || !strings.Contains(ms[0].String(), "/workspace/src/a.txt") {
		t.Fatalf("mismatches %v", ms)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
