// Package cluster lets several gateway nodes share one store: each node
// registers itself, heartbeats its load, reaps nodes that stopped
// heartbeating (their VMs become lost), places new VMs on the least-loaded
// live node, drains on request, and signs the calls it makes to the other
// nodes with the cluster secret.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
)

// Store is what a node needs of the database.
type Store interface {
	RegisterNode(ctx context.Context, n gateway.Node, timeout time.Duration) (gateway.Node, error)
	Heartbeat(ctx context.Context, id string, l store.NodeLoad) (gateway.Node, error)
	ReapDeadNodes(ctx context.Context, self string, timeout time.Duration) ([]store.ReapedNode, error)
	ListNodes(ctx context.Context) ([]gateway.Node, error)
	GetNode(ctx context.Context, id string) (gateway.Node, error)
	LiveVMsByNode(ctx context.Context) (map[string]int, error)
	DrainNode(ctx context.Context, id string, deadline time.Time) (gateway.Node, error)
	LeaveNode(ctx context.Context, id, reason string) error
	MarkNodeVMsLost(ctx context.Context, node, reason string) ([]string, error)
}

// Config configures a node.
type Config struct {
	// ID is the node's name (--node-id); AdvertiseAddr the base URL the
	// other nodes reach it at (--advertise-addr).
	ID, AdvertiseAddr string
	// Secret authenticates calls between nodes
	// (AGENTOS_GATEWAY_CLUSTER_SECRET); empty for a node that runs alone.
	Secret []byte
	// Shared says the store may be shared by several nodes (PostgreSQL).
	// Without it the node never proxies and places every VM on itself.
	Shared bool
	// Heartbeat is how often the node reports (default 2 s); Timeout how
	// old a heartbeat makes a node dead (default 10 s).
	Heartbeat, Timeout time.Duration
	// Load reports the node's load for each heartbeat.
	Load func() store.NodeLoad
	// Cordon is called once when the node starts draining: it must refuse
	// new VMs from then on.
	Cordon func()
	// LiveVMs counts the VMs the node still runs, for the end of a drain.
	LiveVMs func() int
	// Leave is called once when the node should exit: its drain finished
	// (or reached its deadline), or the other nodes declared it dead.
	Leave func(reason string)
	Log   zerolog.Logger
}

// Node is this gateway's membership of the cluster.
type Node struct {
	cfg   Config
	store Store

	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	draining bool
	left     bool
	closed   bool
}

// storeTimeout bounds each store call the node makes on its own behalf.
const storeTimeout = 5 * time.Second

// Join registers the node, marks the VMs its previous run left lost (only
// its own: the other nodes' VMs are theirs), and starts heartbeating; Close
// stops it.
func Join(ctx context.Context, cfg Config, st Store) (*Node, []string, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Timeout <= cfg.Heartbeat {
		return nil, nil, fmt.Errorf("cluster: --node-timeout (%s) must be longer than --node-heartbeat (%s)", cfg.Timeout, cfg.Heartbeat)
	}
	if cfg.Cordon == nil {
		cfg.Cordon = func() {}
	}
	if cfg.Leave == nil {
		cfg.Leave = func(string) {}
	}
	if cfg.LiveVMs == nil {
		cfg.LiveVMs = func() int { return 0 }
	}
	if cfg.Load == nil {
		cfg.Load = func() store.NodeLoad { return store.NodeLoad{} }
	}
	l := cfg.Load()
	_, err := st.RegisterNode(ctx, gateway.Node{
		ID: cfg.ID, AdvertiseAddr: cfg.AdvertiseAddr, SecretCheck: secretCheck(cfg.Secret),
		VMs: l.VMs, Capacity: l.Capacity, Sidecars: l.Sidecars, RSS: l.RSS,
	}, cfg.Timeout)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: register node %s: %w", cfg.ID, err)
	}
	lost, err := st.MarkNodeVMsLost(ctx, cfg.ID, "its node "+cfg.ID+" restarted")
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{cfg: cfg, store: st, stop: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.run()
	}()
	return n, lost, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Shared reports whether other nodes may share the store.
func (n *Node) Shared() bool { return n.cfg.Shared }

// Draining reports whether the node was asked to drain.
func (n *Node) Draining() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.draining
}

// run heartbeats and reaps every Heartbeat until Close.
func (n *Node) run() {
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.tick()
		}
	}
}

// tick is one heartbeat: report the load, follow a drain, reap the dead.
func (n *Node) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rec, err := n.store.Heartbeat(ctx, n.cfg.ID, n.cfg.Load())
	switch {
	case errors.Is(err, store.ErrNodeDead):
		// The others marked this node's VMs lost: what it still runs is
		// no longer reachable through the store, so it leaves (and a
		// supervisor starts it again, afresh).
		n.cfg.Log.Error().Err(err).Msg("this node was declared dead by the others; leaving")
		n.leave("declared dead by the other nodes")
		return
	case err != nil:
		n.cfg.Log.Warn().Err(err).Msg("heartbeat")
		return
	}
	if rec.State == gateway.NodeDraining {
		n.mu.Lock()
		first := !n.draining
		n.draining = true
		n.mu.Unlock()
		if first {
			n.cfg.Log.Info().Time("deadline", rec.DrainDeadline).Msg("draining: no new VMs; leaving once the VMs are gone")
			n.cfg.Cordon()
		}
		switch left := n.cfg.LiveVMs(); {
		case left == 0:
			n.leave("drained")
		case !rec.DrainDeadline.IsZero() && time.Now().After(rec.DrainDeadline):
			n.cfg.Log.Warn().Int("vms", left).Msg("drain deadline reached; leaving with VMs left")
			n.leave("drain deadline reached")
		}
	}
	if _, err := n.Reap(ctx); err != nil {
		n.cfg.Log.Warn().Err(err).Msg("reap dead nodes")
	}
}

func (n *Node) leave(reason string) {
	n.mu.Lock()
	first := !n.left
	n.left = true
	n.mu.Unlock()
	if first {
		n.cfg.Leave(reason)
	}
}

// Reap declares dead the nodes whose heartbeat is older than the timeout
// and marks their VMs lost; the store makes sure only one node does it for
// each.
func (n *Node) Reap(ctx context.Context) ([]store.ReapedNode, error) {
	reaped, err := n.store.ReapDeadNodes(ctx, n.cfg.ID, n.cfg.Timeout)
	for _, r := range reaped {
		n.cfg.Log.Warn().Str("deadNode", r.Node).Int("vms", len(r.VMs)).Msg("node stopped heartbeating: its VMs are lost")
	}
	return reaped, err
}

// Nodes lists every node, this one included.
func (n *Node) Nodes(ctx context.Context) ([]gateway.Node, error) { return n.store.ListNodes(ctx) }

// Drain cordons a node until deadline.
func (n *Node) Drain(ctx context.Context, id string, deadline time.Time) (gateway.Node, error) {
	return n.store.DrainNode(ctx, id, deadline)
}

// Peer is what a node needs to reach the owner of a VM.
type Peer struct {
	ID            string
	AdvertiseAddr string
	// Alive: the node heartbeats; a node that is not is dead or about to
	// be declared so.
	Alive bool
}

// Peer returns the record of node id as seen now.
func (n *Node) Peer(ctx context.Context, id string) (Peer, error) {
	rec, err := n.store.GetNode(ctx, id)
	if err != nil {
		return Peer{}, err
	}
	return Peer{ID: rec.ID, AdvertiseAddr: rec.AdvertiseAddr, Alive: n.alive(rec, time.Now())}, nil
}

func (n *Node) alive(rec gateway.Node, now time.Time) bool {
	return rec.State != gateway.NodeDead && now.Sub(rec.HeartbeatAt) <= n.cfg.Timeout
}

// AwaitVerdict waits, after a call to node id broke off, until the node is
// known dead (true: it was reaped, by this node or another) or shows it is
// alive by heartbeating again after since (false), for at most the timeout
// and a heartbeat.
func (n *Node) AwaitVerdict(ctx context.Context, id string, since time.Time) bool {
	deadline := time.Now().Add(n.cfg.Timeout + n.cfg.Heartbeat)
	poll := time.NewTicker(max(n.cfg.Heartbeat/4, 50*time.Millisecond))
	defer poll.Stop()
	for {
		rec, err := n.store.GetNode(ctx, id)
		if err == nil {
			switch {
			case rec.State == gateway.NodeDead:
				return true
			case rec.HeartbeatAt.After(since.Add(n.cfg.Heartbeat)) && n.alive(rec, time.Now()):
				return false
			case !n.alive(rec, time.Now()):
				if _, err := n.Reap(ctx); err != nil {
					n.cfg.Log.Warn().Err(err).Msg("reap dead nodes")
				}
				continue
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-poll.C:
		}
	}
}

// Candidates returns the nodes a new VM may go to, best first: live (not
// draining, not dead), heartbeating, ranked by Rank.
func (n *Node) Candidates(ctx context.Context) ([]gateway.Node, error) {
	nodes, err := n.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := n.store.LiveVMsByNode(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []gateway.Node
	for _, rec := range nodes {
		if rec.State != gateway.NodeLive || !n.alive(rec, now) {
			continue
		}
		if !n.cfg.Shared && rec.ID != n.cfg.ID {
			continue
		}
		rec.VMs = counts[rec.ID]
		out = append(out, rec)
	}
	Rank(out)
	return out, nil
}

// Close stops heartbeating and records that the node left with reason:
// call it once its VMs are disposed.
func (n *Node) Close(ctx context.Context, reason string) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	close(n.stop)
	n.wg.Wait()
	if err := n.store.LeaveNode(ctx, n.cfg.ID, reason); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// ReapNow is Reap for a caller that only needs the VMs of dead nodes
// marked lost before it answers.
func (n *Node) ReapNow(ctx context.Context) error {
	_, err := n.Reap(ctx)
	return err
}
