package api

import (
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// VMUsage is the answer of GET /v1/vms/{vm}/usage: what the gateway can
// tell of a VM's use of its node. A figure the engine cannot give is
// absent rather than guessed; api/openapi.yaml says where each comes from.
type VMUsage struct {
	VMID        string          `json:"vmId"`
	State       gateway.VMState `json:"state"`
	CollectedAt time.Time       `json:"collectedAt"`
	// OwnSidecar says that no other tenant VM runs on the VM's sidecar
	// process, whose memory and CPU time are then the VM's.
	OwnSidecar      bool     `json:"ownSidecar"`
	MemoryBytes     *int64   `json:"memoryBytes,omitempty"`
	CPUSeconds      *float64 `json:"cpuSeconds,omitempty"`
	FilesystemBytes *uint64  `json:"filesystemBytes,omitempty"`
	Inodes          *uint64  `json:"inodes,omitempty"`
	// ImageBytes is a hibernated VM's stored image size.
	ImageBytes *int64          `json:"imageBytes,omitempty"`
	Processes  *UsageProcesses `json:"processes,omitempty"`
	Handles    *UsageHandles   `json:"handles,omitempty"`
	Limits     *UsageLimits    `json:"limits,omitempty"`
}

// UsageProcesses counts a VM's guest processes, their children included.
type UsageProcesses struct {
	Running uint64 `json:"running"`
	Exited  uint64 `json:"exited"`
}

// UsageHandles counts what a VM's guest processes hold open.
type UsageHandles struct {
	OpenFDs           uint64 `json:"openFds"`
	Pipes             uint64 `json:"pipes"`
	PTYs              uint64 `json:"ptys"`
	Sockets           uint64 `json:"sockets"`
	SocketListeners   uint64 `json:"socketListeners"`
	SocketConnections uint64 `json:"socketConnections"`
}

// UsageLimits are the engine's limits the figures are checked against; one
// the engine does not report is absent.
type UsageLimits struct {
	Processes       uint64 `json:"processes,omitempty"`
	OpenFDs         uint64 `json:"openFds,omitempty"`
	Pipes           uint64 `json:"pipes,omitempty"`
	PTYs            uint64 `json:"ptys,omitempty"`
	Sockets         uint64 `json:"sockets,omitempty"`
	FilesystemBytes uint64 `json:"filesystemBytes,omitempty"`
	Inodes          uint64 `json:"inodes,omitempty"`
}
