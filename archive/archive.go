// Package archive writes directory trees as tar streams and extracts tar
// streams into directories safely, one entry at a time, over a small
// filesystem interface of its own. It knows nothing of VMs or HTTP: the vms
// package adapts a VM's filesystem to Source and Sink, and the same walking
// can serve root-filesystem snapshots.
package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// Info is what the archive code needs to know of a file: its type and
// permission bits (fs.FileMode), size, modification time and owner.
type Info struct {
	Mode    fs.FileMode
	Size    int64
	ModTime time.Time
	// UID and GID are the owner, written into the archive's headers (a
	// root-filesystem snapshot keeps them; Extract does not apply them).
	UID, GID int
}

// Source is the filesystem Write reads. Names are absolute paths in the
// source's own namespace.
type Source interface {
	// Lstat describes name without following a final symlink.
	Lstat(ctx context.Context, name string) (Info, error)
	// ReadDir returns the names of a directory's entries.
	ReadDir(ctx context.Context, name string) ([]string, error)
	// Readlink returns a symlink's target.
	Readlink(ctx context.Context, name string) (string, error)
	// ReadFile streams a regular file's bytes into w.
	ReadFile(ctx context.Context, name string, w io.Writer) (int64, error)
}

// Sink is the filesystem Extract writes. Names are absolute paths in the
// sink's own namespace.
type Sink interface {
	// MkdirAll creates a directory and its missing parents.
	MkdirAll(ctx context.Context, name string) error
	// WriteFile creates or truncates name and streams r into it.
	WriteFile(ctx context.Context, name string, r io.Reader) (int64, error)
	// Symlink creates name as a symbolic link to target.
	Symlink(ctx context.Context, target, name string) error
	// Link creates name as a hard link to the existing file existing.
	Link(ctx context.Context, existing, name string) error
	// Chmod sets a file's permission bits.
	Chmod(ctx context.Context, name string, perm fs.FileMode) error
	// Chtimes sets a file's modification time.
	Chtimes(ctx context.Context, name string, mtime time.Time) error
}

// Errors callers branch on. Entry-specific refusals come as *EntryError
// wrapping ErrUnsafe or ErrUnsupported.
var (
	// ErrUnsafe marks an entry that would land outside the target: an
	// absolute name, a ".." component, a link leaving the target, or a
	// path through a symlink the archive created.
	ErrUnsafe = errors.New("archive: entry outside the target")
	// ErrUnsupported marks an entry of a type that is not extracted:
	// device files, fifos and the like.
	ErrUnsupported = errors.New("archive: unsupported entry type")
	// ErrTooLarge means the extracted files exceed Limits.MaxBytes.
	ErrTooLarge = errors.New("archive: extracted size over the limit")
	// ErrTooManyEntries means the archive has more than Limits.MaxEntries
	// entries.
	ErrTooManyEntries = errors.New("archive: too many entries")
	// ErrMalformed means the stream is not a readable tar archive.
	ErrMalformed = errors.New("archive: malformed archive")
)

// EntryError is the refusal of one entry; Reason says why in words fit for
// the caller.
type EntryError struct {
	Name   string
	Reason string
	Err    error // ErrUnsafe or ErrUnsupported
}

func (e *EntryError) Error() string { return fmt.Sprintf("archive: entry %q %s", e.Name, e.Reason) }

func (e *EntryError) Unwrap() error { return e.Err }

func unsafeEntry(name, format string, args ...any) error {
	return &EntryError{Name: name, Reason: fmt.Sprintf(format, args...), Err: ErrUnsafe}
}
