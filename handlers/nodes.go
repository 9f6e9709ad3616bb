package handlers

import (
	"context"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/cluster"
)

// Cluster is what the handlers need of the node's membership of a cluster
// of gateways sharing the store.
type Cluster interface {
	ID() string
	// Shared: other nodes may own VMs; without it nothing is proxied.
	Shared() bool
	Nodes(ctx context.Context) ([]gateway.Node, error)
	Drain(ctx context.Context, id string, deadline time.Time) (gateway.Node, error)
	Candidates(ctx context.Context) ([]gateway.Node, error)
	Peer(ctx context.Context, id string) (cluster.Peer, error)
	ReapNow(ctx context.Context) error
	AwaitVerdict(ctx context.Context, id string, since time.Time) bool
	Sign(r *http.Request)
	Verify(r *http.Request) (string, error)
}

func (s *Server) nodeResource(n gateway.Node) api.Node {
	out := api.Node{ID: n.ID, AdvertiseAddr: n.AdvertiseAddr, State: n.State, Reason: n.Reason, VMs: n.VMs, Capacity: n.Capacity,
		Sidecars: n.Sidecars, RSSBytes: n.RSS, StartedAt: n.StartedAt.UTC(), HeartbeatAt: n.HeartbeatAt.UTC(),
		Self: n.ID == s.cfg.Cluster.ID()}
	if !n.DrainDeadline.IsZero() {
		d := n.DrainDeadline.UTC()
		out.DrainDeadline = &d
	}
	return out
}

func (s *Server) noCluster(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Cluster == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "this gateway runs without a node registry"))
		return true
	}
	return false
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w, r) {
		return
	}
	nodes, err := s.cfg.Cluster.Nodes(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]api.Node, len(nodes))
	for i, n := range nodes {
		items[i] = s.nodeResource(n)
	}
	writeJSON(w, http.StatusOK, api.List[api.Node]{Items: items})
}

// defaultDrainDeadline is how long a drained node waits for its VMs.
const defaultDrainDeadline = 10 * time.Minute

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w, r) {
		return
	}
	secs, err := queryInt(r, "deadlineSeconds", int(defaultDrainDeadline/time.Second), 1, 86400)
	if err != nil {
		writeError(w, r, err)
		return
	}
	d := time.Duration(secs) * time.Second
	n, err := s.cfg.Cluster.Drain(r.Context(), pathParam(r, "node"), time.Now().Add(d))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.nodeResource(n))
}
