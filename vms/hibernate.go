package vms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// A VM's identity and files belong to the store; a sidecar only runs it for
// a while. Hibernate captures a running VM's root filesystem into the image
// store (the snapshot format of snapshot.go), records the image, and
// disposes the engine's VM, freeing its sidecar slot. Wake places the VM
// again, on this node, from that image and under the same id: its record,
// labels, bindings, schedules and previews never left the store. Any call
// that needs the running VM wakes it (lookup); reading the record does not.

// ImageStore holds the root filesystems of hibernated VMs, each a blob under
// the name Put chose. The snapshots' blob store serves: a data directory,
// or PostgreSQL large objects that every node reads.
type ImageStore interface {
	Put(ctx context.Context, r io.Reader) (name string, size int64, err error)
	Open(ctx context.Context, name string) (io.ReadSeekCloser, error)
	Delete(ctx context.Context, name string) error
}

// Why a VM hibernated or woke, as its state history and events give it.
const (
	ReasonRequest  = "request"  // POST .../hibernate or .../wake, or a call that needed the VM
	ReasonIdle     = "idle"     // idleTimeoutSeconds passed with onIdle hibernate
	ReasonDrain    = "drain"    // the node drains
	ReasonShutdown = "shutdown" // the gateway stops
)

// DefaultWakeTimeout bounds a wake by default (--wake-timeout).
const DefaultWakeTimeout = 30 * time.Second

// imageDeleteTimeout bounds the removal of an image nobody needs any more.
const imageDeleteTimeout = 30 * time.Second

// vmImage is a captured root filesystem in the image store.
type vmImage struct {
	name  string
	bytes int64
}

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
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil || lv.tenantID != tenantID {
		rec, err := s.store.GetVM(ctx, tenantID, id)
		if err != nil {
			return gateway.VM{}, err
		}
		if rec.State == gateway.VMHibernated {
			return rec, nil
		}
		return gateway.VM{}, stateConflict(rec)
	}
	if err := s.hibernate(ctx, lv, reason); err != nil {
		return gateway.VM{}, err
	}
	return s.store.GetVM(ctx, tenantID, id)
}

// stateConflict is the error of a call the VM's state does not allow.
func stateConflict(rec gateway.VM) error {
	e := gateway.Errorf(gateway.CodeConflict, "the VM is %s", rec.State)
	if rec.State.Final() {
		e.Err = ErrVMEnded
	}
	return e.WithDetail("state", rec.State).WithDetail("reason", rec.Reason)
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
	lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventState, Time: s.cfg.Now().UTC(), State: gateway.VMHibernating, Reason: reason})
	img, err := s.capture(ctx, lv)
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
		lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventState, Time: s.cfg.Now().UTC(), State: gateway.VMReady, Reason: "hibernation failed"})
		return err
	}
	lv.mu.Lock()
	lv.image = &img
	lv.mu.Unlock()
	s.endVM(context.WithoutCancel(ctx), lv, gateway.VMHibernated, reason, true)
	return nil
}

// capture writes lv's root filesystem into the image store.
func (s *Service) capture(ctx context.Context, lv *liveVM) (vmImage, error) {
	f := &Files{vm: lv.vm, vmID: lv.id, done: lv.hold(s.cfg.Now())}
	defer f.Release()
	// WriteRoot writes into a pipe that the image store reads; this
	// function owns the writer's goroutine and waits for it.
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := f.WriteRoot(ctx, pw)
		pw.CloseWithError(err)
	})
	name, size, err := s.cfg.Images.Put(ctx, pr)
	pr.CloseWithError(errors.New("vms: the image store stopped reading"))
	wg.Wait()
	if err != nil {
		var ge *gateway.Error
		if errors.As(err, &ge) {
			return vmImage{}, err
		}
		return vmImage{}, gateway.Wrap(gateway.CodeUnavailable, err, "the VM's image could not be stored")
	}
	return vmImage{name: name, bytes: size}, nil
}

// recordHibernated records the end of lv as hibernated with its image. A
// record that fails leaves the VM without its engine VM and without a
// usable image: it is lost, and the image goes.
func (s *Service) recordHibernated(ctx context.Context, lv *liveVM, reason string) error {
	lv.mu.Lock()
	img := lv.image
	lv.mu.Unlock()
	if img == nil {
		return fmt.Errorf("vms: vm %s hibernated without an image", lv.id)
	}
	if _, err := s.store.HibernateVM(ctx, lv.id, img.name, img.bytes, reason); err != nil {
		s.deleteImage(img.name)
		if _, lerr := s.store.SetVMState(ctx, lv.id, gateway.VMLost, "its hibernation could not be recorded", ""); lerr != nil {
			s.log.Error().Err(lerr).Str("vm", lv.id).Msg("record a lost hibernation")
		}
		return err
	}
	return nil
}

// deleteImage removes an image nobody refers to any more, on its own time.
func (s *Service) deleteImage(name string) {
	if name == "" || s.cfg.Images == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), imageDeleteTimeout)
	defer cancel()
	if err := s.cfg.Images.Delete(ctx, name); err != nil {
		s.log.Warn().Err(err).Str("image", name).Msg("remove a VM image")
	}
}

// Wake runs a tenant's hibernated VM again and returns its record. A VM that
// runs already is returned as it is; a wake waits at most the service's
// WakeTimeout, and a VM in a state that cannot wake is CodeConflict.
func (s *Service) Wake(ctx context.Context, tenantID, id, reason string) (gateway.VM, error) {
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
	rc, err := s.cfg.Images.Open(ctx, rec.Image)
	if err != nil {
		return fail(gateway.Wrap(gateway.CodeUnavailable, err, "the VM's image could not be opened"))
	}
	root, err := readRoot(rc)
	if err != nil || len(root.deferred) == 0 {
		_ = rc.Close()
	} else {
		root.src = rc
	}
	if err != nil {
		return fail(gateway.Wrap(gateway.CodeInternal, err, "the VM's image could not be read"))
	}
	defer root.close()
	opts.RootSnapshot = root.entries
	vm, lease, err := s.place(ctx, tenant, rec.Spec, opts)
	if err != nil {
		return fail(err)
	}
	made.vm, made.lease = vm, lease
	if err := s.fillSnapshot(ctx, vm, root); err != nil {
		return fail(err)
	}
	if su := s.vmSetup(); su != nil {
		made.setUp = su
		if err := su.SetUpVM(ctx, rec, BindingHost{vm}); err != nil {
			return fail(err)
		}
	}
	lv := s.newLiveVM(rec, vm, lease)
	wctx, wcancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	_, image, err := s.store.WokeVM(wctx, id, lease.SidecarID(), reason)
	wcancel()
	if err != nil {
		return fail(err)
	}
	if !s.goLive(lv, reason) {
		// Close began after the claim: the VM goes back to sleep, with the
		// image it woke from.
		wctx, wcancel := context.WithTimeout(context.Background(), storeWriteTimeout)
		defer wcancel()
		lv.image = &vmImage{name: image, bytes: rec.ImageBytes}
		if _, err := s.store.SetVMState(wctx, id, gateway.VMHibernating, ReasonShutdown, ""); err != nil {
			s.log.Error().Err(err).Str("vm", id).Msg("hibernate a VM woken during shutdown")
		}
		s.endVM(wctx, lv, gateway.VMHibernated, ReasonShutdown, true)
		return nil, errShuttingDown()
	}
	s.deleteImage(image)
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
	if _, err := s.store.SetVMState(ctx, made.rec.ID, gateway.VMHibernated, "wake failed: "+gateway.ErrorMessage(cause), ""); err != nil {
		s.log.Error().Err(err).Str("vm", made.rec.ID).Msg("record a failed wake")
	}
}
