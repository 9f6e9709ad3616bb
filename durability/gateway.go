package durability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentos-gateway/agentos-gateway/internal/gatewayproc"
)

// proc is one gateway process of the run: the only one on SQLite, one of
// two on PostgreSQL. It keeps its address, data directory and node id
// across restarts.
type proc struct {
	id   string
	url  string
	opts gatewayproc.Options

	p *gatewayproc.Process // the current run; nil before the first start
}

// newProc prepares a node in dir; start runs it.
func newProc(bin, dir, id, dsn string, parallel int) (*proc, error) {
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	for _, d := range []string{data, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("durability: %w", err)
		}
	}
	addr, err := gatewayproc.FreeAddr()
	if err != nil {
		return nil, fmt.Errorf("durability: %w", err)
	}
	// A VM to a sidecar: a sidecar kill ends the one VM whose sequence
	// asked for it. No warm VMs: each would hold a sidecar of its own.
	args := []string{"--data-dir", data, "--log-level", "info",
		"--vms-per-sidecar", "1", "--max-sidecars", strconv.Itoa(parallel + 2), "--min-idle-sidecars", "1",
		"--warm-vms", "0", "--shutdown-grace", "90s", "--wake-timeout", "90s"}
	if dsn != "" {
		args = append(args, "--store", dsn, "--node-id", id, "--node-heartbeat", "300ms", "--node-timeout", "5s")
	}
	return &proc{id: id, url: "http://" + addr, opts: gatewayproc.Options{
		Bin: bin, Args: args, Addr: addr, Log: filepath.Join(dir, "gateway.log"), Key: adminKey,
		Env: []string{"AGENTOS_GATEWAY_ADMIN_KEY=" + adminKey, "AGENTOS_GATEWAY_CLUSTER_SECRET=" + clusterSecret, "TMPDIR=" + tmp},
	}}, nil
}

// The run's secrets: its gateways listen on loopback only, for the run.
const (
	adminKey      = "agk_durability_0123456789abcdefghijklmnopqrstuv"
	clusterSecret = "durability-cluster-secret-0123456789"
)

// start runs the node and waits until it is ready.
func (n *proc) start(ctx context.Context) error {
	p, err := gatewayproc.Start(ctx, n.opts)
	if err != nil {
		return fmt.Errorf("durability: node %s: %w", n.id, err)
	}
	n.p = p
	return nil
}

// stop sends SIGTERM (the gateway hibernates its VMs) and waits for the
// exit, SIGKILLing the gateway after timeout.
func (n *proc) stop(timeout time.Duration) error { return n.wrap(n.p.Stop(timeout)) }

// wait waits for the exit (a drained node exits by itself), SIGKILLing
// the gateway after timeout. A clean exit is nil.
func (n *proc) wait(timeout time.Duration) error { return n.wrap(n.p.Wait(timeout)) }

func (n *proc) wrap(err error) error {
	if err != nil {
		return fmt.Errorf("durability: node %s: %w (log: %s)", n.id, err, n.opts.Log)
	}
	return nil
}

// running reports whether the node was started and has not exited.
func (n *proc) running() bool { return n.p != nil && n.p.Running() }
