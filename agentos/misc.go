package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"

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

// Mount adds a mount; the VM's configuration is resent whole.
func (vm *VM) Mount(ctx context.Context, m protocol.MountDescriptor) error {
	vm.cfgMu.Lock()
	mounts := append(append([]protocol.MountDescriptor(nil), vm.cfg.Mounts...), m)
	vm.cfgMu.Unlock()
	return vm.Configure(ctx, ConfigureOptions{Mounts: mounts})
}

// Unmount removes the mount at guestPath.
func (vm *VM) Unmount(ctx context.Context, guestPath string) error {
	vm.cfgMu.Lock()
	var mounts []protocol.MountDescriptor
	found := false
	for _, m := range vm.cfg.Mounts {
		if m.GuestPath == guestPath {
			found = true
			continue
		}
		mounts = append(mounts, m)
	}
	vm.cfgMu.Unlock()
	if !found {
		return fmt.Errorf("%w: no mount at %s", ErrNotFound, guestPath)
	}
	if mounts == nil {
		mounts = []protocol.MountDescriptor{}
	}
	return vm.Configure(ctx, ConfigureOptions{Mounts: mounts})
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

// LinkSoftware links one more package (an npm name under the engine's
// packages folder or an .aospkg path) into the running VM.
func (vm *VM) LinkSoftware(ctx context.Context, pkg string) (protocol.PackageLinkedResponse, error) {
	pk, err := vm.s.resolvePackages(VMOptions{Software: []string{pkg}})
	if err != nil {
		return protocol.PackageLinkedResponse{}, err
	}
	resp, err := vm.call(ctx, protocol.LinkPackageRequest{Package: pk[len(pk)-1]})
	if err != nil {
		return protocol.PackageLinkedResponse{}, fmt.Errorf("agentos: link %s: %w", pkg, err)
	}
	l, ok := resp.(protocol.PackageLinkedResponse)
	if !ok {
		return l, unexpected("LinkPackageRequest", resp)
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
