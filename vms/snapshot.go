package vms

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/archive"
)

// A root-filesystem snapshot is a tar stream of the VM's whole tree, names
// relative to /, written by archive.Write like an archive download: from the
// engine's one-frame export when the tree fits one snapshot frame
// (agentos.SnapshotFrameBytes), walked with file calls (chunked reads)
// otherwise. A VM created from one gets the tree as its root filesystem in
// place of the engine's base layer: the directories, symlinks and the files
// that fit one create frame travel in the create request, larger files are
// written with chunked file calls once the VM runs. Permission bits,
// owners, symlinks and empty files are kept; modification times are not
// (the engine's snapshot entries have none), and nor are processes.

// SnapshotSource opens the stored bytes of a tenant's snapshot, for Create
// with VMSpec.FromSnapshot.
type SnapshotSource interface {
	OpenSnapshot(ctx context.Context, tenantID, id string) (io.ReadCloser, error)
}

// mountedDirs are the directories whose content is not the VM's own: the
// kernel's pseudo-filesystems and the engine's package mounts. A snapshot
// keeps the directories and leaves their content out.
var mountedDirs = []string{"/dev", "/proc", "/sys", "/opt/agentos"}

// WriteRoot streams the VM's root filesystem as a snapshot tar into w and
// counts what it wrote.
func (f *Files) WriteRoot(ctx context.Context, w io.Writer) (archive.Stats, error) {
	var src archive.Source
	es, err := f.vm.ExportRootFilesystemFrame(ctx)
	switch {
	case errors.Is(err, agentos.ErrSnapshotTooLarge):
		src = rootWalk{guestFS{f.vm}}
	case err != nil:
		return archive.Stats{}, EngineError(err, "snapshot")
	default:
		src = newEntrySource(es, time.Now())
	}
	cs := &countingSource{Source: src}
	if err := archive.Write(ctx, w, cs, "/"); err != nil {
		return archive.Stats{}, EngineError(err, "snapshot")
	}
	return cs.st, nil
}

// rootWalk is the guest filesystem with the content of mountedDirs hidden.
type rootWalk struct{ guestFS }

func (r rootWalk) ReadDir(ctx context.Context, name string) ([]string, error) {
	if slices.Contains(mountedDirs, name) {
		return nil, nil
	}
	return r.guestFS.ReadDir(ctx, name)
}

// entrySource is an archive.Source over the entries of a one-frame export.
type entrySource struct {
	entries  map[string]protocol.RootFilesystemEntry
	children map[string][]string
	mtime    time.Time
}

func newEntrySource(es []protocol.RootFilesystemEntry, mtime time.Time) *entrySource {
	s := &entrySource{entries: map[string]protocol.RootFilesystemEntry{}, children: map[string][]string{}, mtime: mtime}
	for _, e := range es {
		p := path.Clean(e.Path)
		if underMount(p) {
			continue
		}
		s.entries[p] = e
		if p != "/" {
			dir := path.Dir(p)
			s.children[dir] = append(s.children[dir], path.Base(p))
		}
	}
	return s
}

func underMount(p string) bool {
	for _, m := range mountedDirs {
		if strings.HasPrefix(p, m+"/") {
			return true
		}
	}
	return false
}

func (s *entrySource) entry(name string) (protocol.RootFilesystemEntry, error) {
	e, ok := s.entries[name]
	if !ok && name == "/" {
		return protocol.RootFilesystemEntry{Path: "/", Kind: protocol.RootFilesystemEntryKindDirectory}, nil
	}
	if !ok {
		return e, fmt.Errorf("%w: snapshot entry %s", fs.ErrNotExist, name)
	}
	return e, nil
}

func (s *entrySource) Lstat(_ context.Context, name string) (archive.Info, error) {
	e, err := s.entry(name)
	if err != nil {
		return archive.Info{}, err
	}
	var perm fs.FileMode = 0o644
	if e.Mode != nil {
		perm = fs.FileMode(*e.Mode & 0o7777).Perm()
	} else if e.Kind == protocol.RootFilesystemEntryKindDirectory || e.Executable {
		perm = 0o755
	}
	info := archive.Info{Mode: perm, ModTime: s.mtime}
	if e.UID != nil && e.GID != nil {
		info.UID, info.GID = int(*e.UID), int(*e.GID)
	}
	switch e.Kind {
	case protocol.RootFilesystemEntryKindDirectory:
		info.Mode |= fs.ModeDir
	case protocol.RootFilesystemEntryKindSymlink:
		info.Mode |= fs.ModeSymlink
	default:
		data, err := agentos.DecodeContent(e)
		if err != nil {
			return archive.Info{}, err
		}
		info.Size = int64(len(data))
	}
	return info, nil
}

func (s *entrySource) ReadDir(_ context.Context, name string) ([]string, error) {
	return s.children[name], nil
}

func (s *entrySource) Readlink(_ context.Context, name string) (string, error) {
	e, err := s.entry(name)
	if err != nil {
		return "", err
	}
	if e.Target == nil {
		return "", fmt.Errorf("%w: snapshot symlink %s has no target", agentos.ErrProtocol, name)
	}
	return *e.Target, nil
}

func (s *entrySource) ReadFile(_ context.Context, name string, w io.Writer) (int64, error) {
	e, err := s.entry(name)
	if err != nil {
		return 0, err
	}
	data, err := agentos.DecodeContent(e)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(data)
	return int64(n), err
}

// countingSource counts the entries archive.Write takes from a source: it
// lstats each entry once, and the root, which it does not write.
type countingSource struct {
	archive.Source
	st archive.Stats
}

func (c *countingSource) Lstat(ctx context.Context, name string) (archive.Info, error) {
	info, err := c.Source.Lstat(ctx, name)
	if err != nil || name == "/" {
		return info, err
	}
	switch {
	case info.Mode.IsDir():
		c.st.Dirs++
	case info.Mode&fs.ModeSymlink != 0:
		c.st.Symlinks++
	case info.Mode.IsRegular():
		c.st.Files++
		c.st.Bytes += info.Size
	}
	return info, nil
}

// scanRoot reads a snapshot tar and calls fn with each entry, its guest
// path in hdr.Name (absolute, cleaned) and, for a file, its bytes.
func scanRoot(r io.Reader, fn func(hdr *tar.Header, body io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return gateway.Wrap(gateway.CodeInternal, err, "the stored snapshot is not readable")
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
			return gateway.Errorf(gateway.CodeInternal, "the stored snapshot has an entry %q outside its root", hdr.Name)
		}
		hdr.Name = "/" + path.Clean(name)
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// rootFilesystem is a snapshot read for a create: the entries of the
// create frame and the files that did not fit it.
type rootFilesystem struct {
	entries  []protocol.RootFilesystemEntry
	deferred map[string]bool
}

// readRoot reads a snapshot tar into the entries of a create frame: every
// directory and symlink, and each file whose content fits what is left of
// agentos.SnapshotFrameBytes. The other files are listed in deferred, to be
// written once the VM runs; while the frame has room they travel as empty
// files, which keeps their owner.
func readRoot(r io.Reader) (rootFilesystem, error) {
	// The tar has no entry for / itself: the engine gives the root its own
	// (0755, the guest user's), as every VM has it.
	root := rootFilesystem{entries: []protocol.RootFilesystemEntry{}, deferred: map[string]bool{}}
	// What the frame holds besides file content: the config's JSON around
	// each entry, and the engine's base configuration.
	const perEntry = 128
	budget := agentos.SnapshotFrameBytes - 256<<10
	err := scanRoot(r, func(hdr *tar.Header, body io.Reader) error {
		perm := uint32(hdr.Mode) & 0o7777
		uid, gid := uint32(hdr.Uid), uint32(hdr.Gid)
		e := protocol.RootFilesystemEntry{Path: hdr.Name, UID: &uid, GID: &gid, Executable: perm&0o111 != 0}
		entryCost := perEntry + len(hdr.Name) + len(hdr.Linkname)
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.Kind, perm = protocol.RootFilesystemEntryKindDirectory, perm|0o040000
		case tar.TypeSymlink:
			target := hdr.Linkname
			e.Kind, e.Target, perm = protocol.RootFilesystemEntryKindSymlink, &target, perm|0o120000
		case tar.TypeReg:
			e.Kind, perm = protocol.RootFilesystemEntryKindFile, perm|0o100000
			content, enc, ok, err := inlineContent(hdr, body, budget-entryCost)
			if err != nil {
				return err
			}
			if !ok {
				root.deferred[hdr.Name] = true
				if budget < entryCost {
					return nil
				}
				break
			}
			budget -= jsonCost(content)
			e.Content, e.Encoding = &content, enc
		default:
			return nil
		}
		budget -= entryCost
		e.Mode = &perm
		root.entries = append(root.entries, e)
		return nil
	})
	if err != nil {
		return rootFilesystem{}, err
	}
	if budget < 0 {
		return rootFilesystem{}, gateway.Errorf(gateway.CodePayloadTooLarge, "the snapshot has more directories and symlinks than fit one create request (%d bytes)", agentos.SnapshotFrameBytes)
	}
	return root, nil
}

// inlineContent reads a file's bytes as the content of a create frame's
// entry when they fit room bytes of it; ok is false, and nothing is read,
// when they may not.
func inlineContent(hdr *tar.Header, body io.Reader, room int) (string, *protocol.RootFilesystemEntryEncoding, bool, error) {
	// Base64 is the most any content costs in JSON but for text full of
	// escapes, which jsonCost counts exactly.
	if hdr.Size*4/3+4 > int64(room) {
		return "", nil, false, nil
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return "", nil, false, gateway.Wrap(gateway.CodeInternal, err, "the stored snapshot is not readable")
	}
	content, enc := agentos.EncodeContent(data)
	if jsonCost(content) > room {
		return "", nil, false, nil
	}
	return content, enc, true, nil
}

// jsonCost is the length of s as a JSON string.
func jsonCost(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

// fillRoot writes the files of a snapshot that did not fit the create frame
// into the new VM, in chunked file calls, with their permission bits.
func fillRoot(ctx context.Context, vm *agentos.VM, r io.Reader, deferred map[string]bool) error {
	return scanRoot(r, func(hdr *tar.Header, body io.Reader) error {
		if hdr.Typeflag != tar.TypeReg || !deferred[hdr.Name] {
			return nil
		}
		if _, err := vm.WriteFileFrom(ctx, hdr.Name, body); err != nil {
			return EngineError(err, "restore snapshot")
		}
		if err := vm.Chmod(ctx, hdr.Name, fs.FileMode(hdr.Mode).Perm()); err != nil {
			return EngineError(err, "restore snapshot")
		}
		return nil
	})
}

// readSnapshot reads the snapshot a VM is created from (none: id empty).
func (s *Service) readSnapshot(ctx context.Context, tenantID, id string) (rootFilesystem, error) {
	if id == "" {
		return rootFilesystem{}, nil
	}
	if s.cfg.Snapshots == nil {
		return rootFilesystem{}, gateway.Errorf(gateway.CodeInvalidArgument, "this gateway keeps no snapshots").WithDetail("field", "fromSnapshot")
	}
	rc, err := s.cfg.Snapshots.OpenSnapshot(ctx, tenantID, id)
	if err != nil {
		return rootFilesystem{}, err
	}
	defer rc.Close()
	return readRoot(rc)
}

// fillSnapshot writes the files of the snapshot that the create frame did
// not carry into the new VM.
func (s *Service) fillSnapshot(ctx context.Context, tenantID, id string, vm *agentos.VM, root rootFilesystem) error {
	if len(root.deferred) == 0 {
		return nil
	}
	rc, err := s.cfg.Snapshots.OpenSnapshot(ctx, tenantID, id)
	if err != nil {
		return err
	}
	defer rc.Close()
	return fillRoot(ctx, vm, rc, root.deferred)
}
