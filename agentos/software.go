package agentos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Software lists the software packages linked into the VM and the commands
// each provides.
func (vm *VM) Software(ctx context.Context) ([]protocol.PackageCommands, error) {
	resp, err := vm.call(ctx, protocol.ProvidedCommandsRequest{})
	if err != nil {
		return nil, fmt.Errorf("agentos: list software: %w", err)
	}
	p, ok := resp.(protocol.ProvidedCommandsResponse)
	if !ok {
		return nil, unexpected("ProvidedCommandsRequest", resp)
	}
	return p.Packages, nil
}

// HasSoftware reports whether the VM's configuration holds the package pkg
// (named as for LinkSoftware): given at create, a default one, or linked.
func (vm *VM) HasSoftware(pkg string) bool {
	desc := vm.packageDescriptor(pkg)
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	return slices.Contains(vm.cfg.Packages, desc)
}

// packageDescriptor names a package for the engine: an .aospkg path as it
// is, an npm name by its file under the engine's packages folder.
func (vm *VM) packageDescriptor(pkg string) protocol.PackageDescriptor {
	if filepath.IsAbs(pkg) {
		return protocol.PackageDescriptor{Path: pkg}
	}
	return protocol.PackageDescriptor{Path: vm.s.opts.Engine.PackagePath(pkg)}
}

// LinkSoftware links one more package (an npm name under the engine's
// packages folder or an .aospkg path) into the running VM. The package joins
// the VM's configuration, so a later reconfigure (a mount) keeps it linked.
func (vm *VM) LinkSoftware(ctx context.Context, pkg string) (protocol.PackageLinkedResponse, error) {
	desc := vm.packageDescriptor(pkg)
	if _, err := os.Stat(desc.Path); err != nil {
		// The host path stays out of the message: it reaches clients.
		return protocol.PackageLinkedResponse{}, fmt.Errorf("%w: software %q not installed", ErrInvalidArgument, pkg)
	}
	vm.cfgMu.Lock()
	defer vm.cfgMu.Unlock()
	resp, err := vm.call(ctx, protocol.LinkPackageRequest{Package: desc})
	if err != nil {
		return protocol.PackageLinkedResponse{}, fmt.Errorf("agentos: link %s: %w", pkg, err)
	}
	l, ok := resp.(protocol.PackageLinkedResponse)
	if !ok {
		return l, unexpected("LinkPackageRequest", resp)
	}
	if !slices.Contains(vm.cfg.Packages, desc) {
		vm.cfg.Packages = append(slices.Clone(vm.cfg.Packages), desc)
	}
	for _, a := range l.Agents {
		if !slices.ContainsFunc(vm.agents, func(b protocol.AgentosProjectedAgent) bool { return b.ID == a.ID }) {
			vm.agents = append(slices.Clone(vm.agents), a)
		}
	}
	return l, nil
}

// PackagesMountAt is where a VM's software packages are mounted: their
// content is the engine's, never the VM's own.
const PackagesMountAt = "/opt/agentos"
