// Package gatewayproc runs the gateway binary as a child process, for the
// harnesses that drive it from outside (the soak, the durability run): in a
// process group of its own, its output appended to a log file, waited for
// until it is ready, stopped with SIGTERM and, past a deadline, killed with
// its sidecars.
package gatewayproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// Options say how to run the gateway.
type Options struct {
	// Bin is the gateway binary; Args its flags, besides --addr.
	Bin  string
	Args []string
	// Addr is the loopback address to listen on (FreeAddr's, to keep it
	// across restarts).
	Addr string
	// Env is added to this process's environment.
	Env []string
	// Log is the file the output is appended to.
	Log string
	// Key is a key the readiness check may use (the admin key).
	Key string
	// ReadyTimeout bounds the wait for /readyz (default 2 minutes).
	ReadyTimeout time.Duration
}

// Process is one run of the gateway.
type Process struct {
	URL string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the exit's, once exited is closed
}

// FreeAddr returns a loopback address no one listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("gatewayproc: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start runs the gateway and waits until it is ready; a gateway that exits
// first, or is not ready in time, is an error (and is killed).
func Start(ctx context.Context, o Options) (*Process, error) {
	log, err := os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gatewayproc: %w", err)
	}
	cmd := exec.Command(o.Bin, append([]string{"--addr", o.Addr}, o.Args...)...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own: a Ctrl-C of the harness reaches the gateway only
	// through Stop, which shuts it down in order; Kill ends the group, its
	// sidecars with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("gatewayproc: start the gateway: %w", err)
	}
	p := &Process{URL: "http://" + o.Addr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, o); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

func (p *Process) waitReady(ctx context.Context, o Options) error {
	c, err := client.New(p.URL, o.Key)
	if err != nil {
		return fmt.Errorf("gatewayproc: %w", err)
	}
	timeout := o.ReadyTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := c.Ready(ctx); err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("gatewayproc: the gateway exited before it was ready: %v (log: %s)", p.err, o.Log)
		case <-ctx.Done():
			return fmt.Errorf("gatewayproc: the gateway was not ready in time: %w (log: %s)", ctx.Err(), o.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PID is the gateway's process id (and its process group's).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Running reports whether the gateway has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for the exit as Wait does.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.Wait(timeout)
}

// Wait waits for the exit (a drained gateway exits by itself), killing the
// gateway's group after timeout. A clean exit is nil.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("gatewayproc: no exit within %s (killed)", timeout)
	}
	if p.err != nil {
		return fmt.Errorf("gatewayproc: the gateway exited: %w", p.err)
	}
	return nil
}

// Kill SIGKILLs the gateway's process group, the sidecars included, and
// waits for the gateway.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}
