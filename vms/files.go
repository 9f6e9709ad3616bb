package vms

import (
	"context"
	"io"
	"path"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// Files is the filesystem of a tenant's live VM. Every method checks the
// path and maps errors to the gateway's codes.
type Files struct {
	vm   *agentos.VM
	done func()
}

// Files returns a VM's filesystem and a release for the hold on the VM.
func (s *Service) Files(ctx context.Context, tenantID, vmID string) (*Files, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	return &Files{vm: lv.vm, done: lv.hold(s.cfg.Now())}, nil
}

// Release ends the hold on the VM.
func (f *Files) Release() { f.done() }

// Stat returns a file's metadata.
func (f *Files) Stat(ctx context.Context, path string) (agentos.FileInfo, error) {
	info, err := f.vm.Stat(ctx, path)
	return info, EngineError(err, "stat")
}

// ReadTo streams a file into w.
func (f *Files) ReadTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	n, err := f.vm.ReadFileTo(ctx, path, w)
	return n, EngineError(err, "read file")
}

// WriteFrom streams r into a file, creating its parent directories first
// when mkdirs is set. The file appears under its name only when complete:
// it is written to a temporary name and moved into place.
func (f *Files) WriteFrom(ctx context.Context, name string, r io.Reader, mkdirs bool) (int64, error) {
	clean, err := agentos.CheckPath(name)
	if err != nil {
		return 0, EngineError(err, "write file")
	}
	if mkdirs {
		if dir := path.Dir(clean); dir != "/" {
			if err := f.vm.Mkdir(ctx, dir, true); err != nil {
				return 0, EngineError(err, "mkdir")
			}
		}
	}
	tmp := clean + ".agentos-upload-" + newID("")
	n, err := f.vm.WriteFileFrom(ctx, tmp, r)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = f.vm.Remove(cctx, tmp, false)
		cancel()
		return n, EngineError(err, "write file")
	}
	if err := f.vm.Move(ctx, tmp, clean); err != nil {
		_ = f.vm.Remove(context.WithoutCancel(ctx), tmp, false)
		return n, EngineError(err, "write file")
	}
	return n, nil
}

// Remove deletes a file or (recursive) a tree.
func (f *Files) Remove(ctx context.Context, path string, recursive bool) error {
	return EngineError(f.vm.Remove(ctx, path, recursive), "remove")
}

// List lists a directory, optionally recursively.
func (f *Files) List(ctx context.Context, path string, recursive bool, maxDepth int) ([]agentos.DirEntry, error) {
	var es []agentos.DirEntry
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
func withinDepth(dir string, es []agentos.DirEntry, depth int) []agentos.DirEntry {
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
func (f *Files) Mkdir(ctx context.Context, path string) error {
	return EngineError(f.vm.Mkdir(ctx, path, true), "mkdir")
}

// Move renames a file or tree.
func (f *Files) Move(ctx context.Context, from, to string) error {
	return EngineError(f.vm.Move(ctx, from, to), "move")
}
