package agentos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// SnapshotFrameBytes is what one snapshot frame of the pinned engine
// carries. Measured on 0.2.21 (TestSnapshotFrameLimit): the sidecar refuses
// to send a response frame larger than 8 MiB (its "stdio terminal response
// egress", ERR_AGENTOS_TERMINAL_RESPONSE_LIMIT), so a root filesystem whose
// export is larger cannot be exported in one SnapshotRootFilesystemRequest;
// a CreateVmRequest carrying a snapshot lower of 10 MiB was accepted, so the
// same bound serves the way back. Larger trees move in chunked file calls.
const SnapshotFrameBytes = 8 << 20

// snapshotExportBudget is the maxBytes of an export: the engine counts its
// own encoding of the entries (larger than the frame's: measured 282,306
// bytes for a 197 KB frame), so a budget below the frame limit refuses
// every export that would not fit before it is attempted.
const snapshotExportBudget = SnapshotFrameBytes - 64<<10

// ErrSnapshotTooLarge means a root filesystem does not fit one snapshot
// frame: export it with file calls instead.
var ErrSnapshotTooLarge = errors.New("agentos: root filesystem larger than one snapshot frame")

// engineResponseLimit is the engine's refusal of a response over its frame
// limit.
const engineResponseLimit EngineCode = "ERR_AGENTOS_TERMINAL_RESPONSE_LIMIT"

// ExportRootFilesystemFrame exports the VM's root filesystem in one
// snapshot frame, or returns ErrSnapshotTooLarge when it does not fit one.
func (vm *VM) ExportRootFilesystemFrame(ctx context.Context) ([]protocol.RootFilesystemEntry, error) {
	es, err := vm.ExportRootFilesystem(ctx, snapshotExportBudget)
	var rej *RejectedError
	if errors.As(err, &rej) && (rej.Errno == "EFBIG" || isResponseLimit(rej)) {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotTooLarge, err)
	}
	return es, err
}

// isResponseLimit reports whether the engine refused to send a response
// over its frame limit: it names the condition as the rejection's code.
func isResponseLimit(rej *RejectedError) bool {
	return rej.Code == string(engineResponseLimit) || rej.EngineCode == engineResponseLimit
}

// rootEntryJSON is a RootFilesystemEntry as the CreateVmRequest config
// spells it (the JSON form of the BARE struct).
type rootEntryJSON struct {
	Path       string  `json:"path"`
	Kind       string  `json:"kind"`
	Mode       *uint32 `json:"mode,omitempty"`
	UID        *uint32 `json:"uid,omitempty"`
	GID        *uint32 `json:"gid,omitempty"`
	Content    *string `json:"content,omitempty"`
	Encoding   string  `json:"encoding,omitempty"`
	Target     *string `json:"target,omitempty"`
	Executable bool    `json:"executable"`
}

// snapshotLowerJSON is the config's RootFilesystemLowerDescriptor of kind
// snapshot.
type snapshotLowerJSON struct {
	Kind    string          `json:"kind"`
	Entries []rootEntryJSON `json:"entries"`
}

// A VM's files must never live in a lower layer alone: the pinned engine
// marks a directory that it copies up from a lower layer as opaque (its
// overlay's copy_up_path), so the first guest call that changes a
// directory's times or mode hides every file of the lower layer in it,
// from the guest and from the next export. TestRootSnapshotKeepsFiles
// shows it for a snapshot (issue 33: a woken VM lost a file the files API
// wrote), TestBaseFilesSurviveAStat for the base layer (a find hid
// /usr/bin/env). So a VM's own files are bootstrap entries of its upper
// layer, over the engine's base layer (overBase says how the base's files
// are kept), or, for a tree overBase cannot give, all of it
// (splitRootSnapshot).

// baseRoots caches baseRoot's export, by engine.
var baseRoots struct {
	mu sync.Mutex
	by map[Engine][]protocol.RootFilesystemEntry
}

// baseRoot returns the engine's base layer as root snapshot entries: the
// export of a VM created over it that never ran a command, without the
// content of the kernel's and the packages' mount points. The first call
// for an engine creates that VM; a failure is not kept, the next call
// tries again.
func (s *Sidecar) baseRoot(ctx context.Context) ([]protocol.RootFilesystemEntry, error) {
	baseRoots.mu.Lock()
	defer baseRoots.mu.Unlock()
	if es, ok := baseRoots.by[s.opts.Engine]; ok {
		return es, nil
	}
	vm, err := s.createVM(ctx, VMOptions{}, nil)
	if err != nil {
		return nil, fmt.Errorf("agentos: read the engine's base layer: %w", err)
	}
	es, err := vm.ExportRootFilesystemFrame(ctx)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = vm.Dispose(dctx)
	if err != nil {
		return nil, fmt.Errorf("agentos: read the engine's base layer: %w", err)
	}
	base := es[:0:0]
	for _, e := range es {
		if !under(path.Clean(e.Path), PackagesMountAt) {
			base = append(base, e)
		}
	}
	if baseRoots.by == nil {
		baseRoots.by = map[Engine][]protocol.RootFilesystemEntry{}
	}
	baseRoots.by[s.opts.Engine] = base
	return base, nil
}

// overBase returns the bootstrap entries that give a VM created over the
// engine's own base layer the tree root, or, when root cannot be given that
// way, a reason naming the first entry in the way: root lacks an entry of
// the base, changed one's kind, or changed a directory's owner or mode (a
// bootstrap cannot delete, so the base would bring the entry back; a
// directory entry would hide the base's files in it, see below).
//
// Why over the base rather than all of root as bootstrap entries: the
// engine walks every entry its upper layer holds on the host before each
// read of the guest's filesystem (its shadow sync), so each entry costs
// every stat, and the base's 221 cost more than most VMs' own
// (BenchmarkStatRootLayout).
//
// What over the base must guard against: the engine copies a directory
// that only a lower layer holds up as opaque the first time a call changes
// its times or mode (a touch, a chmod), hiding the lower's children in it,
// and it stages a bootstrap directory entry as opaque too. A directory
// that is in the upper layer as an ancestor of something written there is
// not opaque, and is never copied up again. And the engine's shadow sync
// removes a lower layer's symlinks. So the entries are root's own (those
// the base lacks, and files that differ from the base's), every symlink,
// and, for every directory of the base with children that those do not
// already place in the upper layer, one of its files, equal to the base's:
// its ancestors go up the safe way.
func overBase(base, root []protocol.RootFilesystemEntry) (_ []protocol.RootFilesystemEntry, reason string) {
	own := make(map[string]protocol.RootFilesystemEntry, len(root))
	for _, e := range root {
		own[path.Clean(e.Path)] = e
	}
	inBase := make(map[string]protocol.RootFilesystemEntry, len(base))
	children := map[string][]string{} // base directory -> its base children
	for _, b := range base {
		p := path.Clean(b.Path)
		if kernelPath(p) {
			continue
		}
		e, ok := own[p]
		if !ok && p == "/" {
			// A snapshot without the root has the engine's (the
			// gateway's images have none, readRoot).
			continue
		}
		switch {
		case !ok:
			return nil, fmt.Sprintf("it lacks the base's %s", p)
		case e.Kind != b.Kind:
			return nil, fmt.Sprintf("its %s is a %s, the base's a %s", p, strings.ToLower(e.Kind.String()), strings.ToLower(b.Kind.String()))
		case b.Kind == protocol.RootFilesystemEntryKindDirectory && !sameEntry(e, b):
			return nil, fmt.Sprintf("its directory %s differs from the base's in owner or mode", p)
		}
		inBase[p] = b
		if p != "/" {
			children[path.Dir(p)] = append(children[path.Dir(p)], p)
		}
	}
	var out []protocol.RootFilesystemEntry
	inUpper := map[string]bool{} // directories the entries place in the upper layer
	add := func(e protocol.RootFilesystemEntry) {
		out = append(out, e)
		for d := path.Dir(path.Clean(e.Path)); d != "/" && !inUpper[d]; d = path.Dir(d) {
			inUpper[d] = true
		}
	}
	for _, e := range root {
		p := path.Clean(e.Path)
		if p == "/" || kernelPath(p) {
			continue
		}
		if b, ok := inBase[p]; ok && (e.Kind == protocol.RootFilesystemEntryKindDirectory || (e.Kind == protocol.RootFilesystemEntryKindFile && sameEntry(e, b))) {
			continue
		}
		// Symlinks of the base too: a lower layer's symlink is gone
		// after the engine's next shadow sync (a recursive listing
		// through the files API removed /var/lock and /var/run, on the
		// engine's own layout as well), a bootstrap entry is kept.
		add(e)
	}
	// The deepest directories first: the file that places one in the
	// upper layer places its ancestors too.
	dirs := slices.Collect(maps.Keys(children))
	slices.SortFunc(dirs, func(a, b string) int {
		if c := strings.Count(b, "/") - strings.Count(a, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, d := range dirs {
		if d == "/" || inUpper[d] {
			continue
		}
		// A leaf below d: a file of its own when it has one (the
		// smallest), else down its first child directory.
		leaf := d
		for {
			kids := children[leaf]
			if len(kids) == 0 {
				break // an empty directory: an opaque copy of it hides nothing
			}
			next := kids[0]
			for _, k := range kids {
				if inBase[k].Kind != protocol.RootFilesystemEntryKindDirectory && (inBase[next].Kind == protocol.RootFilesystemEntryKindDirectory || contentLen(inBase[k]) < contentLen(inBase[next])) {
					next = k
				}
			}
			leaf = next
			if inBase[leaf].Kind != protocol.RootFilesystemEntryKindDirectory {
				break
			}
		}
		add(own[leaf])
	}
	return out, ""
}

// contentLen is the length of an entry's content as given.
func contentLen(e protocol.RootFilesystemEntry) int {
	if e.Content == nil {
		return 0
	}
	return len(*e.Content)
}

// kernelPath reports whether p is a kernel mount point or below one.
func kernelPath(p string) bool {
	return slices.Contains(kernelDirs, p) || slices.ContainsFunc(kernelDirs, func(d string) bool { return under(p, d) })
}

// sameEntry reports whether a and b are the same entry: kind, owner, mode,
// target and bytes.
func sameEntry(a, b protocol.RootFilesystemEntry) bool {
	if a.Kind != b.Kind || a.Executable != b.Executable || !sameUint(a.Mode, b.Mode) || !sameUint(a.UID, b.UID) || !sameUint(a.GID, b.GID) || !sameString(a.Target, b.Target) {
		return false
	}
	if sameString(a.Content, b.Content) && sameEncoding(a.Encoding, b.Encoding) {
		return true
	}
	ca, errA := DecodeContent(a)
	cb, errB := DecodeContent(b)
	return errA == nil && errB == nil && string(ca) == string(cb)
}

func sameUint(a, b *uint32) bool   { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func sameString(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func sameEncoding(a, b *protocol.RootFilesystemEntryEncoding) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// under reports whether p is strictly below dir.
func under(p, dir string) bool { return strings.HasPrefix(p, dir+"/") }

// kernelDirs are the directories the engine mounts its own filesystems on
// and never takes bootstrap entries under (its root_fs.rs
// KERNEL_RESERVED_BOOTSTRAP_PATH_PREFIXES).
var kernelDirs = []string{"/dev", "/proc", "/sys"}

// splitRootSnapshot splits a root snapshot into the lower layer a VM is
// created over, the root directory and the kernel's mount points alone,
// and the entries written into its upper layer at bootstrap: everything
// the VM owns. Every stat of such a VM pays for every entry
// (BenchmarkStatRootLayout); it is for trees that overBase cannot lay
// over the base. The root gets the engine's usual owner and mode when the
// snapshot has no entry for it.
func splitRootSnapshot(es []protocol.RootFilesystemEntry) (lower, upper []protocol.RootFilesystemEntry) {
	hasRoot := false
	for _, e := range es {
		p := path.Clean(e.Path)
		switch {
		case p == "/":
			hasRoot = true
			lower = append(lower, e)
		case slices.Contains(kernelDirs, p):
			lower = append(lower, e)
		case slices.ContainsFunc(kernelDirs, func(d string) bool { return under(p, d) }):
			// The kernel's own content, never the VM's.
		default:
			upper = append(upper, e)
		}
	}
	if !hasRoot {
		mode, zero := uint32(0o040755), uint32(0)
		lower = append([]protocol.RootFilesystemEntry{{Path: "/", Kind: protocol.RootFilesystemEntryKindDirectory, Mode: &mode, UID: &zero, GID: &zero, Executable: true}}, lower...)
	}
	return lower, upper
}

func rootEntriesJSON(es []protocol.RootFilesystemEntry) []rootEntryJSON {
	out := make([]rootEntryJSON, len(es))
	for i, e := range es {
		j := rootEntryJSON{Path: e.Path, Mode: e.Mode, UID: e.UID, GID: e.GID, Content: e.Content, Target: e.Target, Executable: e.Executable}
		switch e.Kind {
		case protocol.RootFilesystemEntryKindDirectory:
			j.Kind = "directory"
		case protocol.RootFilesystemEntryKindSymlink:
			j.Kind = "symlink"
		default:
			j.Kind = "file"
		}
		if e.Encoding != nil {
			if *e.Encoding == protocol.RootFilesystemEntryEncodingBase64 {
				j.Encoding = "base64"
			} else {
				j.Encoding = "utf8"
			}
		}
		out[i] = j
	}
	return out
}

// EncodeContent is the content of a RootFilesystemEntry for data: UTF-8
// text when it is valid UTF-8, base64 otherwise.
func EncodeContent(data []byte) (string, *protocol.RootFilesystemEntryEncoding) {
	s, enc := encodeContent(data)
	if enc == nil {
		u := protocol.RootFilesystemEntryEncodingUTF8
		enc = &u
	}
	return s, enc
}

// DecodeContent returns the bytes of a RootFilesystemEntry's content.
func DecodeContent(e protocol.RootFilesystemEntry) ([]byte, error) {
	var out []byte
	err := decodeContent(protocol.GuestFilesystemResultResponse{Content: e.Content, Encoding: e.Encoding}, func(b []byte) error {
		// b may be a pooled buffer or a view of the entry's string: the
		// caller keeps the bytes, so they are copied.
		out = append([]byte{}, b...)
		return nil
	})
	return out, err
}
