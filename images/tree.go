package images

import (
	"context"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/archive"
)

// Tree is what a capture, a checkpoint and the check of an image read of
// a live VM's files: the engine's VM (*agentos.VM) is one, and the tests'
// trees in memory are others.
type Tree interface {
	// ExportRootFilesystemFrame exports the whole tree in one frame, or
	// fails with agentos.ErrSnapshotTooLarge.
	ExportRootFilesystemFrame(ctx context.Context) ([]protocol.RootFilesystemEntry, error)
	// Settle reconciles the engine's shadow of the tree once, for the
	// calls made with the context it returns.
	Settle(ctx context.Context) (context.Context, error)
	ReadDir(ctx context.Context, p string) ([]gateway.DirEntry, error)
	ReadDirRecursive(ctx context.Context, p string, o agentos.ReadDirOptions) ([]gateway.DirEntry, error)
	Lstat(ctx context.Context, p string) (agentos.FileInfo, error)
	Readlink(ctx context.Context, p string) (string, error)
	ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error)
	// ExecArgv runs the guest's find, the fast way to stamp a large tree.
	ExecArgv(ctx context.Context, argv []string, o agentos.ExecOptions) (*agentos.ExecResult, error)
	// MountDescriptors are the tenant's mounts, whose content is the
	// host's and stays out of every image.
	MountDescriptors() []protocol.MountDescriptor
	// ShadowSkips counts the reconciles the engine's shadow skipped.
	ShadowSkips() int64
}

// Target is what a restore writes into a VM created from an image: the
// files the create frame did not carry.
type Target interface {
	WriteFileFrom(ctx context.Context, p string, r io.Reader) (int64, error)
	Chmod(ctx context.Context, p string, mode fs.FileMode) error
}

// mountedDirs are the directories whose content is not the VM's own: the
// kernel's pseudo-filesystems and the engine's package mounts. An image
// keeps the directories and leaves their content out.
var mountedDirs = []string{"/dev", "/proc", "/sys", "/opt/agentos"}

// mountPoints are the guest paths of a VM's host directory mounts, whose
// files are the host's and stay out of its images.
func mountPoints(t Tree) []string {
	var out []string
	for _, m := range t.MountDescriptors() {
		out = append(out, path.Clean(m.GuestPath))
	}
	return out
}

// cutPoints are the directories whose content is not the VM's own: the
// kernel's and the engine's, and the tenant's mounts.
func cutPoints(t Tree) []string {
	return append(slices.Clone(mountedDirs), mountPoints(t)...)
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Type bits of a raw stat mode (st_mode & S_IFMT).
const (
	modeTypeMask = 0o170000
	modeRegular  = 0o100000
	modeDir      = 0o040000
	modeSymlink  = 0o120000
	modeFifo     = 0o010000
	modeChar     = 0o020000
	modeBlock    = 0o060000
	modeSocket   = 0o140000
)

// Source is a live tree as the archive package reads it.
type Source struct{ Tree Tree }

// Lstat stats name, its type from the raw mode: agentos.FileInfo.Mode
// knows directories and symlinks only, and the raw mode tells a fifo or a
// device from a regular file.
func (s Source) Lstat(ctx context.Context, name string) (archive.Info, error) {
	info, err := s.Tree.Lstat(ctx, name)
	if err != nil {
		return archive.Info{}, err
	}
	mode := archive.PermFromUnix(info.RawMode)
	switch info.RawMode & modeTypeMask {
	case modeRegular:
	case modeDir:
		mode |= fs.ModeDir
	case modeSymlink:
		mode |= fs.ModeSymlink
	case modeFifo:
		mode |= fs.ModeNamedPipe
	case modeChar:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case modeBlock:
		mode |= fs.ModeDevice
	case modeSocket:
		mode |= fs.ModeSocket
	default:
		mode |= fs.ModeIrregular
	}
	return archive.Info{Mode: mode, Size: info.Size, ModTime: info.ModTime, UID: int(info.UID), GID: int(info.GID)}, nil
}

// ReadDir lists the names in a directory.
func (s Source) ReadDir(ctx context.Context, name string) ([]string, error) {
	es, err := s.Tree.ReadDir(ctx, name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name
	}
	return names, nil
}

// Readlink reads a symlink's target.
func (s Source) Readlink(ctx context.Context, name string) (string, error) {
	return s.Tree.Readlink(ctx, name)
}

// ReadFile copies a file's bytes into w.
func (s Source) ReadFile(ctx context.Context, name string, w io.Writer) (int64, error) {
	return s.Tree.ReadFileTo(ctx, name, w)
}
