package agentos

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// The pinned engine (0.2.21) keeps a host copy of a VM's files, its
// "shadow" (a folder in the sidecar's TMPDIR), for the runtimes that read
// files from the host. Filesystem calls that change a file copy it there;
// so do a VM's bootstrap entries (a woken VM's files) and a node launch
// (its entry file). A guest command's writes through a file descriptor
// (`>>`, an editor's save) change only the kernel, and a guest rename over
// a copied file removes the copy. Every read-side filesystem call (read,
// stat, exists, recursive listing, remove, copy, move, positional write)
// first reconciles the whole shadow into the kernel, trusting the shadow:
// a stale copy overwrites the guest's bytes, mode included, and a copy that
// a guest rename removed deletes the file. Measured, with the calls that
// cause it, in TestEngineShadowRevertsGuestChanges; a snapshot export reads
// the kernel and is not affected.
//
// So before such a call, when a guest process may have changed files since
// the last check, reconcile does the reverse: it exports the kernel's tree
// (the truth) and, with calls that do not trigger the engine's sync, makes
// every copy in the shadow equal to it. A copy the guest changed is written
// again, a copy a guest rename removed is written back, and a copy of a
// file the guest removed is removed.
//
// Limits: a tree larger than one snapshot frame is not reconciled (the
// engine's behaviour stays, and ShadowSkips counts it); a guest write that
// lands between the export and the call that reads can still be undone, as
// without this; and a file the engine copied on its own (a node entry file)
// that a guest rename replaced before any check is not known to be at risk.

// shadowState is a VM's view of its engine shadow.
type shadowState struct {
	// mu is held for writing by reconcile and for reading by every other
	// filesystem call, so that reconcile never writes an exported (older)
	// copy over a file a concurrent call just wrote.
	mu sync.RWMutex

	// The fields below are guarded by mu held for writing, or by seenMu
	// for seen and trees, which calls holding mu for reading also update.
	dir     string // the shadow folder, found at the first reconcile
	checked uint64 // guestRuns at the last complete reconcile
	skips   int64  // reconciles given up: the tree is larger than a frame
	seenMu  sync.Mutex
	seen    map[string]bool // paths the engine copied (the shadow's inventory)
	trees   []string        // folders a move or copy placed, each a subtree of copies
}

// syncsShadow reports whether op makes the pinned engine reconcile the
// shadow into the kernel before it runs.
func syncsShadow(op protocol.GuestFilesystemOperation) bool {
	switch op {
	case protocol.GuestFilesystemOperationReadFile, protocol.GuestFilesystemOperationPread,
		protocol.GuestFilesystemOperationPwrite, protocol.GuestFilesystemOperationExists,
		protocol.GuestFilesystemOperationStat, protocol.GuestFilesystemOperationLstat,
		protocol.GuestFilesystemOperationReadDirRecursive, protocol.GuestFilesystemOperationRemove,
		protocol.GuestFilesystemOperationCopy, protocol.GuestFilesystemOperationMove:
		return true
	}
	return false
}

// noteCopied records what a successful call made the engine copy into the
// shadow, so that reconcile knows the copies a guest rename may have removed.
func (sh *shadowState) noteCopied(req protocol.GuestFilesystemCallRequest) {
	sh.seenMu.Lock()
	defer sh.seenMu.Unlock()
	if sh.seen == nil {
		sh.seen = make(map[string]bool)
	}
	switch req.Operation {
	case protocol.GuestFilesystemOperationWriteFile, protocol.GuestFilesystemOperationPwrite,
		protocol.GuestFilesystemOperationCreateDir, protocol.GuestFilesystemOperationMkdir,
		protocol.GuestFilesystemOperationSymlink:
		sh.seen[req.Path] = true
	case protocol.GuestFilesystemOperationLink, protocol.GuestFilesystemOperationRename:
		if req.DestinationPath != nil {
			sh.seen[path.Clean(*req.DestinationPath)] = true
		}
	case protocol.GuestFilesystemOperationCopy, protocol.GuestFilesystemOperationMove:
		if req.DestinationPath != nil {
			sh.trees = append(sh.trees, path.Clean(*req.DestinationPath))
		}
	}
}

// noteEntries records a VM's bootstrap entries, which the engine copies.
func (sh *shadowState) noteEntries(es []rootEntryJSON) {
	sh.seenMu.Lock()
	defer sh.seenMu.Unlock()
	if sh.seen == nil {
		sh.seen = make(map[string]bool)
	}
	for _, e := range es {
		sh.seen[e.Path] = true
	}
}

// copied reports whether the engine may hold p in its inventory.
func (sh *shadowState) copiedLocked(p string) bool {
	if sh.seen[p] {
		return true
	}
	for _, t := range sh.trees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

// guestRan notes that guest code started: a process or an agent session.
func (vm *VM) guestRan() { vm.guestRuns.Add(1) }

// guestActiveLocked reports whether a guest process or session is running.
// vm.mu is held.
func (vm *VM) guestActiveLocked() bool {
	if len(vm.sessions) > 0 {
		return true
	}
	for _, p := range vm.procs {
		select {
		case <-p.done:
		default:
			return true
		}
	}
	return false
}

// ShadowSkips returns how many times the VM's shadow could not be
// reconciled because its tree is larger than one snapshot frame.
func (vm *VM) ShadowSkips() int64 {
	vm.shadow.mu.RLock()
	defer vm.shadow.mu.RUnlock()
	return vm.shadow.skips
}

// reconcileShadow makes the engine's shadow agree with the kernel when a
// guest may have changed files since the last time (see the top of this
// file). A call that needs it runs it first, then takes shadow.mu for
// reading.
func (vm *VM) reconcileShadow(ctx context.Context) error {
	if settled(ctx) {
		return nil
	}
	vm.mu.Lock()
	runs, active := vm.guestRuns.Load(), vm.guestActiveLocked()
	vm.mu.Unlock()
	sh := &vm.shadow
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !active && runs == sh.checked {
		return nil
	}
	done, err := vm.reconcileLocked(ctx)
	if err != nil {
		return fmt.Errorf("agentos: reconcile the engine's shadow of vm %s: %w", vm.id, err)
	}
	if done && !active {
		// A process running during the export may write after it, so only
		// a check with nothing running settles the VM.
		sh.checked = runs
	}
	return nil
}

// reconcileLocked does reconcileShadow's work; shadow.mu is held. It
// reports false when the tree could not be checked.
func (vm *VM) reconcileLocked(ctx context.Context) (bool, error) {
	sh := &vm.shadow
	if sh.dir == "" {
		dir, err := vm.findShadow()
		if err != nil {
			return false, err
		}
		if dir == "" {
			return true, nil // nothing copied yet: nothing to revert
		}
		sh.dir = dir
	}
	entries, err := vm.ExportRootFilesystemFrame(ctx)
	if errors.Is(err, ErrSnapshotTooLarge) {
		sh.skips++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	truth := make(map[string]*protocol.RootFilesystemEntry, len(entries))
	for i := range entries {
		truth[path.Clean(entries[i].Path)] = &entries[i]
	}
	copies, err := readShadow(sh.dir, vm.skipShadowPath)
	if err != nil {
		return false, err
	}
	var gone, large []string
	for p, c := range copies {
		t := truth[p]
		switch {
		case t == nil:
			gone = append(gone, p)
		case t.Content != nil && len(*t.Content) > FileChunkSize:
			large = append(large, p) // its positional writes sync: last
		default:
			if err := vm.mendCopy(ctx, p, c, t); err != nil {
				return false, err
			}
		}
	}
	// A copy a guest rename removed (sed -i, an editor's save) is still in
	// the engine's inventory, and its sync would delete the file: copy it
	// again. Folders first, so that a file's folder is copied before it.
	sh.seenMu.Lock()
	var lost []string
	for p, t := range truth {
		if _, ok := copies[p]; !ok && !vm.skipShadowPath(p) && sh.copiedLocked(p) && t.Kind != protocol.RootFilesystemEntryKindDirectory {
			lost = append(lost, p)
		}
	}
	sh.seenMu.Unlock()
	slices.Sort(lost)
	for _, p := range lost {
		if t := truth[p]; t.Content != nil && len(*t.Content) > FileChunkSize {
			large = append(large, p)
			continue
		}
		if err := vm.mendCopy(ctx, p, shadowCopy{}, truth[p]); err != nil {
			return false, err
		}
	}
	if err := vm.dropCopies(ctx, gone, copies); err != nil {
		return false, err
	}
	for _, p := range large {
		if err := vm.mendCopy(ctx, p, copies[p], truth[p]); err != nil {
			return false, err
		}
	}
	// From here the engine's inventory is the shadow as it is now: the
	// copies it had and those written back (the dropped ones may stay in
	// seen, which only makes a later check look at them again).
	sh.seenMu.Lock()
	sh.seen, sh.trees = make(map[string]bool, len(copies)+len(lost)), nil
	for p := range copies {
		sh.seen[p] = true
	}
	for _, p := range lost {
		sh.seen[p] = true
	}
	sh.seenMu.Unlock()
	return true, nil
}

// findShadow returns the VM's shadow folder in the sidecar's TMPDIR, or ""
// while the engine has made none.
func (vm *VM) findShadow() (string, error) {
	if vm.s.tmpDir == "" {
		return "", nil
	}
	m, err := filepath.Glob(filepath.Join(vm.s.tmpDir, "agentos-native-sidecar-shadow-"+vm.id+"-*"))
	if err != nil || len(m) == 0 {
		return "", err
	}
	if len(m) > 1 {
		return "", fmt.Errorf("%w: %d shadow folders for vm %s", ErrProtocol, len(m), vm.id)
	}
	return m[0], nil
}

// skipShadowPath reports the paths the engine never syncs from the shadow:
// its own (/dev, /proc, /sys, /etc/agentos) and mounts.
func (vm *VM) skipShadowPath(p string) bool {
	for _, root := range []string{"/dev", "/proc", "/sys", "/etc/agentos"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	for _, m := range vm.cfg.Mounts {
		g := path.Clean(m.GuestPath)
		if g == "/" || p == g || strings.HasPrefix(p, g+"/") {
			return true
		}
	}
	return false
}

// shadowCopy is one entry of the shadow folder.
type shadowCopy struct {
	kind   protocol.RootFilesystemEntryKind
	mode   uint32 // permission bits, setuid, setgid and sticky
	size   int64
	target string // a symlink's
	host   string // its host path
	exists bool
}

// readShadow lists the shadow folder by guest path.
func readShadow(dir string, skip func(string) bool) (map[string]shadowCopy, error) {
	out := make(map[string]shadowCopy)
	err := filepath.WalkDir(dir, func(host string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walked
			}
			return err
		}
		if host == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, host)
		p := "/" + filepath.ToSlash(rel)
		if skip(p) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(host, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		c := shadowCopy{mode: st.Mode & 0o7777, size: st.Size, host: host, exists: true}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			c.kind = protocol.RootFilesystemEntryKindDirectory
		case syscall.S_IFREG:
			c.kind = protocol.RootFilesystemEntryKindFile
		case syscall.S_IFLNK:
			c.kind = protocol.RootFilesystemEntryKindSymlink
			if c.target, err = os.Readlink(host); err != nil {
				return err
			}
		default:
			return nil
		}
		out[p] = c
		return nil
	})
	return out, err
}

// entryBytes decodes an exported file's content.
func entryBytes(e *protocol.RootFilesystemEntry) ([]byte, error) {
	if e.Content == nil {
		return nil, nil
	}
	if e.Encoding != nil && *e.Encoding == protocol.RootFilesystemEntryEncodingBase64 {
		return base64.StdEncoding.DecodeString(*e.Content)
	}
	return []byte(*e.Content), nil
}

// mendCopy makes the engine's copy of p equal to the kernel's entry t, with
// calls that do not sync the shadow: a changed or missing file is written
// again (the engine copies a write), a changed mode is set again, and a
// changed symlink is made again. c is the copy (its zero value when none).
// A copy of another kind than the kernel's entry is left as it is: only a
// guest that replaced a file by a folder or the reverse makes one.
func (vm *VM) mendCopy(ctx context.Context, p string, c shadowCopy, t *protocol.RootFilesystemEntry) error {
	mode := uint32(0o644)
	if t.Mode != nil {
		mode = *t.Mode & 0o7777
	}
	if c.exists && c.kind != t.Kind {
		return nil
	}
	switch t.Kind {
	case protocol.RootFilesystemEntryKindFile:
		want, err := entryBytes(t)
		if err != nil {
			return err
		}
		same := c.exists && c.size == int64(len(want))
		if same {
			have, err := os.ReadFile(c.host)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			same = err == nil && bytes.Equal(have, want)
		}
		if !same {
			if err := vm.rewrite(ctx, p, want); err != nil {
				return err
			}
			c.mode = ^uint32(0) // the write may give the copy another mode
		}
		if c.mode != mode {
			return vm.rawChmod(ctx, p, mode)
		}
	case protocol.RootFilesystemEntryKindDirectory:
		if c.exists && c.mode != mode {
			return vm.rawChmod(ctx, p, mode)
		}
	case protocol.RootFilesystemEntryKindSymlink:
		if t.Target == nil || (c.exists && c.target == *t.Target) {
			return nil
		}
		// The kernel has the link (t is its entry): it is made again.
		if _, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationRemoveFile, Path: p}); err != nil {
			return err
		}
		_, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationSymlink, Path: p, Target: t.Target})
		return err
	}
	return nil
}

// rewrite writes data to p again, in FileChunkSize pieces (one request of
// 12 MiB or more makes the engine exit). Each piece after the first is a
// positional write, which syncs the shadow first; reconcileLocked writes
// such files last, when the other copies already agree.
func (vm *VM) rewrite(ctx context.Context, p string, data []byte) error {
	for off := 0; off == 0 || off < len(data); off += FileChunkSize {
		chunk := data[off:min(off+FileChunkSize, len(data))]
		req := protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationWriteFile, Path: p}
		send := sendContent
		if off > 0 {
			o := uint64(off)
			req.Operation, req.Offset, send = protocol.GuestFilesystemOperationPwrite, &o, sendBase64
		}
		if err := send(chunk, func(content string, enc *protocol.RootFilesystemEntryEncoding) error {
			req.Content, req.Encoding = &content, enc
			_, err := vm.rawFsCall(ctx, req)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

func (vm *VM) rawChmod(ctx context.Context, p string, mode uint32) error {
	_, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationChmod, Path: p, Mode: &mode})
	return err
}

// dropCopies removes the copies of paths the kernel no longer has, which
// the engine's sync would bring back. The engine removes a copy only with
// the kernel's entry, so each is made in the kernel first (parents before
// children) and then removed (children first), with calls that do not
// sync.
func (vm *VM) dropCopies(ctx context.Context, gone []string, copies map[string]shadowCopy) error {
	gone, err := vm.notInKernel(ctx, gone)
	if err != nil || len(gone) == 0 {
		return err
	}
	slices.Sort(gone)
	empty := ""
	for _, p := range gone {
		c := copies[p]
		req := protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationWriteFile, Path: p, Content: &empty}
		switch c.kind {
		case protocol.RootFilesystemEntryKindDirectory:
			req = protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationCreateDir, Path: p}
		case protocol.RootFilesystemEntryKindSymlink:
			req = protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationSymlink, Path: p, Target: &c.target}
		}
		if _, err := vm.rawFsCall(ctx, req); err != nil {
			return err
		}
	}
	for _, p := range slices.Backward(gone) {
		op := protocol.GuestFilesystemOperationRemoveFile
		if copies[p].kind == protocol.RootFilesystemEntryKindDirectory {
			op = protocol.GuestFilesystemOperationRemoveDir
		}
		if _, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: op, Path: p}); err != nil {
			return err
		}
	}
	return nil
}

// notInKernel keeps the paths of ps that the kernel's folders do not list.
// The export said so already; a folder listing (which does not sync) makes
// sure, since removing a file the kernel has would lose it.
func (vm *VM) notInKernel(ctx context.Context, ps []string) ([]string, error) {
	listed := make(map[string]map[string]bool) // parent -> names; nil when the parent is missing
	var out []string
	for _, p := range ps {
		dir, name := path.Split(p)
		dir = path.Clean(dir)
		names, ok := listed[dir]
		if !ok {
			r, err := vm.rawFsCall(ctx, protocol.GuestFilesystemCallRequest{Operation: protocol.GuestFilesystemOperationReadDir, Path: dir})
			var rej *RejectedError
			switch {
			case errors.As(err, &rej) && rej.Errno == "ENOENT":
			case err != nil:
				return nil, err
			default:
				names = make(map[string]bool)
				if r.Entries != nil {
					for _, e := range *r.Entries {
						names[e.Name] = true
					}
				}
			}
			listed[dir] = names
		}
		if !names[name] {
			out = append(out, p)
		}
	}
	return out, nil
}

// settledKey marks a context under which the VM's shadow was reconciled
// for a run of calls (Settle).
type settledKey struct{}

func settled(ctx context.Context) bool { return ctx.Value(settledKey{}) != nil }

// Settle reconciles the VM's shadow once and returns a context under which
// filesystem calls skip it: for a walk of many calls (an archive, a
// capture), each of which would otherwise check again while a process runs.
func (vm *VM) Settle(ctx context.Context) (context.Context, error) {
	if err := vm.reconcileShadow(ctx); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, settledKey{}, true), nil
}
