package images

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

// WriteRoot streams t's root filesystem as a snapshot tar into w and
// counts what it wrote.
func (s Store) WriteRoot(ctx context.Context, t Tree, w io.Writer) (archive.Stats, error) {
	return s.writeRoot(ctx, t, w, nil)
}

// writeRoot is WriteRoot that also records in seen, when it is not nil,
// each entry it wrote.
func (s Store) writeRoot(ctx context.Context, t Tree, w io.Writer, seen listing) (archive.Stats, error) {
	var src archive.Source
	// The content of the tenant's mounts is not the VM's own: a host
	// directory stays on the host, and the mounts come back with a woken
	// VM (VMSpec.Mounts).
	mounts := mountPoints(t)
	es, err := t.ExportRootFilesystemFrame(ctx)
	switch {
	case errors.Is(err, agentos.ErrSnapshotTooLarge):
		// One reconcile of the engine's shadow for the walk (agentos.VM.Settle).
		if ctx, err = t.Settle(ctx); err != nil {
			return archive.Stats{}, s.engineError(err, "snapshot")
		}
		src = rootWalk{Source{t}, mounts}
	case err != nil:
		return archive.Stats{}, s.engineError(err, "snapshot")
	default:
		src = newEntrySource(es, time.Now(), mounts)
	}
	cs := &countingSource{Source: src, seen: seen}
	if err := archive.Write(ctx, w, cs, "/"); err != nil {
		return archive.Stats{}, s.engineError(err, "snapshot")
	}
	return cs.st, nil
}

// rootWalk is the guest filesystem with the content of mountedDirs and of
// the tenant's mounts hidden.
type rootWalk struct {
	Source
	mounts []string
}

func (r rootWalk) ReadDir(ctx context.Context, name string) ([]string, error) {
	if slices.Contains(mountedDirs, name) || slices.Contains(r.mounts, name) {
		return nil, nil
	}
	return r.Source.ReadDir(ctx, name)
}

// entrySource is an archive.Source over the entries of a one-frame export.
type entrySource struct {
	entries  map[string]protocol.RootFilesystemEntry
	children map[string][]string
	mtime    time.Time
}

func newEntrySource(es []protocol.RootFilesystemEntry, mtime time.Time, mounts []string) *entrySource {
	s := &entrySource{entries: map[string]protocol.RootFilesystemEntry{}, children: map[string][]string{}, mtime: mtime}
	for _, e := range es {
		p := path.Clean(e.Path)
		if underMount(p) || slices.ContainsFunc(mounts, func(m string) bool { return strings.HasPrefix(p, m+"/") }) {
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
		perm = archive.PermFromUnix(*e.Mode)
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
// lstats each entry once, and the root, which it does not write. With seen
// set it records them too.
type countingSource struct {
	archive.Source
	st   archive.Stats
	seen listing
}

func (c *countingSource) Lstat(ctx context.Context, name string) (archive.Info, error) {
	info, err := c.Source.Lstat(ctx, name)
	if err != nil || name == "/" {
		return info, err
	}
	if c.seen != nil {
		c.seen[path.Clean(name)] = listedOf(info)
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

// Root is an image read for a create: the entries of the create frame
// (agentos.VMOptions.RootSnapshot) and the files that did not fit it, with
// the stored bytes they are read from (Fill writes them).
type Root struct {
	Entries  []protocol.RootFilesystemEntry
	deferred []deferredFile
	// src is the open snapshot while deferred files remain to be written
	// (nil otherwise); close releases it.
	src io.ReadSeekCloser
}

// deferredFile is a file of a snapshot that the create frame does not
// carry: where its bytes are in the stored tar, and its permission bits.
type deferredFile struct {
	name         string
	offset, size int64
	perm         fs.FileMode
}

// Close releases the image's stored bytes, if they are still open.
func (r Root) Close() {
	if r.src != nil {
		_ = r.src.Close()
	}
}

// readRoot reads a snapshot tar into the entries of a create frame: every
// directory and symlink, and each file whose content fits what is left of
// agentos.SnapshotFrameBytes. The other files are listed in deferred, with
// the offset of their bytes in r, to be written once the VM runs; while the
// frame has room they travel as empty files, which keeps their owner. The
// tar reader seeks past the bytes of the deferred files rather than reading
// them, and it reads r unbuffered, so that r's position once it has read a
// file's header is where the file's bytes start (archive.Write writes no
// sparse files, whose bytes would not be stored as they are).
func readRoot(r io.ReadSeeker) (Root, error) {
	// The tar has no entry for / itself: the engine gives the root its own
	// (0755, the guest user's), as every VM has it.
	root := Root{Entries: []protocol.RootFilesystemEntry{}}
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
				offset, err := r.Seek(0, io.SeekCurrent)
				if err != nil {
					return gateway.Wrap(gateway.CodeInternal, err, "the stored snapshot is not readable")
				}
				root.deferred = append(root.deferred, deferredFile{name: hdr.Name, offset: offset, size: hdr.Size, perm: archive.PermFromUnix(uint32(hdr.Mode))})
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
		root.Entries = append(root.Entries, e)
		return nil
	})
	if err != nil {
		return Root{}, err
	}
	if budget < 0 {
		return Root{}, gateway.Errorf(gateway.CodePayloadTooLarge, "the snapshot has more directories and symlinks than fit one create request (%d bytes)", agentos.SnapshotFrameBytes)
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

// OpenRoot reads an open image for a create. The image stays open in the
// result while files remain for Fill (the caller closes the result); else
// it is closed. An image that cannot be read is closed and the error is
// readRoot's.
func OpenRoot(rc io.ReadSeekCloser) (Root, error) {
	root, err := readRoot(rc)
	if err != nil || len(root.deferred) == 0 {
		_ = rc.Close()
		return root, err
	}
	root.src = rc
	return root, nil
}

// Fill writes the files of an image that did not fit the create frame
// into the new VM, in chunked file calls, with their permission bits: each
// read at its offset in the stored tar, which readRoot found, in the tar's
// order (so that the reader moves forward only).
func (s Store) Fill(ctx context.Context, t Target, root Root) error {
	r := root.src
	for _, f := range root.deferred {
		if _, err := r.Seek(f.offset, io.SeekStart); err != nil {
			return gateway.Wrap(gateway.CodeInternal, err, "the stored snapshot is not readable")
		}
		if _, err := t.WriteFileFrom(ctx, f.name, &storedFile{r: r, name: f.name, left: f.size}); err != nil {
			return s.engineError(err, "restore snapshot")
		}
		if err := t.Chmod(ctx, f.name, f.perm); err != nil {
			return s.engineError(err, "restore snapshot")
		}
	}
	return nil
}

// storedFile reads the left bytes of a deferred file from the stored tar.
// Stored bytes that end before the file does are an error, never a shorter
// file (WriteFileFrom takes io.ErrUnexpectedEOF for the end of its input).
type storedFile struct {
	r    io.Reader
	name string
	left int64
}

func (f *storedFile) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= int64(n)
	switch {
	case f.left == 0:
		return n, nil
	case errors.Is(err, io.EOF):
		return n, gateway.Errorf(gateway.CodeInternal, "the stored snapshot ends within %s", f.name)
	}
	return n, err
}
