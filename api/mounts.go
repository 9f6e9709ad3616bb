package api

// CreateMountRequest is the body of POST /v1/vms/{vm}/mounts.
type CreateMountRequest struct {
	// Path is where the mount appears in the VM: absolute and normalised.
	Path string `json:"path" validate:"required,max=1024,nonul"`
	// Driver is host_dir or memory.
	Driver string `json:"driver" validate:"required,max=64,nonul"`
	// HostPath is the host directory of a host_dir mount.
	HostPath string `json:"hostPath,omitempty" validate:"max=4096,nonul"`
	// ReadOnly, when absent, is what the gateway allows for a host
	// directory (read-only unless allowed read-write) and false otherwise.
	ReadOnly *bool `json:"readOnly,omitempty"`
}

// Mount is a mount of a VM. HostPath, for a host_dir mount, is the host
// directory with its symbolic links resolved.
type Mount struct {
	Path     string `json:"path"`
	Driver   string `json:"driver"`
	HostPath string `json:"hostPath,omitempty"`
	ReadOnly bool   `json:"readOnly"`
}

// LinkSoftwareRequest is the body of POST /v1/vms/{vm}/software.
type LinkSoftwareRequest struct {
	// Package is the npm name of a package the gateway has installed, such
	// as @agentos-software/pi.
	Package string `json:"package" validate:"required,max=256,nonul"`
}

// Software is a software package linked into a VM: the engine's name of it
// and the commands it provides.
type Software struct {
	Name     string   `json:"name"`
	Commands []string `json:"commands"`
}

// LinkedSoftware is the answer to POST /v1/vms/{vm}/software: the package
// linked, the engine's name of it, and the commands and ACP agents it
// provides.
type LinkedSoftware struct {
	Package  string   `json:"package"`
	Name     string   `json:"name,omitempty"`
	Commands []string `json:"commands"`
	Agents   []string `json:"agents"`
}
