package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// Limits bound an extraction; zero means unlimited.
type Limits struct {
	// MaxBytes bounds the total size of the extracted regular files.
	MaxBytes int64
	// MaxEntries bounds the number of entries, of any type.
	MaxEntries int
}

// Stats count what an extraction wrote. A hard link counts as a file of no
// bytes.
type Stats struct {
	Files    int
	Dirs     int
	Symlinks int
	Bytes    int64
}

// Extract reads a tar archive from r and recreates its entries under root,
// one at a time, so memory is bounded by the bookkeeping of names whatever
// the files' sizes. Modes (permission bits) and modification times are
// applied; owners are not.
//
// Nothing may land outside root: an absolute name, a ".." component, a
// symlink whose target leaves root (absolute, or climbing above it), a hard
// link to anything but a file extracted earlier from the same archive, and
// any entry under a symlink extracted earlier are refused with an
// *EntryError wrapping ErrUnsafe. Device files, fifos and other special
// entries are refused with ErrUnsupported rather than silently skipped, so
// an archive is either extracted whole or refused. Symlink targets are
// checked without looking at the filesystem: ".." may only lead a target,
// so a target climbs from a real directory of the archive (never through a
// link) and then only descends.
//
// Extract stops at the first refusal or error; what it wrote until then
// stays under root, so callers wanting all or nothing extract into a
// staging directory and move its content into place on success.
func Extract(ctx context.Context, r io.Reader, dst Sink, root string, lim Limits) (Stats, error) {
	x := &extraction{
		ctx: ctx, dst: dst, root: root, lim: lim,
		dirs: map[string]bool{".": true}, files: map[string]bool{}, links: map[string]bool{},
	}
	tr := tar.NewReader(&readTracker{r: r, err: &x.readErr})
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.stats, x.malformed(err)
		}
		x.entries++
		if lim.MaxEntries > 0 && x.entries > lim.MaxEntries {
			return x.stats, fmt.Errorf("%w: more than %d", ErrTooManyEntries, lim.MaxEntries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats, err
		}
	}
	// Directories get their modes and times last, deepest first: adding
	// entries changes a directory's mtime, and a read-only directory
	// could not take its content.
	for i := len(x.dirMeta) - 1; i >= 0; i-- {
		m := x.dirMeta[i]
		if err := x.meta(m.rel, m.perm, m.mtime); err != nil {
			return x.stats, err
		}
	}
	return x.stats, nil
}

type extraction struct {
	ctx     context.Context
	dst     Sink
	root    string
	lim     Limits
	stats   Stats
	entries int
	readErr error
	// dirs, files and links are the relative names this extraction made,
	// to create parents once, to resolve hard links and to refuse paths
	// through symlinks.
	dirs, files, links map[string]bool
	dirMeta            []dirMeta
}

type dirMeta struct {
	rel   string
	perm  fs.FileMode
	mtime time.Time
}

// readTracker records the first error of the archive's stream, to tell a
// broken archive from a failing sink when a file's copy stops.
type readTracker struct {
	r   io.Reader
	err *error
}

func (t *readTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && *t.err == nil {
		*t.err = err
	}
	return n, err
}

func (x *extraction) malformed(err error) error {
	if x.readErr != nil && !errors.Is(err, x.readErr) {
		err = fmt.Errorf("%w: %w", err, x.readErr)
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}

func (x *extraction) abs(rel string) string { return path.Join(x.root, rel) }

func (x *extraction) entry(hdr *tar.Header, tr *tar.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		// PAX global headers are metadata for the reader, not files.
		return nil
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if err := x.notThroughLink(hdr.Name, rel); err != nil {
		return err
	}
	perm := fs.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if rel == "." {
			// The target itself: it exists already and keeps its own
			// mode.
			return nil
		}
		if err := x.mkdirAll(rel); err != nil {
			return err
		}
		x.stats.Dirs++
		x.dirMeta = append(x.dirMeta, dirMeta{rel: rel, perm: perm, mtime: hdr.ModTime})
		return nil
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.file(hdr, rel, perm, tr)
	case tar.TypeSymlink:
		return x.symlink(hdr, rel)
	case tar.TypeLink:
		return x.hardlink(hdr, rel)
	}
	return &EntryError{Name: hdr.Name, Reason: "is a device file, fifo or other special file, which are not extracted", Err: ErrUnsupported}
}

// cleanName turns an entry's name into a clean path relative to the
// target, refusing names that could leave it.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", &EntryError{Name: name, Reason: "has an empty name", Err: ErrUnsafe}
	case strings.IndexByte(name, 0) >= 0:
		return "", unsafeEntry(name, "has a NUL byte in its name")
	case strings.HasPrefix(name, "/"):
		return "", unsafeEntry(name, "has an absolute name")
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return "", unsafeEntry(name, "has a .. component")
		}
	}
	return path.Clean(name), nil
}

// notThroughLink refuses rel when it, or a directory above it, is a
// symlink this extraction made: writing there would follow the link.
func (x *extraction) notThroughLink(name, rel string) error {
	for p := rel; p != "."; p = path.Dir(p) {
		if x.links[p] {
			return unsafeEntry(name, "would be written through the symlink %q of the archive", p)
		}
	}
	return nil
}

// mkdirAll creates rel and its missing parents, once.
func (x *extraction) mkdirAll(rel string) error {
	if x.dirs[rel] {
		return nil
	}
	if err := x.dst.MkdirAll(x.ctx, x.abs(rel)); err != nil {
		return err
	}
	for p := rel; p != "." && !x.dirs[p]; p = path.Dir(p) {
		x.dirs[p] = true
	}
	return nil
}

func (x *extraction) file(hdr *tar.Header, rel string, perm fs.FileMode, tr *tar.Reader) error {
	if rel == "." {
		return unsafeEntry(hdr.Name, "names the target directory itself")
	}
	if hdr.Size < 0 {
		return x.malformed(fmt.Errorf("entry %q has a negative size", hdr.Name))
	}
	if x.lim.MaxBytes > 0 && hdr.Size > x.lim.MaxBytes-x.stats.Bytes {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, x.lim.MaxBytes)
	}
	if err := x.mkdirAll(path.Dir(rel)); err != nil {
		return err
	}
	n, err := x.dst.WriteFile(x.ctx, x.abs(rel), tr)
	if x.readErr != nil {
		return x.malformed(x.readErr)
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) {
			return x.malformed(err)
		}
		return err
	}
	if n != hdr.Size {
		return x.malformed(fmt.Errorf("entry %q holds %d of its %d bytes", hdr.Name, n, hdr.Size))
	}
	x.stats.Files++
	x.stats.Bytes += n
	x.files[rel] = true
	return x.meta(rel, perm, hdr.ModTime)
}

func (x *extraction) symlink(hdr *tar.Header, rel string) error {
	if rel == "." {
		return unsafeEntry(hdr.Name, "names the target directory itself")
	}
	if err := checkLinkTarget(hdr.Name, rel, hdr.Linkname); err != nil {
		return err
	}
	if err := x.mkdirAll(path.Dir(rel)); err != nil {
		return err
	}
	if err := x.dst.Symlink(x.ctx, hdr.Linkname, x.abs(rel)); err != nil {
		return err
	}
	x.links[rel] = true
	x.stats.Symlinks++
	return nil
}

// checkLinkTarget refuses a symlink target that could resolve outside the
// target directory. The target may climb with leading ".." components, at
// most as high as the directory holding the link (a real directory: links
// are never written through), then only descend; descending stays inside
// as every link it meets passed the same check.
func checkLinkTarget(name, rel, target string) error {
	switch {
	case target == "":
		return unsafeEntry(name, "is a symlink without a target")
	case strings.IndexByte(target, 0) >= 0:
		return unsafeEntry(name, "is a symlink whose target has a NUL byte")
	case strings.HasPrefix(target, "/"):
		return unsafeEntry(name, "is a symlink to the absolute path %q, outside the target", target)
	}
	depth := strings.Count(path.Dir(rel), "/") + 1
	if path.Dir(rel) == "." {
		depth = 0
	}
	climbing := true
	for _, seg := range strings.Split(target, "/") {
		switch {
		case seg == "" || seg == ".":
		case seg == "..":
			if !climbing {
				return unsafeEntry(name, "is a symlink whose target %q has a .. after a name", target)
			}
			depth--
			if depth < 0 {
				return unsafeEntry(name, "is a symlink to %q, outside the target", target)
			}
		default:
			climbing = false
		}
	}
	return nil
}

func (x *extraction) hardlink(hdr *tar.Header, rel string) error {
	if rel == "." {
		return unsafeEntry(hdr.Name, "names the target directory itself")
	}
	if hdr.Linkname == "" || strings.HasPrefix(hdr.Linkname, "/") {
		return unsafeEntry(hdr.Name, "is a hard link to %q, outside the target", hdr.Linkname)
	}
	to, err := cleanName(hdr.Linkname)
	if err != nil {
		return unsafeEntry(hdr.Name, "is a hard link to %q, outside the target", hdr.Linkname)
	}
	if !x.files[to] {
		return unsafeEntry(hdr.Name, "is a hard link to %q, which is not a file extracted earlier from the archive", hdr.Linkname)
	}
	if err := x.mkdirAll(path.Dir(rel)); err != nil {
		return err
	}
	if err := x.dst.Link(x.ctx, x.abs(to), x.abs(rel)); err != nil {
		return err
	}
	x.files[rel] = true
	x.stats.Files++
	return nil
}

func (x *extraction) meta(rel string, perm fs.FileMode, mtime time.Time) error {
	if err := x.dst.Chmod(x.ctx, x.abs(rel), perm); err != nil {
		return err
	}
	if mtime.IsZero() {
		return nil
	}
	return x.dst.Chtimes(x.ctx, x.abs(rel), mtime)
}
