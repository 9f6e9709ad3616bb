// Package gateway holds the domain types of agentos-gateway: tenants, API
// keys, VM records and the error type every layer speaks. The packages below
// it flow one way: handlers (HTTP) call the services (vms, and sessions,
// bindings, watch, snapshots, schedules and the others over it), which use
// store (the database) and, through vms only, the agentOS engine (agentos,
// placed on sidecars by sidecarpool and warmpool). docs/internals.md maps
// every package.
package gateway

import (
	"time"
)

// DefaultTenantID is the built-in tenant the admin key acts as, so a single
// user can start the server and use the printed key with no set-up.
const DefaultTenantID = "default"

// Tenant is a customer of the gateway; every VM belongs to exactly one.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Isolated tenants get sidecars of their own, shared with no other tenant.
	Isolated bool   `json:"isolated"`
	Quotas   Quotas `json:"quotas"`
	// Sessions are the tenant's defaults for agent sessions.
	Sessions  SessionSettings `json:"sessions"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// Quotas bound what a tenant may use; zero means unlimited.
type Quotas struct {
	MaxVMs            int     `json:"maxVms" validate:"gte=0"`
	MaxProcesses      int     `json:"maxProcesses" validate:"gte=0"`
	RequestsPerSecond float64 `json:"requestsPerSecond" validate:"gte=0"`
	// MaxSchedules bounds the tenant's cron schedules, over all its VMs.
	MaxSchedules int `json:"maxSchedules" validate:"gte=0"`
	// MaxSnapshotBytes bounds the bytes of the tenant's stored snapshots and
	// of its hibernated VMs' images.
	MaxSnapshotBytes int64 `json:"maxSnapshotBytes" validate:"gte=0"`
}

// APIKey is a tenant's credential. Only a hash of the secret is stored.
type APIKey struct {
	ID       string `json:"id"`
	TenantID string `json:"tenantId"`
	// Prefix is the first characters of the key, shown to tell keys apart.
	Prefix    string    `json:"prefix"`
	Admin     bool      `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
}

// VMState is the state of a VM as the gateway records it.
type VMState string

// VM states. Disposed and lost are final. A hibernated VM runs nowhere: its
// files are an image in the store, and it wakes under the same id
// (hibernating and waking are the steps between).
const (
	VMCreating    VMState = "creating"
	VMReady       VMState = "ready"
	VMDisposing   VMState = "disposing"
	VMDisposed    VMState = "disposed"
	VMLost        VMState = "lost"
	VMHibernating VMState = "hibernating"
	VMHibernated  VMState = "hibernated"
	VMWaking      VMState = "waking"
)

// Final reports whether no transition leaves s.
func (s VMState) Final() bool { return s == VMDisposed || s == VMLost }

// Valid reports whether s is a known state.
func (s VMState) Valid() bool {
	switch s {
	case VMCreating, VMReady, VMDisposing, VMDisposed, VMLost, VMHibernating, VMHibernated, VMWaking:
		return true
	}
	return false
}

// VMSpec is what a VM was created with.
type VMSpec struct {
	Labels              map[string]string `json:"labels,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts,omitempty"`
	Software            []string          `json:"software,omitempty"`
	Agents              []string          `json:"agents,omitempty"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds,omitempty"`
	// OnIdle is what becomes of the VM once idle past its timeout:
	// "hibernate" or "dispose" (empty: the gateway's --on-idle).
	OnIdle string `json:"onIdle,omitempty"`
	// Bindings are the VM's host bindings (nil: none).
	Bindings *Bindings `json:"bindings,omitempty"`
	// FromSnapshot is the snapshot whose tree the VM was created with.
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	// CheckpointSeconds is how often the VM's files are checkpointed into
	// the store while it runs (0: never).
	CheckpointSeconds int `json:"checkpointSeconds,omitempty"`
	// Mounts are the mounts the tenant added to the VM, oldest first, as
	// asked for: a woken or restored VM gets them again.
	Mounts []VMMount `json:"mounts,omitempty"`
}

// VMMount is a mount a tenant added to a VM (POST /v1/vms/{vm}/mounts).
type VMMount struct {
	Path     string `json:"path"`
	Driver   string `json:"driver"`
	HostPath string `json:"hostPath,omitempty"`
	ReadOnly *bool  `json:"readOnly,omitempty"`
}

// VM is the gateway's record of a VM.
type VM struct {
	ID        string  `json:"id"`
	TenantID  string  `json:"tenantId"`
	State     VMState `json:"state"`
	Reason    string  `json:"reason,omitempty"` // why it is lost
	SidecarID string  `json:"sidecarId,omitempty"`
	// Node is the gateway node that runs the VM: its --node-id; for a
	// hibernated VM, the node that ran it last, which arms its schedules.
	Node      string    `json:"node,omitempty"`
	Spec      VMSpec    `json:"spec"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// HibernatedAt is when the VM last hibernated (zero: never, or it has
	// woken since).
	HibernatedAt time.Time `json:"hibernatedAt,omitzero"`
	// Image names the blob holding a hibernated VM's root filesystem, and
	// ImageBytes its size; SessionsImage the blob of its agent session
	// database, when it has one. All are empty while the VM runs.
	Image         string `json:"-"`
	ImageBytes    int64  `json:"-"`
	SessionsImage string `json:"-"`
	// Checkpoints are the layers of the VM's last checkpoint, oldest
	// first: a full capture of its files, then the changes of each later
	// checkpoint. CheckpointAt is when the last of them was taken.
	Checkpoints  []Checkpoint `json:"-"`
	CheckpointAt time.Time    `json:"checkpointAt,omitzero"`
}

// Checkpoint is one layer of a VM's checkpoint: a blob of the image store
// and its size.
type Checkpoint struct {
	Image string `json:"image"`
	Bytes int64  `json:"bytes"`
}

// Images names the blobs the VM's record holds: a hibernated VM's image
// and session database, and the layers of its checkpoint.
func (vm VM) Images() []string {
	var out []string
	for _, name := range []string{vm.Image, vm.SessionsImage} {
		if name != "" {
			out = append(out, name)
		}
	}
	for _, c := range vm.Checkpoints {
		out = append(out, c.Image)
	}
	return out
}

// Restorable reports whether a lost VM can come back from its checkpoint.
func (vm VM) Restorable() bool { return vm.State == VMLost && len(vm.Checkpoints) > 0 }

// VMFilter selects VMs of a tenant.
type VMFilter struct {
	TenantID string
	// States are the states asked for; none means every state that is not
	// final (ended VMs are listed only when asked for).
	States []VMState
	// Labels must all be carried with these values (key=value).
	Labels map[string]string
	// NotLabels must not be carried with these values (key!=value): a VM
	// without the label matches, as in Kubernetes selectors.
	NotLabels map[string]string
	// ID, when set, lists that VM alone (if it passes the other filters):
	// the one a token is bound to.
	ID     string
	Cursor string
	Limit  int
}

// MaxLabels bounds the labels a VM carries.
const MaxLabels = 64

// MaxLabelSelectors bounds the label selectors of one list: a VM carries at
// most 64 labels, so a longer selector can only be a mistake or an attack on
// the database.
const MaxLabelSelectors = 64

// LiveStates are the states that are not final: a hibernated VM has not
// ended.
var LiveStates = []VMState{VMCreating, VMReady, VMDisposing, VMHibernating, VMHibernated, VMWaking}

// AllStates are every state a VM can be in.
var AllStates = []VMState{VMCreating, VMReady, VMDisposing, VMDisposed, VMLost, VMHibernating, VMHibernated, VMWaking}

// Page is one page of a list; NextCursor is empty on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// NodeState is the state of a gateway node sharing the store.
type NodeState string

// Node states. A draining node takes no new VMs and leaves once its VMs are
// gone; a dead node's heartbeat is older than the node timeout (or it left).
const (
	NodeLive     NodeState = "live"
	NodeDraining NodeState = "draining"
	NodeDead     NodeState = "dead"
)

// Node is a gateway process sharing the store with others: where to reach
// it and the load it last reported.
type Node struct {
	ID            string
	AdvertiseAddr string
	State         NodeState
	Reason        string
	// VMs are the VMs it runs; Capacity the VMs its sidecars can hold.
	VMs      int
	Capacity int
	Sidecars int
	RSS      int64
	// DrainDeadline is when a draining node leaves even with VMs left.
	DrainDeadline time.Time
	StartedAt     time.Time
	HeartbeatAt   time.Time
	// SecretCheck tells whether nodes share a cluster secret; never shown.
	SecretCheck string
}
