package vms

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/archive"
	"github.com/agentos-gateway/agentos-gateway/images"
)

// guestFS is a VM's filesystem as the archive package sees it: read as
// images reads a live tree, written with the engine's file calls.
type guestFS struct {
	images.Source
	vm *agentos.VM
}

func newGuestFS(vm *agentos.VM) guestFS { return guestFS{images.Source{Tree: vm}, vm} }

func (g guestFS) MkdirAll(ctx context.Context, name string) error { return g.vm.Mkdir(ctx, name, true) }

func (g guestFS) WriteFile(ctx context.Context, name string, r io.Reader) (int64, error) {
	return g.vm.WriteFileFrom(ctx, name, r)
}

func (g guestFS) Symlink(ctx context.Context, target, name string) error {
	return g.vm.Symlink(ctx, target, name)
}

func (g guestFS) Link(ctx context.Context, existing, name string) error {
	return g.vm.Link(ctx, existing, name)
}

func (g guestFS) Chmod(ctx context.Context, name string, perm fs.FileMode) error {
	return g.vm.Chmod(ctx, name, perm)
}

func (g guestFS) Chtimes(ctx context.Context, name string, mtime time.Time) error {
	return g.vm.Utimes(ctx, name, mtime, mtime)
}

// WriteArchive streams the tree (or the single file) at root as a tar
// archive into w; see archive.Write.
func (f *Files) WriteArchive(ctx context.Context, root string, w io.Writer) error {
	clean, err := agentos.CheckPath(root)
	if err != nil {
		return EngineError(err, "archive")
	}
	// One reconcile of the engine's shadow for the whole walk (agentos.VM.Settle).
	if ctx, err = f.vm.Settle(ctx); err != nil {
		return EngineError(err, "archive")
	}
	return archiveError(archive.Write(ctx, w, newGuestFS(f.vm), clean), archive.Limits{})
}

// ExtractArchive extracts the tar archive r into the directory dir, which
// must exist unless mkdirs is set.
//
// The archive is extracted into a staging directory next to dir and its
// entries moved into place only once all of them were written, so a
// refused or broken archive leaves nothing behind (the directories mkdirs
// created are removed again). Moving in merges with what dir holds: an
// archive's directory merges into an existing directory (which keeps its
// own mode and takes the archive's time), any other entry replaces an
// existing file or symlink of its name, and an entry that would replace an
// existing directory with a non-directory is refused (409) before anything
// moves. An existing symlink is replaced, never followed, so nothing lands
// outside dir. Only an engine failure during the moves themselves leaves a
// part of the archive in place.
func (f *Files) ExtractArchive(ctx context.Context, dir string, r io.Reader, mkdirs bool, lim archive.Limits) (st archive.Stats, err error) {
	clean, err := agentos.CheckPath(dir)
	if err != nil {
		return st, EngineError(err, "extract archive")
	}
	defer f.journal(false, ancestors(clean)...)()
	defer f.journal(true, clean)()
	info, err := f.vm.Stat(ctx, clean)
	switch {
	case isNotFound(err):
		if !mkdirs {
			return st, gateway.Errorf(gateway.CodeNotFound, "the directory %s does not exist; mkdirs=true creates it", clean).WithDetail("field", "path")
		}
		var created string
		if created, err = f.firstMissing(ctx, clean); err != nil {
			return st, err
		}
		if err := f.vm.Mkdir(ctx, clean, true); err != nil {
			return st, EngineError(err, "mkdir")
		}
		// What mkdirs created goes again when the archive is refused.
		// (err is the named result here, set by every return below.)
		defer func() {
			if err != nil {
				f.removeDetached(ctx, created)
			}
		}()
	case err != nil:
		return st, EngineError(err, "stat")
	case !info.IsDir:
		return st, gateway.Errorf(gateway.CodeConflict, "%s is not a directory", clean).WithDetail("field", "path")
	}

	// Next to the target (inside it for /), on the same filesystem, so
	// that the moves are renames.
	staging := path.Join(path.Dir(clean), extractPrefix+newID(""))
	if err := f.vm.Mkdir(ctx, staging, false); err != nil {
		return st, EngineError(err, "extract archive")
	}
	defer f.removeDetached(ctx, staging)

	sink := &timedSink{guestFS: newGuestFS(f.vm), staging: staging}
	st, err = archive.Extract(ctx, r, sink, staging, lim)
	if err != nil {
		return st, archiveError(err, lim)
	}
	var moves []move
	if err := f.planMoves(ctx, staging, staging, clean, &moves); err != nil {
		return st, err
	}
	for _, m := range moves {
		if m.replace {
			if err := f.vm.Remove(ctx, m.to, false); err != nil {
				return st, EngineError(err, "extract archive")
			}
		}
		if err := f.vm.Move(ctx, m.from, m.to); err != nil {
			return st, EngineError(err, "extract archive")
		}
		op := FileCreated
		if m.replace {
			op = FileModified
		}
		f.notify(FileChange{Op: op, Path: m.to, IsDir: m.isDir})
	}
	for _, ft := range sink.times {
		if err := f.vm.Utimes(ctx, path.Join(clean, ft.rel), ft.mtime, ft.mtime); err != nil {
			return st, EngineError(err, "extract archive")
		}
	}
	return st, nil
}

// timedSink records the modification times the extraction sets, to set them
// again once the entries are in place: the engine's rename gives every file
// it moves (directly or inside a moved directory) the current time, while
// directories keep theirs. A hard link gets its file's time under its own
// name too: once moved, a hard-linked file takes utimes through some of its
// names only (measured on 0.2.21), so every name is tried.
type timedSink struct {
	guestFS
	staging string
	times   []fileTime
	byName  map[string]time.Time
}

type fileTime struct {
	rel   string
	mtime time.Time
}

func (s *timedSink) rel(name string) string { return strings.TrimPrefix(name, s.staging+"/") }

func (s *timedSink) Chtimes(ctx context.Context, name string, mtime time.Time) error {
	if err := s.guestFS.Chtimes(ctx, name, mtime); err != nil {
		return err
	}
	s.record(s.rel(name), mtime)
	return nil
}

func (s *timedSink) Link(ctx context.Context, existing, name string) error {
	if err := s.guestFS.Link(ctx, existing, name); err != nil {
		return err
	}
	if mtime, ok := s.byName[s.rel(existing)]; ok {
		s.record(s.rel(name), mtime)
	}
	return nil
}

func (s *timedSink) record(rel string, mtime time.Time) {
	if s.byName == nil {
		s.byName = map[string]time.Time{}
	}
	s.byName[rel] = mtime
	s.times = append(s.times, fileTime{rel: rel, mtime: mtime})
}

// firstMissing returns the topmost missing directory of the path p, the
// one MkdirAll will create first.
func (f *Files) firstMissing(ctx context.Context, p string) (string, error) {
	missing := p
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		_, err := f.vm.Stat(ctx, d)
		if err == nil {
			break
		}
		if !isNotFound(err) {
			return "", EngineError(err, "stat")
		}
		missing = d
	}
	return missing, nil
}

// removeDetached removes the tree at p even when ctx was cancelled (the
// request went away): a detached removal bounded by its own timeout.
func (f *Files) removeDetached(ctx context.Context, p string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = f.vm.Remove(cctx, p, true)
}

// move is one step of moving extracted entries into place.
type move struct {
	from, to string
	// replace: an existing file or symlink at to goes first.
	replace bool
	isDir   bool
}

// planMoves lists the moves that put the content of src (inside the
// staging directory) into dst, merging directories, and refuses before any
// move an entry that would replace a directory with something else.
func (f *Files) planMoves(ctx context.Context, staging, src, dst string, moves *[]move) error {
	es, err := f.vm.ReadDir(ctx, src)
	if err != nil {
		return EngineError(err, "extract archive")
	}
	for _, e := range es {
		to := path.Join(dst, e.Name)
		existing, err := f.vm.Lstat(ctx, to)
		switch {
		case isNotFound(err):
			*moves = append(*moves, move{from: e.Path, to: to, isDir: e.IsDir && !e.IsSymlink})
		case err != nil:
			return EngineError(err, "extract archive")
		case existing.IsDir && e.IsDir && !e.IsSymlink:
			if err := f.planMoves(ctx, staging, e.Path, to, moves); err != nil {
				return err
			}
		case existing.IsDir:
			return gateway.Errorf(gateway.CodeConflict, "the archive entry %s would replace the directory %s", strings.TrimPrefix(e.Path, staging+"/"), to).WithDetail("path", to)
		default:
			*moves = append(*moves, move{from: e.Path, to: to, replace: true})
		}
	}
	return nil
}

// isNotFound reports whether err is the engine's "no such file".
func isNotFound(err error) bool {
	return err != nil && gateway.ErrorCode(EngineError(err, "")) == gateway.CodeNotFound
}

// archiveError maps the archive package's errors to the gateway's codes,
// naming the refused entry.
func archiveError(err error, lim archive.Limits) error {
	if err == nil {
		return nil
	}
	var ee *archive.EntryError
	switch {
	case errors.Is(err, archive.ErrTooLarge):
		return gateway.Wrap(gateway.CodePayloadTooLarge, err, "the archive's files exceed %d bytes", lim.MaxBytes).WithDetail("limit", lim.MaxBytes)
	case errors.Is(err, archive.ErrTooManyEntries):
		return gateway.Wrap(gateway.CodePayloadTooLarge, err, "the archive has more than %d entries", lim.MaxEntries).WithDetail("limit", lim.MaxEntries)
	case errors.As(err, &ee):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "archive entry %q %s; nothing was extracted", ee.Name, ee.Reason).WithDetail("entry", ee.Name)
	case errors.Is(err, archive.ErrMalformed):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "the body is not a readable tar archive (or tar.gz); nothing was extracted")
	}
	return EngineError(err, "archive")
}
