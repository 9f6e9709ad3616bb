// Package snapshots keeps tenants' root-filesystem snapshots: it captures a
// VM's tree (vms.Files.WriteRoot) into a blob store, records the snapshot
// in the store within the tenant's byte quota, opens snapshots for the VMs
// created from them on any node, and forks a VM into several.
package snapshots

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/archive"
	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// Store is what the service keeps in the database.
type Store interface {
	CreateSnapshotWithinQuota(ctx context.Context, s gateway.Snapshot, maxBytes int64) (gateway.Snapshot, error)
	SnapshotBytes(ctx context.Context, tenantID string) (int64, error)
	GetSnapshot(ctx context.Context, tenantID, id string) (gateway.Snapshot, error)
	ListSnapshots(ctx context.Context, f gateway.SnapshotFilter) (gateway.Page[gateway.Snapshot], error)
	DeleteSnapshot(ctx context.Context, tenantID, id string) (gateway.Snapshot, error)
}

// Blobs holds the bytes of snapshots: the blob store of the VMs' images
// (images.DirBlobs, images.LargeObjectBlobs). What Open returns seeks, so
// that a VM created from a snapshot reads its bytes once
// (vms.SnapshotSource).
type Blobs = images.Blobs

// VMs is what the service needs of the vms service.
type VMs interface {
	Get(ctx context.Context, tenantID, id string) (gateway.VM, error)
	Files(ctx context.Context, tenantID, vmID string) (*vms.Files, error)
	Create(ctx context.Context, tenant gateway.Tenant, spec gateway.VMSpec) (gateway.VM, error)
	Delete(ctx context.Context, tenantID, id string) (gateway.VM, bool, error)
}

// MaxFork is the most VMs one fork creates.
const MaxFork = 16

// cleanupTimeout bounds the removals the service makes on its own behalf
// after a request failed or went away.
const cleanupTimeout = 30 * time.Second

// Config configures the service.
type Config struct {
	Log zerolog.Logger
	// NodeID names this node in the snapshots it takes.
	NodeID string
	// Events, when set, is told of each snapshot made, for webhooks.
	Events EventSink
}

// EventSink is told of the events webhooks deliver (notify.Service).
type EventSink interface {
	Publish(ctx context.Context, evs ...gateway.Event) error
}

// Service captures, keeps and restores snapshots.
type Service struct {
	cfg   Config
	store Store
	blobs Blobs
	vms   VMs
}

// New returns a service.
func New(cfg Config, store Store, blobs Blobs, vms VMs) *Service {
	return &Service{cfg: cfg, store: store, blobs: blobs, vms: vms}
}

// Create snapshots a tenant's live VM: its root filesystem is captured into
// the blob store, then recorded within the tenant's MaxSnapshotBytes quota
// (a snapshot that would pass it is removed again and refused with
// CodeResourceExhausted).
func (s *Service) Create(ctx context.Context, tenant gateway.Tenant, vmID string) (gateway.Snapshot, error) {
	quota := tenant.Quotas.MaxSnapshotBytes
	if quota > 0 {
		// Refused before the capture when nothing is left; the record's
		// transaction decides for the snapshot that was captured.
		used, err := s.store.SnapshotBytes(ctx, tenant.ID)
		if err != nil {
			return gateway.Snapshot{}, err
		}
		if used >= quota {
			return gateway.Snapshot{}, gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s's snapshots hold %d bytes, its quota", tenant.ID, used).WithDetail("quota", "maxSnapshotBytes")
		}
	}
	f, err := s.vms.Files(ctx, tenant.ID, vmID)
	if err != nil {
		return gateway.Snapshot{}, err
	}
	defer f.Release()

	// The capture streams into the blob store (images.Put).
	var st archive.Stats
	name, size, perr := images.Put(ctx, s.blobs, func(w io.Writer) error {
		var err error
		st, err = f.WriteRoot(ctx, w)
		return err
	})
	if perr != nil {
		// The capture's own error is the one worth reporting when it
		// ended the stream.
		var ge *gateway.Error
		if errors.As(perr, &ge) {
			return gateway.Snapshot{}, perr
		}
		return gateway.Snapshot{}, gateway.Wrap(gateway.CodeUnavailable, perr, "the snapshot could not be stored")
	}
	snap := gateway.Snapshot{TenantID: tenant.ID, VMID: vmID, Bytes: size, Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Node: s.cfg.NodeID, Blob: name}
	out, err := s.store.CreateSnapshotWithinQuota(ctx, snap, quota)
	if err != nil {
		s.deleteBlob(ctx, name)
		return gateway.Snapshot{}, err
	}
	if s.cfg.Events != nil {
		ev := gateway.NewEvent(gateway.EventSnapshotReady, tenant.ID, vmID, out.CreatedAt,
			gateway.SnapshotReadyData{VMID: vmID, SnapshotID: out.ID, Bytes: out.Bytes})
		if err := s.cfg.Events.Publish(context.WithoutCancel(ctx), ev); err != nil {
			s.cfg.Log.Error().Err(err).Str("snapshot", out.ID).Msg("write an event to the webhooks' outbox")
		}
	}
	return out, nil
}

// Get returns a tenant's snapshot.
func (s *Service) Get(ctx context.Context, tenantID, id string) (gateway.Snapshot, error) {
	return s.store.GetSnapshot(ctx, tenantID, id)
}

// List returns a page of a tenant's snapshots.
func (s *Service) List(ctx context.Context, f gateway.SnapshotFilter) (gateway.Page[gateway.Snapshot], error) {
	return s.store.ListSnapshots(ctx, f)
}

// Delete removes a tenant's snapshot, its record first, then its bytes. A
// VM created from it keeps its tree.
func (s *Service) Delete(ctx context.Context, tenantID, id string) error {
	snap, err := s.store.DeleteSnapshot(ctx, tenantID, id)
	if err != nil {
		return err
	}
	s.deleteBlob(ctx, snap.Blob)
	return nil
}

// deleteBlob removes stored bytes, even when ctx ended, within a bounded
// time; what it cannot remove is logged.
func (s *Service) deleteBlob(ctx context.Context, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.blobs.Delete(dctx, name); err != nil {
		s.cfg.Log.Error().Err(err).Str("blob", name).Msg("remove snapshot bytes")
	}
}

// Fork creates count VMs from a fresh snapshot of a tenant's live VM, each
// with the VM's spec: their files are the VM's, byte for byte; its
// processes, shells and sessions are not carried over. The snapshot is
// removed once the VMs exist (it counts against the byte quota meanwhile).
// The VMs are created at once, each admitted by the VM quota's transaction;
// if any create fails, the VMs already created are deleted and the first
// error is returned.
func (s *Service) Fork(ctx context.Context, tenant gateway.Tenant, vmID string, count int) ([]gateway.VM, error) {
	if count < 1 || count > MaxFork {
		return nil, gateway.Errorf(gateway.CodeInvalidArgument, "count must be between 1 and %d", MaxFork).WithDetail("field", "count")
	}
	if maxVMs := tenant.Quotas.MaxVMs; maxVMs > 0 && count > maxVMs {
		return nil, gateway.Errorf(gateway.CodeResourceExhausted, "a fork of %d VMs passes tenant %s's quota of %d VMs", count, tenant.ID, maxVMs).WithDetail("quota", "maxVms")
	}
	src, err := s.vms.Get(ctx, tenant.ID, vmID)
	if err != nil {
		return nil, err
	}
	snap, err := s.Create(ctx, tenant, vmID)
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := s.Delete(dctx, tenant.ID, snap.ID); err != nil {
			s.cfg.Log.Error().Err(err).Str("snapshot", snap.ID).Msg("remove a fork's snapshot")
		}
	}()
	spec := src.Spec
	spec.FromSnapshot = snap.ID
	out := make([]gateway.VM, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.vms.Create(ctx, tenant, spec)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, vm := range out {
			if errs[i] == nil {
				s.deleteVM(ctx, tenant.ID, vm.ID)
			}
		}
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
	}
	return out, nil
}

// deleteVM disposes of a VM a failed fork created, within a bounded time.
func (s *Service) deleteVM(ctx context.Context, tenantID, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, _, err := s.vms.Delete(dctx, tenantID, id); err != nil {
		s.cfg.Log.Error().Err(err).Str("vm", id).Msg("dispose a VM of a failed fork")
	}
}

// Source opens stored snapshots: the vms service's SnapshotSource, which
// needs only the store and the blobs (so it exists before the vms service
// does).
type Source struct {
	store Store
	blobs Blobs
}

// NewSource returns the snapshots of store whose bytes blobs holds.
func NewSource(store Store, blobs Blobs) Source { return Source{store: store, blobs: blobs} }

// OpenSnapshot opens the bytes of a tenant's snapshot: the vms service
// reads them to create a VM from it, on whichever node that happens.
func (s Source) OpenSnapshot(ctx context.Context, tenantID, id string) (io.ReadSeekCloser, error) {
	snap, err := s.store.GetSnapshot(ctx, tenantID, id)
	if err != nil {
		if gateway.ErrorCode(err) == gateway.CodeNotFound {
			return nil, gateway.Errorf(gateway.CodeNotFound, "snapshot %s not found", id).WithDetail("field", "fromSnapshot")
		}
		return nil, err
	}
	rc, err := s.blobs.Open(ctx, snap.Blob)
	if err != nil {
		return nil, gateway.Wrap(gateway.CodeUnavailable, err, "the bytes of snapshot %s cannot be read", id)
	}
	return rc, nil
}
