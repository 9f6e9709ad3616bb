package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// exampleAdminKey is the admin key of the gateway the examples run against.
const exampleAdminKey = "agk_client_examples_admin_key_0123456789"

// TestMain starts a real gateway (the server binary, built here, over the
// engine `make setup` installed) and a mock model for the examples, which
// read AGENTOS_URL, AGENTOS_API_KEY and ANTHROPIC_BASE_URL as a
// user's program would; then it runs the tests and stops both, leaving no
// process behind.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentos-gateway-client-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	mock, err := mockanthropic.Listen()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gw, err := startGateway(dir)
	if err != nil {
		mock.Close()
		fmt.Fprintln(os.Stderr, "client examples:", err)
		return 1
	}
	os.Setenv("AGENTOS_URL", gw.url)
	os.Setenv("AGENTOS_API_KEY", exampleAdminKey)
	os.Setenv("ANTHROPIC_BASE_URL", mock.URL())
	os.Setenv("ANTHROPIC_API_KEY", mockanthropic.APIKey)
	os.Setenv("MOCK_MODEL_PORT", strconv.Itoa(mock.Port()))
	code := m.Run()
	if err := gw.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "client examples: stop the gateway:", err)
		code = 1
	}
	if err := mock.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// gateway is a gateway process of the examples.
type gateway struct {
	cmd  *exec.Cmd
	url  string
	done chan error
}

// startGateway builds the server and starts it on a free loopback port with
// its data in dir, and waits until it is ready.
func startGateway(dir string) (*gateway, error) {
	bin := filepath.Join(dir, "agentos-gateway")
	build := exec.Command("go", "build", "-o", bin, "../cmd/server")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the gateway: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logs, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	cmd := exec.Command(bin, "--addr", addr, "--data-dir", filepath.Join(dir, "data"), "--shutdown-grace", "5s")
	cmd.Env = append(os.Environ(), "AGENTOS_GATEWAY_ADMIN_KEY="+exampleAdminKey)
	cmd.Stdout, cmd.Stderr = logs, logs
	// Its own process group, so that stopping it reaches its sidecars
	// even if it dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gateway{cmd: cmd, url: "http://" + addr, done: make(chan error, 1)}
	go func() { g.done <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				http.DefaultClient.CloseIdleConnections()
				return g, nil
			}
		}
		select {
		case err := <-g.done:
			b, _ := os.ReadFile(logs.Name())
			return nil, fmt.Errorf("the gateway exited (%v):\n%s", err, b)
		case <-ctx.Done():
			g.stop()
			b, _ := os.ReadFile(logs.Name())
			return nil, fmt.Errorf("the gateway was not ready in time:\n%s", b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the gateway with SIGTERM (a clean shutdown that disposes of its
// VMs), then kills its whole group if it is not gone in 30 s.
func (g *gateway) stop() error {
	pgid := g.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	var err error
	select {
	case err = <-g.done:
	case <-time.After(30 * time.Second):
		err = errors.New("the gateway did not stop within 30 s")
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-g.done
	}
	// Whatever the gateway left in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return err
}
