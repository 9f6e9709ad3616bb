// Package images keeps a VM's files at rest: the root filesystem captured
// whole (a snapshot, a hibernation's image) or in layers (a checkpoint),
// the comparison of a live tree with what was captured of it, the merge of
// layers and the restore of a VM from an image, and the blob store all of
// it lives in. It reads and writes a live VM through small interfaces of
// its own (Tree, Target), which the engine's VM implements; it knows
// nothing of the VMs' life cycles, which are the vms service's.
//
// The format of an image is a snapshot tar (root.go); a checkpoint's
// layers are tars of the same format (checkpoint.go), merged into one
// image to restore it (restore.go).
package images

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// Store keeps VM images in a blob store. Its zero value with EngineError
// set serves the calls that store nothing (WriteRoot, OpenRoot).
type Store struct {
	Blobs Blobs
	// EngineError words an error of the engine for the gateway's callers
	// (vms.EngineError), what naming the operation; nil leaves errors as
	// they are.
	EngineError func(err error, what string) error
	// Log is told of the images that could not be removed.
	Log zerolog.Logger
}

func (s Store) engineError(err error, what string) error {
	if s.EngineError == nil || err == nil {
		return err
	}
	return s.EngineError(err, what)
}

// Image is a captured root filesystem in the blob store.
type Image struct {
	Name  string
	Bytes int64
}

// imageDeleteTimeout bounds the removal of an image nobody needs any more.
const imageDeleteTimeout = 30 * time.Second

// Discard removes an image nobody refers to any more, on its own time: a
// removal that fails is logged, and leaves the blob behind.
func (s Store) Discard(name string) {
	if name == "" || s.Blobs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), imageDeleteTimeout)
	defer cancel()
	if err := s.Blobs.Delete(ctx, name); err != nil {
		s.Log.Warn().Err(err).Str("image", name).Msg("remove a VM image")
	}
}
