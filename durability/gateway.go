package durability

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// proc is one gateway process of the run: the only one on SQLite, one of
// two on PostgreSQL. It keeps its address, data directory and node id
// across restarts.
type proc struct {
	id      string
	bin     string
	args    []string
	env     []string
	url     string
	tmpDir  string
	logPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the exit's, once exited is closed
}

// newProc prepares a node in dir; start runs it.
func newProc(bin, dir, id, dsn string, parallel int) (*proc, error) {
	n := &proc{id: id, bin: bin, tmpDir: filepath.Join(dir, "tmp"), logPath: filepath.Join(dir, "gateway.log")}
	data := filepath.Join(dir, "data")
	for _, d := range []string{data, n.tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("durability: %w", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("durability: free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	n.url = "http://" + addr
	// A VM to a sidecar: a sidecar kill ends the one VM whose sequence
	// asked for it. No warm VMs: each would hold a sidecar of its own.
	n.args = []string{"--addr", addr, "--data-dir", data, "--log-level", "info",
		"--vms-per-sidecar", "1", "--max-sidecars", strconv.Itoa(parallel + 2), "--min-idle-sidecars", "1",
		"--warm-vms", "0", "--shutdown-grace", "90s", "--wake-timeout", "90s"}
	if dsn != "" {
		n.args = append(n.args, "--store", dsn, "--node-id", id, "--node-heartbeat", "300ms", "--node-timeout", "5s")
	}
	n.env = append(os.Environ(), "AGENTOS_GATEWAY_ADMIN_KEY="+adminKey, "AGENTOS_GATEWAY_CLUSTER_SECRET="+clusterSecret,
		"TMPDIR="+n.tmpDir)
	return n, nil
}

// The run's secrets: its gateways listen on loopback only, for the run.
const (
	adminKey      = "agk_durability_0123456789abcdefghijklmnopqrstuv"
	clusterSecret = "durability-cluster-secret-0123456789"
)

// start runs the node and waits until it is ready.
func (n *proc) start(ctx context.Context) error {
	log, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("durability: %w", err)
	}
	cmd := exec.Command(n.bin, n.args...)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own: a Ctrl-C of the run reaches the gateway only
	// through stop, which shuts it down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("durability: start the gateway: %w", err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	go func() {
		n.err = cmd.Wait()
		log.Close()
		close(exited)
	}()
	c, err := client.New(n.url, adminKey)
	if err != nil {
		n.kill()
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if err := c.Ready(ctx); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("durability: node %s exited before it was ready: %v (log: %s)", n.id, n.err, n.logPath)
		case <-ctx.Done():
			n.kill()
			return fmt.Errorf("durability: node %s was not ready in time: %w (log: %s)", n.id, ctx.Err(), n.logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pid is the running process's id.
func (n *proc) pid() int { return n.cmd.Process.Pid }

// stop sends SIGTERM (the gateway hibernates its VMs) and waits for the
// exit, SIGKILLing the gateway after timeout.
func (n *proc) stop(timeout time.Duration) error {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	return n.wait(timeout)
}

// wait waits for the exit (a drained node exits by itself), SIGKILLing
// the gateway after timeout. A clean exit is nil.
func (n *proc) wait(timeout time.Duration) error {
	select {
	case <-n.exited:
	case <-time.After(timeout):
		n.kill()
		return fmt.Errorf("durability: node %s did not exit within %s (killed)", n.id, timeout)
	}
	if n.err != nil {
		return fmt.Errorf("durability: node %s exited: %w (log: %s)", n.id, n.err, n.logPath)
	}
	return nil
}

// kill SIGKILLs the node's process group, the sidecars included, and waits.
func (n *proc) kill() {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.exited
}

// running reports whether the process has not exited.
func (n *proc) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}
