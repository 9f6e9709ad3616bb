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
)

// FileInfo is a file's metadata as the engine reports it.
type FileInfo = agentos.FileInfo

// CheckPath validates a guest path as the engine will: absolute, no NUL
// byte, and no ".." that would climb above the root. It returns the cleaned
// path. Every Files method checks its paths; CheckPath lets a caller refuse
// a bad one in its own words before it asks for the VM.
func CheckPath(p string) (string, error) { return agentos.CheckPath(p) }

// Files is the filesystem of a tenant's live VM. Every method checks the
// path and maps errors to the gateway's codes.
type Files struct {
	vm       *agentos.VM
	vmID     string
	observer FileObserver
	done     func()
	// lv journals the changes for the VM's checkpoints (nil: not kept).
	lv *liveVM
}

// Files returns a VM's filesystem and a release for the hold on the VM.
func (s *Service) Files(ctx context.Context, tenantID, vmID string) (*Files, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	return &Files{vm: lv.vm, vmID: lv.id, observer: s.fileObserver(), done: lv.hold(s.cfg.Now()), lv: lv}, nil
}

// journal tells the VM's checkpoints of paths a call changes, once as it
// begins and once more when the returned function is called as it ends: a
// checkpoint taken meanwhile may have read them half changed, and a call
// that fails halfway has changed some of them all the same.
func (f *Files) journal(tree bool, paths ...string) func() {
	if f.lv == nil {
		return func() {}
	}
	f.lv.journal(tree, paths...)
	return func() { f.lv.journal(tree, paths...) }
}

// ancestors returns the directories above an absolute path, up to and
// without the root: those a call with mkdirs may create.
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		out = append(out, d)
	}
	return out
}

// Release ends the hold on the VM.
func (f *Files) Release() { f.done() }

// Stat returns a file's metadata.
func (f *Files) Stat(ctx context.Context, path string) (FileInfo, error) {
	info, err := f.vm.Stat(ctx, path)
	return info, EngineError(err, "stat")
}

// ReadTo streams a file into w.
func (f *Files) ReadTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	n, err := f.vm.ReadFileTo(ctx, path, w)
	return n, EngineError(err, "read file")
}

// FileReader reads a guest file lazily through PREAD calls: it implements
// io.ReadSeeker (for http.ServeContent's ranges) and fetches only what is
// read, in bounded memory. Its read-ahead starts at the caller's buffer size
// and doubles up to agentos.FileChunkSize, so a small range costs one small
// call and a long one few large calls, reading at most one chunk past what
// the caller consumes.
type FileReader struct {
	ctx  context.Context
	vm   *agentos.VM
	name string
	size int64
	off  int64
	buf  []byte
	// bufOff is the file offset of buf[0].
	bufOff int64
	ahead  int
	err    error
}

// NewReader returns a reader of the file name of the given size (from a
// Stat); reads past size end with io.EOF.
func (f *Files) NewReader(ctx context.Context, name string, size int64) *FileReader {
	return &FileReader{ctx: ctx, vm: f.vm, name: name, size: size}
}

// Err returns the first read error, mapped to the gateway's codes, or nil.
func (r *FileReader) Err() error { return r.err }

// Seek implements io.Seeker.
func (r *FileReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.size
	default:
		return r.off, errors.New("vms: seek: invalid whence")
	}
	if offset < 0 {
		return r.off, errors.New("vms: seek: negative position")
	}
	r.off = offset
	return offset, nil
}

// Read implements io.Reader.
func (r *FileReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.off >= r.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if r.off < r.bufOff || r.off >= r.bufOff+int64(len(r.buf)) {
		if err := r.fill(len(p)); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off-r.bufOff:])
	r.off += int64(n)
	return n, nil
}

func (r *FileReader) fill(want int) error {
	n := int(min(int64(max(want, r.ahead)), int64(agentos.FileChunkSize), r.size-r.off))
	r.ahead = min(2*n, agentos.FileChunkSize)
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	k, err := r.vm.ReadAt(r.ctx, r.name, r.buf, r.off)
	r.buf, r.bufOff = r.buf[:k], r.off
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = EngineError(err, "read file")
		return r.err
	}
	if k == 0 {
		// The file shrank since it was described: its end came early.
		r.err = gateway.Errorf(gateway.CodeConflict, "%s changed while it was read", r.name)
		return r.err
	}
	return nil
}

// WriteFrom streams r into a file, creating its parent directories first
// when mkdirs is set. The file appears under its name only when complete:
// it is written to a temporary name and moved into place. A file written
// over keeps its permission bits.
func (f *Files) WriteFrom(ctx context.Context, name string, r io.Reader, mkdirs bool) (int64, error) {
	clean, err := agentos.CheckPath(name)
	if err != nil {
		return 0, EngineError(err, "write file")
	}
	if mkdirs {
		defer f.journal(false, ancestors(clean)...)()
	}
	defer f.journal(false, clean)()
	// The engine would replace a directory with the file; a PUT of bytes
	// onto a directory is a mistake of the caller's, so it is refused and
	// the directory kept.
	info, serr := f.vm.Stat(ctx, clean)
	if serr == nil && info.IsDir {
		return 0, gateway.Errorf(gateway.CodeConflict, "%s is a directory; a file cannot replace it", clean).WithDetail("field", "path")
	}
	var changes []FileChange
	switch dir := path.Dir(clean); {
	case dir == "/" || serr == nil:
		// The root, or the directory of a file that exists, is there.
	case mkdirs:
		created, err := f.mkdirAll(ctx, dir)
		if err != nil {
			return 0, err
		}
		changes = created
	default:
		// The engine would create the missing directories itself; the
		// rule is the archive upload's: a missing directory is created
		// only when asked for.
		if err := f.requireDir(ctx, dir); err != nil {
			return 0, err
		}
	}
	tmp := clean + uploadInfix + newID("")
	n, err := f.vm.WriteFileFrom(ctx, tmp, r)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = f.vm.Remove(cctx, tmp, false)
		cancel()
		return n, EngineError(err, "write file")
	}
	if serr == nil {
		// A file written over keeps its permission bits, as a write to
		// it in place would (the bytes go to a new file, moved over it).
		if err := f.vm.Chmod(ctx, tmp, fs.FileMode(info.RawMode).Perm()); err != nil {
			_ = f.vm.Remove(context.WithoutCancel(ctx), tmp, false)
			return n, EngineError(err, "write file")
		}
	}
	if err := f.vm.Move(ctx, tmp, clean); err != nil {
		_ = f.vm.Remove(context.WithoutCancel(ctx), tmp, false)
		return n, EngineError(err, "write file")
	}
	op := FileModified
	if serr != nil {
		op = FileCreated
	}
	f.notify(append(changes, FileChange{Op: op, Path: clean})...)
	return n, nil
}

// requireDir answers not_found unless dir exists, and conflict unless it
// is a directory.
func (f *Files) requireDir(ctx context.Context, dir string) error {
	info, err := f.vm.Stat(ctx, dir)
	switch {
	case err != nil && errors.Is(err, agentos.ErrNotFound):
		return gateway.Errorf(gateway.CodeNotFound, "the directory %s does not exist; mkdirs=true creates it", dir).WithDetail("field", "path")
	case err != nil:
		return EngineError(err, "stat")
	case !info.IsDir:
		return gateway.Errorf(gateway.CodeConflict, "%s is not a directory", dir).WithDetail("field", "path")
	}
	return nil
}

// mkdirAll creates the directory dir and its parents, and returns the
// creations it made when the changes are observed.
func (f *Files) mkdirAll(ctx context.Context, dir string) ([]FileChange, error) {
	var missing []string
	if f.observed() {
		for d := dir; d != "/"; d = path.Dir(d) {
			if _, err := f.vm.Stat(ctx, d); err == nil {
				break
			}
			missing = append(missing, d)
		}
	}
	if err := f.vm.Mkdir(ctx, dir, true); err != nil {
		return nil, EngineError(err, "mkdir")
	}
	changes := make([]FileChange, 0, len(missing))
	for i := len(missing) - 1; i >= 0; i-- {
		changes = append(changes, FileChange{Op: FileCreated, Path: missing[i], IsDir: true})
	}
	return changes, nil
}

// Remove deletes a file or (recursive) a tree.
func (f *Files) Remove(ctx context.Context, name string, recursive bool) error {
	defer f.journal(recursive, path.Clean(name))()
	isDir := f.observedDir(ctx, name)
	if err := f.vm.Remove(ctx, name, recursive); err != nil {
		return EngineError(err, "remove")
	}
	f.notify(FileChange{Op: FileDeleted, Path: path.Clean(name), IsDir: isDir})
	return nil
}

// List lists a directory, optionally recursively.
func (f *Files) List(ctx context.Context, path string, recursive bool, maxDepth int) ([]gateway.DirEntry, error) {
	var es []gateway.DirEntry
	var err error
	if recursive {
		es, err = f.vm.ReadDirRecursive(ctx, path, agentos.ReadDirOptions{MaxDepth: maxDepth})
	} else {
		es, err = f.vm.ReadDir(ctx, path)
	}
	if err == nil && recursive && maxDepth > 0 {
		// The engine descends one level more than MaxDepth says (1 lists
		// the children's entries too); maxDepth 1 is the directory itself.
		es = withinDepth(path, es, maxDepth)
	}
	return es, EngineError(err, "list directory")
}

// withinDepth keeps the entries at most depth levels below dir.
func withinDepth(dir string, es []gateway.DirEntry, depth int) []gateway.DirEntry {
	prefix := strings.TrimSuffix(path.Clean(dir), "/") + "/"
	out := es[:0]
	for _, e := range es {
		if rel, ok := strings.CutPrefix(e.Path, prefix); !ok || strings.Count(rel, "/") < depth {
			out = append(out, e)
		}
	}
	return out
}

// Mkdir creates a directory and its parents.
func (f *Files) Mkdir(ctx context.Context, name string) error {
	defer f.journal(false, ancestors(path.Clean(name))...)()
	defer f.journal(false, path.Clean(name))()
	changes, err := f.mkdirAll(ctx, path.Clean(name))
	if err != nil {
		return err
	}
	f.notify(changes...)
	return nil
}

// Move renames a file or tree.
func (f *Files) Move(ctx context.Context, from, to string) error {
	defer f.journal(true, path.Clean(from), path.Clean(to))()
	isDir := f.observedDir(ctx, from)
	if err := f.vm.Move(ctx, from, to); err != nil {
		return EngineError(err, "move")
	}
	f.notify(FileChange{Op: FileRenamed, From: path.Clean(from), Path: path.Clean(to), IsDir: isDir})
	return nil
}

// observedDir reports, when the changes are observed, whether name is a
// directory (not a symlink to one), for the change's kind.
func (f *Files) observedDir(ctx context.Context, name string) bool {
	if !f.observed() {
		return false
	}
	info, err := f.vm.Lstat(ctx, name)
	return err == nil && info.IsDir
}
