package client

import (
	"context"
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// Mount is a mount of a VM as the gateway answers it.
type Mount = api.Mount

// MountRequest asks for a mount: Path in the VM, Driver (MountHostDir or
// MountMemory), HostPath for a host directory, and ReadOnly (nil: read-only
// for a host directory the gateway allows read-only, read-write otherwise;
// new(true) or new(false) to choose).
type MountRequest = api.CreateMountRequest

// The mount drivers.
const (
	// MountHostDir mounts a host directory the gateway's --mount-allow
	// allows.
	MountHostDir = "host_dir"
	// MountMemory mounts an empty in-memory filesystem.
	MountMemory = "memory"
)

// Software is a software package linked into a VM: the engine's name of
// it and the commands it provides.
type Software = api.Software

// LinkedSoftware is the answer to LinkSoftware.
type LinkedSoftware = api.LinkedSoftware

// Mounts lists the mounts added to the VM, oldest first.
func (v *VMHandle) Mounts(ctx context.Context) ([]Mount, error) {
	l, err := get[List[Mount]](ctx, v.c, vmPath(v.id, "mounts"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Mount mounts a filesystem into the running VM and returns the mount.
func (v *VMHandle) Mount(ctx context.Context, req MountRequest) (*Mount, error) {
	out, _, err := call[Mount](ctx, v.c, http.MethodPost, vmPath(v.id, "mounts"), req, nil)
	return out, err
}

// Unmount removes the mount at path, the path it was mounted at.
func (v *VMHandle) Unmount(ctx context.Context, path string) error {
	_, err := v.c.do(ctx, http.MethodDelete, vmPath(v.id, "mounts"), pathQuery(path), nil, nil, nil)
	return err
}

// Software lists the software packages linked into the VM.
func (v *VMHandle) Software(ctx context.Context) ([]Software, error) {
	l, err := get[List[Software]](ctx, v.c, vmPath(v.id, "software"), nil)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// LinkSoftware links a software package the gateway has installed (an npm
// name such as "@agentos-software/pi") into the running VM. Linking one the
// VM has already succeeds too.
func (v *VMHandle) LinkSoftware(ctx context.Context, pkg string) (*LinkedSoftware, error) {
	out, _, err := call[LinkedSoftware](ctx, v.c, http.MethodPost, vmPath(v.id, "software"), api.LinkSoftwareRequest{Package: pkg}, nil)
	return out, err
}
