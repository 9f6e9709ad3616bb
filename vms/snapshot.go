package vms

import (
	"context"
	"io"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/archive"
	"github.com/agentos-gateway/agentos-gateway/images"
)

// A root-filesystem snapshot is a tar stream of the VM's whole tree, the
// format of images (images/root.go). A VM created from one gets the tree
// as its root filesystem in place of the engine's base layer: the
// directories, symlinks and the files that fit one create frame travel in
// the create request, larger files are written with chunked file calls
// once the VM runs (images.Store.Fill).

// SnapshotSource opens the stored bytes of a tenant's snapshot, for Create
// with VMSpec.FromSnapshot. The reader seeks, so that a create reads the
// bytes once: it skips the files too large for the create frame while it
// reads the rest, and comes back for them once the VM runs.
type SnapshotSource interface {
	OpenSnapshot(ctx context.Context, tenantID, id string) (io.ReadSeekCloser, error)
}

// WriteRoot streams the VM's root filesystem as a snapshot tar into w and
// counts what it wrote.
func (f *Files) WriteRoot(ctx context.Context, w io.Writer) (archive.Stats, error) {
	return images.Store{EngineError: EngineError}.WriteRoot(ctx, f.vm, w)
}

// readSnapshot reads the snapshot a VM is created from (none: id empty).
// The snapshot stays open in the result while files remain for
// images.Store.Fill; the caller closes the result.
func (s *Service) readSnapshot(ctx context.Context, tenantID, id string) (images.Root, error) {
	if id == "" {
		return images.Root{}, nil
	}
	if s.cfg.Snapshots == nil {
		return images.Root{}, gateway.Errorf(gateway.CodeInvalidArgument, "this gateway keeps no snapshots").WithDetail("field", "fromSnapshot")
	}
	rc, err := s.cfg.Snapshots.OpenSnapshot(ctx, tenantID, id)
	if err != nil {
		return images.Root{}, err
	}
	return images.OpenRoot(rc)
}
