package vms

import "strings"

// FileOp is the kind of a change made to a VM's files.
type FileOp string

// The kinds of file changes.
const (
	FileCreated  FileOp = "create"
	FileModified FileOp = "modify"
	FileDeleted  FileOp = "delete"
	FileRenamed  FileOp = "rename"
)

// FileChange is one change made through the files service: Path changed,
// or for a rename, From moved to Path.
type FileChange struct {
	Op    FileOp
	Path  string
	From  string
	IsDir bool
}

// FileObserver learns of the changes made through the files service, once
// each succeeded, and of the end of every VM. Its methods are called on
// the request's goroutine, so they must not block.
type FileObserver interface {
	FilesChanged(vmID string, changes ...FileChange)
	VMEnded(vmID string)
}

// ObserveFiles sets the observer of file changes (nil for none); set it
// before the service serves requests.
func (s *Service) ObserveFiles(o FileObserver) {
	s.mu.Lock()
	s.observer = o
	s.mu.Unlock()
}

func (s *Service) fileObserver() FileObserver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observer
}

// Temporary names of the files service: uploads are written under a name
// with uploadInfix and moved into place, archives extracted into a
// directory named with extractPrefix.
const (
	uploadInfix   = ".agentos-upload-"
	extractPrefix = ".agentos-extract-"
)

// IsTemporary reports whether a file name is one of the files service's
// own temporary names, which exist only while an upload or an extraction
// runs and are never a change of the caller's.
func IsTemporary(name string) bool {
	return strings.Contains(name, uploadInfix) || strings.HasPrefix(name, extractPrefix)
}

// notify tells the observer, if any, of changes to f's VM.
func (f *Files) notify(changes ...FileChange) {
	if f.observer != nil && len(changes) > 0 {
		f.observer.FilesChanged(f.vmID, changes...)
	}
}

// observed reports whether anyone observes f's changes: the extra stats
// that describe a change are spent only then.
func (f *Files) observed() bool { return f.observer != nil }
