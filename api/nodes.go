package api

import (
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Node is a gateway node of the cluster (GET /v1/nodes). Times are in UTC;
// DrainDeadline is set while the node drains.
type Node struct {
	ID            string            `json:"id"`
	AdvertiseAddr string            `json:"advertiseAddr"`
	State         gateway.NodeState `json:"state"`
	Reason        string            `json:"reason,omitempty"`
	VMs           int               `json:"vms"`
	Capacity      int               `json:"capacity"`
	Sidecars      int               `json:"sidecars"`
	RSSBytes      int64             `json:"rssBytes"`
	DrainDeadline *time.Time        `json:"drainDeadline,omitempty"`
	StartedAt     time.Time         `json:"startedAt"`
	HeartbeatAt   time.Time         `json:"heartbeatAt"`
	// Self marks the node that answered.
	Self bool `json:"self"`
}
