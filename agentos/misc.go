package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// FetchRequest is an HTTP request to a server listening inside the VM.
type FetchRequest struct {
	Port    uint16
	Method  string
	Path    string
	Header  http.Header
	Body    []byte
	MaxBody uint32 // 0: the sidecar's default
}

// FetchResponse is the answer of a server inside the VM.
type FetchResponse struct {
	Status     int
	StatusText string
	Header     http.Header
	Body       []byte
}

// fetchJSON is the sidecar's description of a response.
type fetchJSON struct {
	Status       int         `json:"status"`
	StatusText   string      `json:"statusText"`
	Headers      [][2]string `json:"headers"`
	Body         string      `json:"body"`
	BodyEncoding string      `json:"bodyEncoding"`
}

// Fetch sends an HTTP request to a listener inside the VM and buffers the
// whole answer; FetchStream streams it.
func (vm *VM) Fetch(ctx context.Context, r FetchRequest) (*FetchResponse, error) {
	req, err := r.wire()
	if err != nil {
		return nil, err
	}
	if r.MaxBody > 0 {
		req.MaxBytes = &r.MaxBody
	}
	resp, err := vm.call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("agentos: fetch :%d%s: %w", r.Port, r.Path, err)
	}
	f, ok := resp.(protocol.VMFetchResponse)
	if !ok {
		return nil, unexpected("VmFetchRequest", resp)
	}
	var fj fetchJSON
	if err := json.Unmarshal([]byte(f.ResponseJSON), &fj); err != nil {
		return nil, fmt.Errorf("%w: fetch response: %v", ErrProtocol, err)
	}
	out := &FetchResponse{Status: fj.Status, StatusText: fj.StatusText, Header: wireHeader(fj.Headers), Body: []byte(fj.Body)}
	if fj.BodyEncoding == "base64" {
		if out.Body, err = base64.StdEncoding.DecodeString(fj.Body); err != nil {
			return nil, fmt.Errorf("%w: fetch body: %v", ErrProtocol, err)
		}
	}
	return out, nil
}

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

// Resources returns the VM kernel's resource counters.
func (vm *VM) Resources(ctx context.Context) (protocol.ResourceSnapshotResponse, error) {
	resp, err := vm.call(ctx, protocol.GetResourceSnapshotRequest{})
	if err != nil {
		return protocol.ResourceSnapshotResponse{}, fmt.Errorf("agentos: resources: %w", err)
	}
	r, ok := resp.(protocol.ResourceSnapshotResponse)
	if !ok {
		return r, unexpected("GetResourceSnapshotRequest", resp)
	}
	return r, nil
}
