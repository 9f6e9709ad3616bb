package vms

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
)

// A VM's identity and files belong to the store; a sidecar only runs it for
// a while. Hibernate captures a running VM's root filesystem into the image
// store (images.Store.Capture, checked against the live tree), records the image, and
// disposes the engine's VM, freeing its sidecar slot. Wake places the VM
// again, on this node, from that image and under the same id: its record,
// labels, bindings, schedules and previews never left the store. Any call
// that needs the running VM wakes it (lookup); reading the record does not.

// ImageStore holds the root filesystems of hibernated VMs and the layers of
// checkpoints, each a blob under the name Put chose: the snapshots' blob
// store (images.DirBlobs, or images.LargeObjectBlobs that every node reads).
type ImageStore = images.Blobs

// Why a VM hibernated or woke, as its state history and events give it.
const (
	ReasonRequest  = "request"  // POST .../hibernate or .../wake, or a call that needed the VM
	ReasonIdle     = "idle"     // idleTimeoutSeconds passed with onIdle hibernate
	ReasonDrain    = "drain"    // the node drains
	ReasonShutdown = "shutdown" // the gateway stops
)

// DefaultWakeTimeout bounds a wake by default (--wake-timeout).
const DefaultWakeTimeout = 30 * time.Second

// wakeCall is a wake in progress: the requests that need the VM meanwhile
// wait for the same one.
type wakeCall struct {
	done chan struct{}
	lv   *liveVM
	err  error
}

// errHibernating is the cause of the conflict of a hibernation that another
// one, or the VM's end, is ahead of.
var errHibernating = errors.New("vms: the VM is already hibernating or ending")

func errNoImages() error {
	return gateway.Errorf(gateway.CodeUnavailable, "this gateway keeps no VM images, so its VMs cannot hibernate")
}

// Hibernate captures a tenant's running VM into the store and stops it: its
// processes and shells end, its agent sessions and everything recorded of it
// stay, and it wakes under the same id on its next use. A VM already
// hibernated is returned as it is; one being created, woken or disposed is
// CodeConflict with its state.
func (s *Service) Hibernate(ctx context.Context, tenantID, id, reason string) (gateway.VM, error) {
	if s.cfg.Images == nil {
		return gateway.VM{}, errNoImages()
	}
	lv := s.liveOf(tenantID, id)
	if lv == nil {
		return s.storedOrConflict(ctx, tenantID, id)
	}
	if err := s.hibernate(ctx, lv, reason); err != nil {
		return gateway.VM{}, err
	}
	return s.store.GetVM(ctx, tenantID, id)
}

// storedOrConflict answers a call on a VM this node does not run that
// needs nothing done to a hibernated one (its files are all in the store):
// its record, or the conflict of its state.
func (s *Service) storedOrConflict(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	rec, err := s.store.GetVM(ctx, tenantID, id)
	if err != nil {
		return gateway.VM{}, err
	}
	if rec.State == gateway.VMHibernated {
		return rec, nil
	}
	return gateway.VM{}, stateConflict(rec)
}

// stateConflict is the error of a call the VM's state does not allow.
func stateConflict(rec gateway.VM) error {
	e := gateway.Errorf(gateway.CodeConflict, "the VM is %s", rec.State)
	if rec.State.Final() {
		e.Err = ErrVMEnded
	}
	e = e.WithDetail("state", rec.State)
	if rec.Reason != "" {
		e = e.WithDetail("reason", rec.Reason) // never an empty reason
	}
	return e
}

// hibernate captures lv's root filesystem and ends it as hibernated. While
// the capture runs the VM serves calls as before; what its processes write
// after the capture began is not kept. A capture that fails leaves the VM
// running and ready.
func (s *Service) hibernate(ctx context.Context, lv *liveVM, reason string) error {
	lv.mu.Lock()
	if lv.ended || lv.hibernating {
		lv.mu.Unlock()
		return gateway.Wrap(gateway.CodeConflict, errHibernating, "the VM is already hibernating or ending").WithDetail("state", gateway.VMHibernating)
	}
	lv.hibernating = true
	lv.mu.Unlock()
	undo := func() {
		lv.mu.Lock()
		lv.hibernating = false
		lv.mu.Unlock()
	}
	if _, err := s.store.SetVMState(ctx, lv.id, gateway.VMHibernating, reason, ""); err != nil {
		undo()
		return err
	}
	s.stateEvent(lv, gateway.VMHibernating, reason)
	start := time.Now()
	img, err := s.capture(ctx, lv, reason)
	captured := time.Since(start)
	if err != nil {
		// The VM still runs, so its record says so again, whatever the
		// caller does meanwhile.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		_, serr := s.store.SetVMState(wctx, lv.id, gateway.VMReady, "hibernation failed: "+gateway.ErrorMessage(err), "")
		cancel()
		if serr != nil {
			s.log.Error().Err(serr).Str("vm", lv.id).Msg("record a failed hibernation")
		}
		undo()
		s.stateEvent(lv, gateway.VMReady, "hibernation failed")
		return err
	}
	lv.mu.Lock()
	if lv.ended {
		// A delete, or the sidecar's death, ended the VM meanwhile.
		lv.mu.Unlock()
		s.images.Discard(img.Name)
		return gateway.Wrap(gateway.CodeConflict, errHibernating, "the VM ended while it hibernated").WithDetail("state", gateway.VMDisposed)
	}
	lv.image = &img
	// The agent sessions' database outlives the engine's VM, to be stored
	// once the engine has closed it (recordHibernated).
	lv.sessionsDB = lv.vm.KeepDatabase()
	lv.mu.Unlock()
	s.endVM(context.WithoutCancel(ctx), lv, gateway.VMHibernated, reason, true)
	s.log.Info().Str("vm", lv.id).Str("reason", reason).Int64("imageBytes", img.Bytes).
		Dur("capture", captured).Dur("total", time.Since(start)).Msg("vm hibernated")
	return nil
}

// capture writes lv's root filesystem into the image store and checks
// the image against the live tree (images/verify.go). An image that leaves
// out what the VM holds is deleted and the capture fails, so that the VM
// keeps running with its files, except when the gateway stops
// (ReasonShutdown): the engine's VM ends then whatever the capture did, and
// an image that lacks some files keeps the others.
func (s *Service) capture(ctx context.Context, lv *liveVM, reason string) (images.Image, error) {
	done := lv.hold(s.cfg.Now())
	defer done()
	c, err := s.images.Capture(ctx, lv.vm)
	if err != nil {
		return images.Image{}, err
	}
	if c.ShadowUnchecked {
		s.log.Warn().Str("vm", lv.id).Msg("the VM's files exceed one export frame: the engine's host copies were not checked, so a guest's edits to files the files API wrote may be lost")
	}
	if ms := c.Mismatches; len(ms) > 0 {
		ev := s.log.Error().Str("vm", lv.id).Str("reason", reason).Int("mismatches", len(ms)).Strs("first", images.FirstMismatches(ms, 10))
		if reason == ReasonShutdown {
			ev.Msg("the VM's image does not hold all of its live tree; stored anyway, as the gateway stops")
			return c.Image, nil
		}
		ev.Msg("the VM's image does not hold all of its live tree; the VM keeps running")
		s.images.Discard(c.Name)
		return images.Image{}, gateway.Errorf(gateway.CodeInternal,
			"the VM's image left out %d entries of its live tree (%s), so the VM keeps running with its files; this is a gateway bug, please report it", len(ms), ms[0])
	}
	return c.Image, nil
}

// recordHibernated stores the disposed VM's session database, and records
// the end of lv as hibernated with its images. A database that cannot be
// stored costs the agents their sessions, not the VM its files. A record
// that fails leaves the VM without its engine VM and without a usable
// image: it is lost, and the images go.
func (s *Service) recordHibernated(ctx context.Context, lv *liveVM, reason string) error {
	lv.mu.Lock()
	img, db := lv.image, lv.sessionsDB
	lv.mu.Unlock()
	if img == nil {
		return fmt.Errorf("vms: vm %s hibernated without an image", lv.id)
	}
	var sessions string
	if db != "" {
		var err error
		if sessions, err = s.images.PutDatabase(ctx, db); err != nil {
			s.log.Error().Err(err).Str("vm", lv.id).Msg("store the agent sessions of a hibernating vm; they are lost")
		}
		for _, f := range agentos.DatabaseFiles(db) {
			_ = os.Remove(f)
		}
	}
	_, dropped, err := s.store.HibernateVM(ctx, lv.id, img.Name, img.Bytes, sessions, reason)
	if err != nil {
		s.images.Discard(img.Name)
		s.images.Discard(sessions)
		if _, lerr := s.store.SetVMState(ctx, lv.id, gateway.VMLost, "its hibernation could not be recorded", ""); lerr != nil {
			s.log.Error().Err(lerr).Str("vm", lv.id).Msg("record a lost hibernation")
		}
		return err
	}
	// The image supersedes the checkpoint.
	for _, name := range dropped {
		s.images.Discard(name)
	}
	return nil
}

// Wake runs a tenant's hibernated VM again, or restores a lost one from its
// checkpoint, and returns its record. A VM that runs already is returned as
// it is; a wake waits at most the service's
// WakeTimeout, and a VM in a state that cannot wake is CodeConflict.
func (s *Service) Wake(ctx context.Context, tenantID, id, reason string) (gateway.VM, error) {
	if s.liveOf(tenantID, id) == nil {
		rec, err := s.store.GetVM(ctx, tenantID, id)
		if err != nil {
			return gateway.VM{}, err
		}
		if rec.Restorable() {
			// Only an explicit wake restores a lost VM: its files are as
			// its last checkpoint left them, which its owner must know.
			if _, err := s.wake(ctx, rec, ReasonRestore); err != nil {
				return gateway.VM{}, err
			}
			return s.store.GetVM(ctx, tenantID, id)
		}
	}
	if _, err := s.lookupReason(ctx, tenantID, id, reason); err != nil {
		return gateway.VM{}, err
	}
	return s.store.GetVM(ctx, tenantID, id)
}

// wake joins the wake of rec's VM in progress on this node, or starts one.
// The wake runs on a goroutine of the service, bounded by WakeTimeout and
// not by ctx, so that the callers that share it do not depend on the first
// one staying; each caller waits at most until its own ctx ends.
func (s *Service) wake(ctx context.Context, rec gateway.VM, reason string) (*liveVM, error) {
	if s.cfg.Images == nil {
		return nil, errNoImages()
	}
	s.mu.Lock()
	c := s.waking[rec.ID]
	if c == nil {
		switch {
		case s.closing:
			s.mu.Unlock()
			return nil, errShuttingDown()
		case s.cordoned:
			s.mu.Unlock()
			return nil, gateway.Errorf(gateway.CodeUnavailable, "node %s is draining and wakes no VMs", s.cfg.NodeID).WithDetail("node", s.cfg.NodeID)
		}
		c = &wakeCall{done: make(chan struct{})}
		s.waking[rec.ID] = c
		// Counted as a create, so that a drain waiting for this node's
		// VMs to be gone sees this one coming.
		s.creatingCount++
		s.goLocked(func() {
			lv, err := s.runWake(rec.TenantID, rec.ID, reason)
			s.mu.Lock()
			delete(s.waking, rec.ID)
			s.creatingCount--
			c.lv, c.err = lv, err
			s.mu.Unlock()
			close(c.done)
		})
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		if c.err != nil {
			return nil, c.err
		}
		c.lv.touch(s.cfg.Now())
		return c.lv, nil
	case <-ctx.Done():
		return nil, gateway.Wrap(gateway.CodeUnavailable, ctx.Err(), "the VM is still waking")
	}
}

// runWake claims the hibernated VM for this node, places it from its image,
// and makes it live: the steps of Create, with the record's spec and the
// image for a root filesystem. A wake that fails leaves the VM hibernated
// with its image, and says why.
func (s *Service) runWake(tenantID, id, reason string) (*liveVM, error) {
	// Close ends a wake in progress (s.life) rather than waiting out its
	// timeout.
	ctx, cancel := context.WithTimeout(s.life, s.cfg.WakeTimeout)
	defer cancel()
	tenant, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.ClaimWake(ctx, tenantID, id, s.cfg.NodeID, tenant.Quotas.MaxVMs)
	if err != nil {
		return nil, err
	}
	made := halfMade{rec: rec}
	fail := func(err error) (*liveVM, error) {
		if ctx.Err() != nil && gateway.ErrorCode(err) != gateway.CodeUnavailable {
			err = gateway.Wrap(gateway.CodeUnavailable, err, "the VM did not wake within %s", s.cfg.WakeTimeout)
		}
		s.undoWake(made, err)
		return nil, err
	}
	opts, err := vmOptions(rec.Spec, s.cfg)
	if err != nil {
		return fail(err)
	}
	// A hibernated VM wakes from its image; a lost one is restored from the
	// layers of its checkpoint, merged into one image first.
	restoring := rec.Image == ""
	var rc io.ReadSeekCloser
	if restoring {
		rc, err = s.images.Restore(ctx, rec.Checkpoints, cmp.Or(s.cfg.DataDir, os.TempDir()))
	} else {
		rc, err = s.cfg.Images.Open(ctx, rec.Image)
	}
	if err != nil {
		return fail(gateway.Wrap(gateway.CodeUnavailable, err, "the VM's image could not be opened"))
	}
	root, err := images.OpenRoot(rc)
	if err != nil {
		return fail(gateway.Wrap(gateway.CodeInternal, err, "the VM's image could not be read"))
	}
	defer root.Close()
	opts.RootSnapshot = root.Entries
	if rec.SessionsImage != "" {
		// The agent sessions' database comes back with the VM: the engine
		// knows its sessions, and starts an agent for one when prompted.
		db, err := s.images.RestoreDatabase(ctx, rec.SessionsImage, cmp.Or(s.cfg.DataDir, os.TempDir()))
		if err != nil {
			return fail(gateway.Wrap(gateway.CodeUnavailable, err, "the VM's agent sessions could not be restored"))
		}
		opts.DatabaseFile = db
		defer func() {
			// The engine's VM owns the file once created; before, it is
			// this wake's.
			if made.vm == nil {
				for _, f := range agentos.DatabaseFiles(db) {
					_ = os.Remove(f)
				}
			}
		}()
	}
	if err := s.placeRoot(ctx, tenant, rec, opts, root, &made); err != nil {
		return fail(err)
	}
	s.remount(ctx, made.vm, rec)
	vm, lease := made.vm, made.lease
	lv := s.newLiveVM(rec, vm, lease)
	wctx, wcancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	_, dropped, err := s.store.WokeVM(wctx, id, lease.SidecarID(), reason)
	wcancel()
	if err != nil {
		return fail(err)
	}
	if !s.goLive(lv, reason) {
		wctx, wcancel := context.WithTimeout(context.Background(), storeWriteTimeout)
		defer wcancel()
		if restoring {
			// Close began after the claim: the VM is lost again, and
			// still has its checkpoint.
			s.endVM(wctx, lv, gateway.VMLost, "the gateway shut down while the VM was restored", true)
			return nil, errShuttingDown()
		}
		// Close began after the claim: the VM goes back to sleep, with the
		// image it woke from.
		lv.image = &images.Image{Name: rec.Image, Bytes: rec.ImageBytes}
		lv.sessionsDB = vm.KeepDatabase()
		s.images.Discard(rec.SessionsImage)
		if _, err := s.store.SetVMState(wctx, id, gateway.VMHibernating, ReasonShutdown, ""); err != nil {
			s.log.Error().Err(err).Str("vm", id).Msg("hibernate a VM woken during shutdown")
		}
		s.endVM(wctx, lv, gateway.VMHibernated, ReasonShutdown, true)
		return nil, errShuttingDown()
	}
	for _, image := range dropped {
		s.images.Discard(image)
	}
	s.log.Info().Str("vm", id).Str("reason", reason).Msg("vm woke")
	return lv, nil
}

// undoWake takes back a wake that failed: the engine's VM, the setup and the
// lease as undoCreate does, and the record goes back to hibernated, with
// its image, saying why.
func (s *Service) undoWake(made halfMade, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	s.undoPlacement(ctx, made, cause)
	back := gateway.VMHibernated
	if made.rec.Image == "" {
		// A restore that failed leaves the VM lost, with its checkpoint.
		back = gateway.VMLost
	}
	if _, err := s.store.SetVMState(ctx, made.rec.ID, back, "wake failed: "+gateway.ErrorMessage(cause), ""); err != nil {
		s.log.Error().Err(err).Str("vm", made.rec.ID).Msg("record a failed wake")
	}
}

// Patch is a change of a VM's settings (PATCH /v1/vms/{vm}): a nil field is
// left as it is; a label set to nil is removed.
type Patch struct {
	Labels             map[string]*string
	IdleTimeoutSeconds *int
	OnIdle             *string
	CheckpointSeconds  *int
	// Permissions replaces the capabilities it names (a nil value: back
	// to allow); a running VM gets the result at once.
	Permissions map[string]any
}

// Update applies p to a tenant's VM, running or hibernated, and returns the
// record: the labels, the idle timeout and what becomes of the VM then, and
// the permissions, which apply at once to a VM this node runs. The labels
// after the change must be at most gateway.MaxLabels.
func (s *Service) Update(ctx context.Context, tenantID, id string, p Patch) (gateway.VM, error) {
	liveVM := func() *liveVM {
		s.mu.Lock()
		defer s.mu.Unlock()
		if lv := s.live[id]; lv != nil && lv.tenantID == tenantID {
			return lv
		}
		return nil
	}
	held := liveVM()
	if held != nil && p.Permissions != nil {
		// The engine and the record change together, one change at a time.
		held.permMu.Lock()
		defer held.permMu.Unlock()
	}
	var before map[string]any
	var policy *protocol.PermissionsPolicy
	rec, err := s.store.UpdateVMSpec(ctx, tenantID, id, func(spec *gateway.VMSpec) error {
		for name, v := range p.Labels {
			if v == nil {
				delete(spec.Labels, name)
				continue
			}
			if spec.Labels == nil {
				spec.Labels = map[string]string{}
			}
			spec.Labels[name] = *v
		}
		if len(spec.Labels) == 0 {
			spec.Labels = nil
		}
		if len(spec.Labels) > gateway.MaxLabels {
			return gateway.Errorf(gateway.CodeInvalidArgument, "the VM would carry %d labels; at most %d are allowed", len(spec.Labels), gateway.MaxLabels).WithDetail("field", "labels")
		}
		if p.IdleTimeoutSeconds != nil {
			spec.IdleTimeoutSeconds = *p.IdleTimeoutSeconds
		}
		if p.OnIdle != nil {
			spec.OnIdle = *p.OnIdle
		}
		if p.CheckpointSeconds != nil {
			spec.CheckpointSeconds = *p.CheckpointSeconds
		}
		if p.Permissions != nil {
			before = maps.Clone(spec.Permissions)
			for name, v := range p.Permissions {
				if v == nil {
					delete(spec.Permissions, name)
					continue
				}
				if spec.Permissions == nil {
					spec.Permissions = map[string]any{}
				}
				spec.Permissions[name] = v
			}
			if len(spec.Permissions) == 0 {
				spec.Permissions = nil
			}
			var err error
			if policy, err = vmspec.Permissions(spec.Permissions); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return gateway.VM{}, err
	}
	// The VM may have woken here since: it gets the record's settings.
	lv := liveVM()
	if lv == nil {
		return rec, nil
	}
	if policy != nil {
		if lv != held {
			lv.permMu.Lock()
			defer lv.permMu.Unlock()
		}
		if err := lv.vm.Configure(ctx, agentos.ConfigureOptions{Permissions: policy}); err != nil {
			// The VM runs with its permissions as they were: so must its
			// record say, or a wake would change them behind its owner.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
			defer cancel()
			if _, uerr := s.store.UpdateVMSpec(uctx, tenantID, id, func(spec *gateway.VMSpec) error {
				spec.Permissions = before
				return nil
			}); uerr != nil {
				s.log.Error().Err(uerr).Str("vm", id).Msg("the VM's record keeps permissions its engine refused")
			}
			return gateway.VM{}, fmt.Errorf("vms: apply permissions: %w", err)
		}
	}
	lv.mu.Lock()
	lv.idle = time.Duration(rec.Spec.IdleTimeoutSeconds) * time.Second
	lv.onIdle = cmp.Or(rec.Spec.OnIdle, s.cfg.OnIdle)
	lv.ckpt.every = checkpointEvery(rec.Spec)
	lv.mu.Unlock()
	return rec, nil
}
