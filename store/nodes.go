package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// nodeLockID keys the PostgreSQL advisory lock that serialises node
// registrations and the reaping of dead nodes ("node" in ASCII): exactly one
// gateway at a time decides who is dead and marks their VMs lost.
const nodeLockID = 0x6e6f6465

// ErrNodeDead is the cause (errors.Is) of Heartbeat's error when the node's
// record says it is dead: the other nodes gave up on it and marked its VMs
// lost, so what it still runs is no longer its own.
var ErrNodeDead = errors.New("the node is recorded as dead")

// ErrNodeIDInUse is the cause of RegisterNode's error when another live
// node has the same id.
var ErrNodeIDInUse = errors.New("node id in use by a live node")

// ErrClusterSecretMismatch is the cause of RegisterNode's error when the
// live nodes were started with another cluster secret (or none).
var ErrClusterSecretMismatch = errors.New("cluster secret differs from the live nodes'")

const nodeColumns = `id, advertise_addr, state, reason, secret_check, vms, capacity, sidecars, rss, drain_deadline, started_at, heartbeat_at`

func scanNode(row interface{ Scan(...any) error }) (gateway.Node, error) {
	var n gateway.Node
	err := row.Scan(&n.ID, &n.AdvertiseAddr, &n.State, &n.Reason, &n.SecretCheck, &n.VMs, &n.Capacity, &n.Sidecars, &n.RSS,
		scanTime(&n.DrainDeadline), scanTime(&n.StartedAt), scanTime(&n.HeartbeatAt))
	return n, err
}

// lockNodes takes the advisory lock of node changes for tx (PostgreSQL; on
// SQLite the transaction already excludes every other writer).
func (db *DB) lockNodes(ctx context.Context, tx *sql.Tx) error {
	if db.d.name != dialectPostgres {
		return nil
	}
	if _, err := db.exec(ctx, tx, `SELECT pg_advisory_xact_lock(?)`, int64(nodeLockID)); err != nil {
		return dbError(err, "store: lock nodes")
	}
	return nil
}

// RegisterNode records n as live, started and heartbeating now. On
// PostgreSQL, where several gateways share the store, it refuses with
// CodeConflict when another node with the same id heartbeat less than
// timeout ago (ErrNodeIDInUse), and when a node that is alive (heartbeat
// within timeout) has another SecretCheck than n's, or n has none
// (ErrClusterSecretMismatch).
func (db *DB) RegisterNode(ctx context.Context, n gateway.Node, timeout time.Duration) (gateway.Node, error) {
	now := db.now()
	n.State, n.Reason, n.StartedAt, n.HeartbeatAt, n.DrainDeadline = gateway.NodeLive, "", now, now, time.Time{}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockNodes(ctx, tx); err != nil {
			return err
		}
		rows, err := db.query(ctx, tx, `SELECT `+nodeColumns+` FROM nodes WHERE state <> ? AND heartbeat_at >= ? ORDER BY id`,
			string(gateway.NodeDead), db.d.ts(now.Add(-timeout)))
		if err != nil {
			return dbError(err, "store: list nodes")
		}
		var alive []gateway.Node
		for rows.Next() {
			o, err := scanNode(rows)
			if err != nil {
				rows.Close()
				return dbError(err, "store: list nodes")
			}
			alive = append(alive, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dbError(err, "store: list nodes")
		}
		// A SQLite store belongs to one gateway: a node restarting after a
		// crash finds its own fresh heartbeat and must not be refused.
		if db.d.name != dialectPostgres {
			alive = nil
		}
		for _, o := range alive {
			switch {
			case o.ID == n.ID:
				return gateway.Wrap(gateway.CodeConflict, ErrNodeIDInUse, "node id %s is used by a live node (heartbeat %s ago); give this node another --node-id, or wait for --node-timeout", n.ID, now.Sub(o.HeartbeatAt).Round(time.Millisecond))
			case o.SecretCheck != n.SecretCheck:
				return gateway.Wrap(gateway.CodeConflict, ErrClusterSecretMismatch, "node %s is live with another AGENTOS_GATEWAY_CLUSTER_SECRET than this node's; every node sharing the store needs the same one", o.ID)
			case n.SecretCheck == "":
				return gateway.Wrap(gateway.CodeConflict, ErrClusterSecretMismatch, "node %s is live on this store: several nodes need AGENTOS_GATEWAY_CLUSTER_SECRET", o.ID)
			}
		}
		_, err = db.exec(ctx, tx, `INSERT INTO nodes (`+nodeColumns+`) VALUES (?, ?, ?, '', ?, ?, ?, ?, ?, NULL, ?, ?)
			ON CONFLICT (id) DO UPDATE SET advertise_addr = excluded.advertise_addr, state = excluded.state, reason = '',
				secret_check = excluded.secret_check, vms = excluded.vms, capacity = excluded.capacity,
				sidecars = excluded.sidecars, rss = excluded.rss, drain_deadline = NULL,
				started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
			n.ID, n.AdvertiseAddr, string(n.State), n.SecretCheck, n.VMs, n.Capacity, n.Sidecars, n.RSS, db.d.ts(now), db.d.ts(now))
		if err != nil {
			return dbError(err, "store: register node")
		}
		return nil
	})
	if err != nil {
		return gateway.Node{}, err
	}
	return n, nil
}

// NodeLoad is what a node reports with each heartbeat.
type NodeLoad struct {
	VMs, Capacity, Sidecars int
	RSS                     int64
}

// Heartbeat records a node's load and that it is alive now, and returns its
// record (a drain asked for by another node shows there). A node recorded
// as dead gets ErrNodeDead.
func (db *DB) Heartbeat(ctx context.Context, id string, l NodeLoad) (gateway.Node, error) {
	n, err := scanNode(db.queryRow(ctx, db.w, `UPDATE nodes SET vms = ?, capacity = ?, sidecars = ?, rss = ?, heartbeat_at = ?
		WHERE id = ? AND state <> ? RETURNING `+nodeColumns,
		l.VMs, l.Capacity, l.Sidecars, l.RSS, db.d.ts(db.now()), id, string(gateway.NodeDead)))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Node{}, gateway.Wrap(gateway.CodeUnavailable, ErrNodeDead, "node %s is recorded as dead: its VMs were marked lost", id)
	}
	if err != nil {
		return gateway.Node{}, dbError(err, "store: heartbeat")
	}
	return n, nil
}

// GetNode returns a node's record; a missing one is CodeNotFound.
func (db *DB) GetNode(ctx context.Context, id string) (gateway.Node, error) {
	n, err := scanNode(db.queryRow(ctx, db.r, `SELECT `+nodeColumns+` FROM nodes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Node{}, gateway.Errorf(gateway.CodeNotFound, "node %s not found", id)
	}
	if err != nil {
		return gateway.Node{}, dbError(err, "store: get node")
	}
	return n, nil
}

// ListNodes returns every node's record, by id.
func (db *DB) ListNodes(ctx context.Context) ([]gateway.Node, error) {
	rows, err := db.query(ctx, db.r, `SELECT `+nodeColumns+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, dbError(err, "store: list nodes")
	}
	defer rows.Close()
	out := []gateway.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, dbError(err, "store: list nodes")
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: list nodes")
	}
	return out, nil
}

// LiveVMsByNode counts the VMs that are not final, by owner node: the load
// placement compares, exact at the moment of the query (heartbeats lag).
func (db *DB) LiveVMsByNode(ctx context.Context) (map[string]int, error) {
	rows, err := db.query(ctx, db.r, `SELECT node, COUNT(*) FROM vms WHERE state IN `+liveStatesSQL+` GROUP BY node`)
	if err != nil {
		return nil, dbError(err, "store: count vms by node")
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			node string
			n    int
		)
		if err := rows.Scan(&node, &n); err != nil {
			return nil, dbError(err, "store: count vms by node")
		}
		out[node] = n
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: count vms by node")
	}
	return out, nil
}

// DrainNode cordons a live node until deadline: placement skips it and the
// node leaves once its VMs are gone or at the deadline. Draining a draining
// node keeps its first deadline; a dead node is CodeConflict with its state
// in Details["state"]; a missing one CodeNotFound.
func (db *DB) DrainNode(ctx context.Context, id string, deadline time.Time) (gateway.Node, error) {
	var out gateway.Node
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		n, err := scanNode(db.queryRow(ctx, tx, `SELECT `+nodeColumns+` FROM nodes WHERE id = ?`+db.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "node %s not found", id)
		}
		if err != nil {
			return dbError(err, "store: get node")
		}
		switch n.State {
		case gateway.NodeDead:
			return gateway.Errorf(gateway.CodeConflict, "node %s is dead", id).WithDetail("state", string(n.State))
		case gateway.NodeDraining:
			out = n
			return nil
		}
		n.State, n.DrainDeadline = gateway.NodeDraining, deadline.UTC().Truncate(time.Microsecond)
		if _, err := db.exec(ctx, tx, `UPDATE nodes SET state = ?, drain_deadline = ? WHERE id = ?`,
			string(n.State), db.d.ts(n.DrainDeadline), id); err != nil {
			return dbError(err, "store: drain node")
		}
		out = n
		return nil
	})
	return out, err
}

// LeaveNode records that a node stopped on purpose, with reason, and marks
// whatever VMs it still owned lost (its shutdown disposes them; one that
// failed to is gone with the node's sidecars all the same).
func (db *DB) LeaveNode(ctx context.Context, id, reason string) error {
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockNodes(ctx, tx); err != nil {
			return err
		}
		if _, err := db.exec(ctx, tx, `UPDATE nodes SET state = ?, reason = ?, vms = 0, sidecars = 0, rss = 0 WHERE id = ?`,
			string(gateway.NodeDead), reason, id); err != nil {
			return dbError(err, "store: leave node")
		}
		_, err := db.markVMsLost(ctx, tx, `node = ?`, []any{id}, "its node "+id+" stopped")
		return err
	})
}

// ReapedNode is a node ReapDeadNodes declared dead, with the VMs it marked
// lost.
type ReapedNode struct {
	Node string
	VMs  []string
}

// ReapDeadNodes declares dead every live or draining node but self whose
// heartbeat is older than timeout (a node never reaps itself: a late tick of
// its own is not its death), marks its VMs lost with a reason naming it, unloads
// their agent sessions and drops their pending permission requests, all in
// one transaction under the nodes' advisory lock: when several gateways
// reap at once, exactly one of them changes each node and its VMs, the
// others find nothing to do.
func (db *DB) ReapDeadNodes(ctx context.Context, self string, timeout time.Duration) ([]ReapedNode, error) {
	var out []ReapedNode
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockNodes(ctx, tx); err != nil {
			return err
		}
		now := db.now()
		rows, err := db.query(ctx, tx, `UPDATE nodes SET state = ?, reason = ? WHERE state <> ? AND heartbeat_at < ? AND id <> ? RETURNING id`,
			string(gateway.NodeDead), "no heartbeat for "+timeout.String(), string(gateway.NodeDead), db.d.ts(now.Add(-timeout)), self)
		if err != nil {
			return dbError(err, "store: reap nodes")
		}
		var dead []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return dbError(err, "store: reap nodes")
			}
			dead = append(dead, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dbError(err, "store: reap nodes")
		}
		decision, err := encodeDecision(&gateway.PermissionDecision{By: gateway.DecidedByAgent, Status: "not_pending", Reason: "vm_ended", At: now})
		if err != nil {
			return err
		}
		for _, node := range dead {
			reason := "its node " + node + " stopped answering (no heartbeat for " + timeout.String() + ")"
			ids, err := db.markVMsLost(ctx, tx, `node = ?`, []any{node}, reason)
			if err != nil {
				return err
			}
			for _, vm := range ids {
				if _, err := db.exec(ctx, tx, `UPDATE agent_sessions SET state = ?, updated_at = ? WHERE vm_id = ? AND state <> ?`,
					string(gateway.SessionUnloaded), db.d.ts(now), vm, string(gateway.SessionUnloaded)); err != nil {
					return dbError(err, "store: unload sessions")
				}
				if _, err := db.exec(ctx, tx, `UPDATE session_permissions SET status = ?, decision = ? WHERE vm_id = ? AND status = ?`,
					gateway.PermissionDropped, decision, vm, gateway.PermissionPending); err != nil {
					return dbError(err, "store: drop pending permissions")
				}
			}
			out = append(out, ReapedNode{Node: node, VMs: ids})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
