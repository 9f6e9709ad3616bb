package agentos

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Mounts lists the VM's filesystem mounts.
func (vm *VM) Mounts(ctx context.Context) ([]protocol.MountInfo, error) {
	resp, err := vm.call(ctx, protocol.ListMountsRequest{})
	if err != nil {
		return nil, fmt.Errorf("agentos: list mounts: %w", err)
	}
	m, ok := resp.(protocol.ListMountsResponse)
	if !ok {
		return nil, unexpected("ListMountsRequest", resp)
	}
	return m.Mounts, nil
}

// Mount errors callers branch on.
var (
	// ErrMounted reports a mount at a guest path that already has one.
	ErrMounted = errors.New("agentos: a mount exists at that path")
	// ErrTooManyMounts reports a VM that has MaxMounts mounts already.
	ErrTooManyMounts = errors.New("agentos: the VM has as many mounts as it may")
)

// MaxMounts bounds the mounts added to one VM: every change of the VM's
// configuration resends them all.
const MaxMounts = 64

// Mount adds a mount. ConfigureVmRequest replaces the whole configuration, so
// the list is read, extended and resent under the configuration's lock: two
// mounts added at once both stay.
func (vm *VM) Mount(ctx context.Context, m protocol.MountDescriptor) error {
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	if len(vm.cfg.Mounts) >= MaxMounts {
		return fmt.Errorf("%w (%d)", ErrTooManyMounts, MaxMounts)
	}
	for _, old := range vm.cfg.Mounts {
		if old.GuestPath == m.GuestPath {
			return fmt.Errorf("%w: %s", ErrMounted, m.GuestPath)
		}
	}
	return vm.reconfigureMountsLocked(ctx, append(slices.Clone(vm.cfg.Mounts), m))
}

// Unmount removes the mount at guestPath.
func (vm *VM) Unmount(ctx context.Context, guestPath string) error {
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	i := slices.IndexFunc(vm.cfg.Mounts, func(m protocol.MountDescriptor) bool { return m.GuestPath == guestPath })
	if i < 0 {
		return fmt.Errorf("%w: no mount at %s", ErrNotFound, guestPath)
	}
	return vm.reconfigureMountsLocked(ctx, slices.Delete(slices.Clone(vm.cfg.Mounts), i, i+1))
}

// MountDescriptors returns the mounts added with Mount, in the order they
// were added.
func (vm *VM) MountDescriptors() []protocol.MountDescriptor {
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	return slices.Clone(vm.cfg.Mounts)
}

// reconfigureMountsLocked sends the configuration with mounts; the caller
// holds cfgMu. On failure the configuration keeps its previous mounts.
func (vm *VM) reconfigureMountsLocked(ctx context.Context, mounts []protocol.MountDescriptor) error {
	prev := vm.cfg.Mounts
	vm.cfg.Mounts = mounts
	c, err := vm.configureLocked(ctx)
	if err != nil {
		vm.cfg.Mounts = prev
		return err
	}
	vm.agents = c.Agents
	return nil
}
