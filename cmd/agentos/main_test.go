package main

// End-to-end tests of the agentos command: TestMain builds the gateway and
// this command, starts the gateway (with real sidecars) on a loopback port
// and a private data directory, and the tests run the command as a user
// would, as a subprocess configured by AGENTOS_URL and AGENTOS_API_KEY.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// testAdminKey is the gateway's admin key in these tests.
const testAdminKey = "agk_test_cli_admin_0123456789abcdefghij"

// stepTimeout bounds one command of a test: generous, for a loaded 2-core
// machine.
const stepTimeout = 60 * time.Second

// gw is the gateway every test talks to.
var gw struct {
	url  string
	cli  string // the agentos binary
	logs *syncBuffer
	n    atomic.Int64
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs the gateway; they skip themselves.
		os.Exit(m.Run())
	}
	os.Exit(runWithGateway(m))
}

// runWithGateway builds the binaries, runs the tests against a gateway and
// stops it, leaving no process and no file behind.
func runWithGateway(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentos-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gateway := filepath.Join(dir, "agentos-gateway")
	gw.cli = filepath.Join(dir, "agentos")
	var wg sync.WaitGroup
	var gerr, cerr error
	wg.Go(func() { gerr = build(gateway, "../server") })
	wg.Go(func() { cerr = build(gw.cli, ".") })
	wg.Wait()
	if err := cmpErr(gerr, cerr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := startGateway(gateway, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "the gateway's log:\n%s\n", tail(gw.logs.String(), 8000))
	}
	return code
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func build(out, pkg string) error {
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// startGateway runs the gateway binary with one warm VM and its state
// under dir, and returns how to stop it: SIGTERM (it stops its sidecars),
// then SIGKILL of its process group if it lingers.
func startGateway(bin, dir string) (func() error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	// A heartbeat of a second: the MCP test's quiet command then gets
	// heartbeats on /mcp's event stream, which the official client must
	// take in its stride.
	cmd := exec.Command(bin, "--addr", addr, "--data-dir", filepath.Join(dir, "data"), "--shutdown-grace", "5s",
		"--warm-vms", "1", "--on-shutdown", "dispose", "--memory-return-interval", "0", "--heartbeat", "1s")
	// A private TMPDIR: the sidecars' temporary files go with the
	// test's directory.
	cmd.Env = append(os.Environ(), "AGENTOS_GATEWAY_ADMIN_KEY="+testAdminKey, "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	gw.logs = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = gw.logs, gw.logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return fmt.Errorf("the gateway did not stop within 30 s of SIGTERM")
		}
	}
	gw.url = "http://" + addr
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(gw.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("the gateway exited: %v\n%s", err, gw.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the gateway was not ready in time\n%s", gw.logs.String())
		}
	}
}

// e2e skips a test under -short and marks it parallel.
func e2e(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the gateway")
	}
	t.Parallel()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	t.Cleanup(cancel)
	return ctx
}

// uniq returns a name no other test uses.
func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, gw.n.Add(1)) }

// adminClient is a Go client of the gateway, for what the tests set up and
// check beside the command.
func adminClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(gw.url, testAdminKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// result is one finished run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// opts tune a run: its stdin, and environment variables that replace the
// defaults (AGENTOS_URL, AGENTOS_API_KEY, and a private HOME and
// XDG_CONFIG_HOME).
type opts struct {
	stdin io.Reader
	env   map[string]string
}

// command returns the command for args, with the test's environment.
func command(t *testing.T, o opts, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(gw.cli, args...)
	home := t.TempDir()
	env := map[string]string{
		"AGENTOS_URL": gw.url, "AGENTOS_API_KEY": testAdminKey,
		"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, ".config"),
	}
	for k, v := range o.env {
		env[k] = v
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); env[k] == "" && !strings.HasPrefix(k, "AGENTOS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdin = o.stdin
	return cmd
}

// agentos runs the command to its end, killing it after stepTimeout.
func agentos(t *testing.T, o opts, args ...string) result {
	t.Helper()
	cmd := command(t, o, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(stepTimeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("agentos %s did not end in time; stdout %q, stderr %q", strings.Join(args, " "), stdout.String(), stderr.String())
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// ok runs the command and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := agentos(t, opts{}, args...)
	if r.code != 0 {
		t.Fatalf("agentos %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// fails runs the command, which must exit 1 with one line on stderr that
// holds want, and nothing on stdout.
func fails(t *testing.T, o opts, want string, args ...string) {
	t.Helper()
	r := agentos(t, o, args...)
	if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) ||
		!strings.HasPrefix(r.stderr, "agentos: ") {
		t.Fatalf("agentos %s: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
	}
}

// newVM creates a VM with the command and removes it at the end.
func newVM(t *testing.T, args ...string) string {
	t.Helper()
	out := ok(t, append([]string{"vm", "create"}, args...)...)
	id := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(id, "vm_") || strings.ContainsAny(id, " \n") {
		t.Fatalf("vm create printed %q, want the VM id alone on its line", out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		c, err := client.New(gw.url, testAdminKey)
		if err == nil {
			_, _ = c.VM(id).Delete(ctx)
		}
	})
	return id
}

// eventually polls cond until it holds, failing the test after
// stepTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in time", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// step runs a dependent subtest: a failure stops the test.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	start := time.Now()
	passed := t.Run(name, fn)
	t.Logf("%-12s %v", name, time.Since(start).Round(time.Millisecond))
	if !passed {
		t.FailNow()
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// proxy is a TCP proxy to the gateway whose connections a test can cut, as
// a network that drops them would.
type proxy struct {
	url   string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{url: "http://" + ln.Addr().String(), ln: ln}
	target := strings.TrimPrefix(gw.url, "http://")
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(out, in); out.Close() })
			p.wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// cut closes every connection open through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
