package api

import (
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// List is the shape of every list: a page of items and the cursor of the
// next page, empty on the last one.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor"`
}

// CreateVMRequest is the body of POST /v1/vms.
type CreateVMRequest struct {
	Labels              map[string]string `json:"labels,omitempty" validate:"omitempty,max=64,dive,keys,min=1,max=63,nonul,endkeys,max=256,nonul"`
	Env                 map[string]string `json:"env,omitempty" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts,omitempty" validate:"omitempty,max=64,dive,min=1"`
	Software            []string          `json:"software,omitempty" validate:"omitempty,max=64,dive,min=1,max=256"`
	Agents              []string          `json:"agents,omitempty" validate:"omitempty,max=8,dive,oneof=pi claude codex opencode"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds,omitempty" validate:"gte=0,lte=604800"`
	// OnIdle is what becomes of the VM once idle past its timeout:
	// hibernate or dispose (empty: the gateway's --on-idle).
	OnIdle string `json:"onIdle,omitempty" validate:"omitempty,oneof=hibernate dispose"`
	// Bindings declares the VM's host bindings (see PUT /v1/vms/{vm}/bindings).
	Bindings *gateway.Bindings `json:"bindings,omitempty"`
	// FromSnapshot creates the VM with the tree of one of the tenant's
	// snapshots as its root filesystem.
	FromSnapshot string `json:"fromSnapshot,omitempty" validate:"omitempty,max=64,nonul"`
	// CheckpointSeconds is how often the VM's files are checkpointed while
	// it runs (0: never; absent: the gateway's --checkpoint-interval).
	CheckpointSeconds *int `json:"checkpointSeconds,omitempty" validate:"omitnil,gte=0,lte=86400"`
}

// UpdateVMRequest is the body of PATCH /v1/vms/{vm}, a JSON merge patch of
// the VM's settings: an absent field stays as it is, a label set to null is
// removed.
type UpdateVMRequest struct {
	Labels             map[string]*string `json:"labels,omitempty" validate:"omitempty,max=64,dive,keys,min=1,max=63,nonul,endkeys,omitnil,max=256,nonul"`
	IdleTimeoutSeconds *int               `json:"idleTimeoutSeconds,omitempty" validate:"omitnil,gte=0,lte=604800"`
	OnIdle             *string            `json:"onIdle,omitempty" validate:"omitnil,oneof=hibernate dispose"`
	CheckpointSeconds  *int               `json:"checkpointSeconds,omitempty" validate:"omitnil,gte=0,lte=86400"`
	// Permissions replaces the capabilities it names; one set to null is
	// allowed again. Only a tenant key may change them.
	Permissions map[string]any `json:"permissions,omitempty"`
}

// ExecAccepted answers an exec made with Prefer: respond-async, and asks
// for its outcome while it runs: the result is at Location (GET
// /v1/vms/{vm}/exec/{key}) once done, and comes as an exec.done event.
type ExecAccepted struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"` // running
	Location       string `json:"location"`
}

// NetworkRules is permissions.network as egress rules: the first rule that
// matches a guest's connection or name lookup decides it, the default
// ("allow" or "deny"; absent: deny) when none does.
type NetworkRules struct {
	Default string        `json:"default,omitempty"`
	Rules   []NetworkRule `json:"rules"`
}

// NetworkRule allows or denies connections to hosts (names with "*"
// wildcards, or addresses) on ports (absent: all).
type NetworkRule struct {
	Mode  string   `json:"mode"`
	Hosts []string `json:"hosts"`
	Ports []int    `json:"ports,omitempty"`
}

// VM is a VM resource: the gateway's record of a VM with its spec
// flattened. Times are in UTC.
type VM struct {
	ID        string            `json:"id"`
	State     gateway.VMState   `json:"state"`
	Reason    string            `json:"reason,omitempty"`
	Labels    map[string]string `json:"labels"`
	SidecarID string            `json:"sidecarId,omitempty"`
	// Node is the gateway node that runs the VM.
	Node                string            `json:"node,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Permissions         map[string]any    `json:"permissions,omitempty"`
	Limits              map[string]any    `json:"limits,omitempty"`
	LoopbackExemptPorts []uint16          `json:"loopbackExemptPorts"`
	Software            []string          `json:"software"`
	Agents              []string          `json:"agents"`
	IdleTimeoutSeconds  int               `json:"idleTimeoutSeconds"`
	OnIdle              string            `json:"onIdle,omitempty"`
	// HibernatedAt is when the VM hibernated, while it is hibernated.
	HibernatedAt *time.Time `json:"hibernatedAt,omitempty"`
	// CheckpointSeconds is how often the VM's files are checkpointed while
	// it runs (0: never); CheckpointAt is when its last checkpoint was
	// taken. Restorable says that a lost VM can be restored from it (POST
	// /v1/vms/{vm}/wake).
	CheckpointSeconds int        `json:"checkpointSeconds"`
	CheckpointAt      *time.Time `json:"checkpointAt,omitempty"`
	Restorable        bool       `json:"restorable"`
	// FromSnapshot is the snapshot the VM was created from.
	FromSnapshot string    `json:"fromSnapshot,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// IdleTimeout is IdleTimeoutSeconds as a duration.
func (v VM) IdleTimeout() time.Duration { return time.Duration(v.IdleTimeoutSeconds) * time.Second }
