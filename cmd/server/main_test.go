package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removesBinary{m},
		// The HTTP client's idle keep-alive connections belong to
		// http.DefaultTransport, not to the code under test.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// testAdminKey is long enough for the store's key rules.
const testAdminKey = "agk_test_admin_0123456789abcdefghijkl"

// gatewayProc is a gateway running in this test process through run(), the
// same code path as the binary.
type gatewayProc struct {
	URL     string
	dataDir string
	cancel  context.CancelFunc
	done    chan error
	logs    *syncBuffer
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

// withDefaultFlags puts each of flags ("--name=value") before args unless
// args set that flag themselves.
func withDefaultFlags(args []string, flags ...string) []string {
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		if !slices.ContainsFunc(args, func(a string) bool { return a == name || strings.HasPrefix(a, name+"=") }) {
			args = append([]string{f}, args...)
		}
	}
	return args
}

// startGateway runs a gateway on a free loopback port with a fresh data
// directory (or dataDir, to restart on an old one) and stops it at cleanup.
func startGateway(t testing.TB, dataDir string, args ...string) *gatewayProc {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	env := map[string]string{
		"AGENTOS_GATEWAY_ADMIN_KEY": testAdminKey,
		"AGENTOS_GATEWAY_DATA_DIR":  dataDir,
		"AGENTOS_GATEWAY_ADDR":      "127.0.0.1:0",
		"AGENTOS_GATEWAY_HEARTBEAT": "1s",
	}
	if _, bench := t.(*testing.B); !bench {
		// Tests get one warm VM, not the default's four: the suite starts
		// a gateway per test, four at a time on a 2-core machine, and three
		// more warm-ups each would cost it minutes (config_test and
		// TestE2EWarmBurst check the default). And they return no memory:
		// that acts on the whole process, which holds many gateways at
		// once, and their trimmers would force a collection of every
		// gateway's heap, under -race, every few seconds (memtrim's own
		// tests cover it). And their VMs are disposed when they stop, not
		// hibernated: every test ends with a stop, and a capture of each
		// VM's files would only add to the suite's time (the hibernation
		// tests ask for it). Benchmarks run the defaults.
		args = withDefaultFlags(args, "--warm-vms=1", "--memory-return-interval=0", "--on-shutdown=dispose")
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &gatewayProc{dataDir: dataDir, cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	ready := make(chan string, 1)
	go func() {
		g.done <- run(ctx, args, func(k string) string { return env[k] }, g.logs, ready)
	}()
	select {
	case addr := <-ready:
		g.URL = "http://" + addr
	case err := <-g.done:
		cancel()
		t.Fatalf("gateway did not start: %v\n%s", err, g.logs.String())
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("gateway did not start in time\n%s", g.logs.String())
	}
	t.Cleanup(func() { g.stop(t) })
	waitReady(t, g.URL)
	return g
}

func (g *gatewayProc) stop(t testing.TB) {
	g.cancel()
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("gateway: %v", err)
		}
		g.done <- nil // a second stop returns at once
	case <-time.After(90 * time.Second):
		t.Errorf("gateway did not stop\n%s", g.logs.String())
	}
}

func waitReady(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway at %s not ready: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call is a minimal JSON request helper for the process-level tests; the
// end-to-end suite uses the typed client.
func call(t testing.TB, method, url, key string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// gatewayBinary is the gateway binary the process-level tests run: built
// once for the whole test process, since a build costs seconds of both
// cores even when every package is cached (the link), and a dozen tests
// each used to build their own. TestMain removes it.
var gatewayBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// removesBinary runs the tests, then removes the gateway binary they built.
type removesBinary struct{ m *testing.M }

func (r removesBinary) Run() int {
	code := r.m.Run()
	if gatewayBinary.dir != "" {
		os.RemoveAll(gatewayBinary.dir)
	}
	return code
}

// buildGateway returns the path of the gateway binary, building it on the
// first call.
func buildGateway(t testing.TB) string {
	t.Helper()
	g := &gatewayBinary
	g.once.Do(func() {
		if g.dir, g.err = os.MkdirTemp("", "agentos-gateway-bin-"); g.err != nil {
			return
		}
		g.path = filepath.Join(g.dir, "agentos-gateway")
		if out, err := exec.Command("go", "build", "-o", g.path, ".").CombinedOutput(); err != nil {
			g.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if g.err != nil {
		t.Fatalf("build the gateway: %v", g.err)
	}
	return g.path
}

// TestSIGTERMShutdownAndRestart runs the real binary: SIGTERM ends a live
// process stream with a final event, disposes VMs, stops sidecars and exits
// 0 leaving no process behind; a restart on the same data directory shows
// the VM that was live as lost.
func TestSIGTERMShutdownAndRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildGateway(t)
	dataDir := t.TempDir()
	start := func() (*exec.Cmd, string, *syncBuffer) { return startBinary(t, bin, dataDir) }
	cmd, base, logs := start()
	var vm struct{ ID, State string }
	if st := call(t, "POST", base+"/v1/vms", testAdminKey, map[string]any{}, &vm); st != 201 {
		t.Fatalf("create: %d", st)
	}
	var proc struct{ Pid int }
	if st := call(t, "POST", base+"/v1/vms/"+vm.ID+"/processes", testAdminKey, map[string]any{"command": "sleep 600"}, &proc); st != 201 {
		t.Fatalf("spawn: %d", st)
	}
	var sidecars struct{ Items []struct{ Pid int } }
	call(t, "GET", base+"/v1/sidecars", testAdminKey, nil, &sidecars)
	if len(sidecars.Items) == 0 {
		t.Fatal("no sidecars listed")
	}
	// Follow the process's output; SIGTERM must end it with a final event.
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/vms/%s/processes/%d/output", base, vm.ID, proc.Pid), nil)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	streamBody := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		streamBody <- string(b)
	}()

	stopGateway(t, cmd, logs)
	select {
	case body := <-streamBody:
		if !strings.Contains(body, "event: error") && !strings.Contains(body, "event: exit") {
			t.Fatalf("stream ended without a final event: %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream did not end")
	}
	for _, sc := range sidecars.Items {
		if alive(sc.Pid) {
			t.Fatalf("sidecar %d outlived the gateway", sc.Pid)
		}
	}

	// A VM left live by a gateway that did not shut down cleanly shows as
	// lost after a restart: kill the second run with SIGKILL.
	cmd2, base2, _ := start()
	var vm2 struct{ ID string }
	if st := call(t, "POST", base2+"/v1/vms", testAdminKey, map[string]any{}, &vm2); st != 201 {
		t.Fatalf("create: %d", st)
	}
	call(t, "GET", base2+"/v1/sidecars", testAdminKey, nil, &sidecars)
	cmd2.Process.Kill()
	cmd2.Wait()
	for _, sc := range sidecars.Items {
		waitDead(t, sc.Pid)
	}
	_, base3, _ := start()
	var got struct{ State, Reason string }
	call(t, "GET", base3+"/v1/vms/"+vm2.ID, testAdminKey, nil, &got)
	if got.State != "lost" || got.Reason == "" {
		t.Fatalf("after restart: %+v", got)
	}
	call(t, "GET", base3+"/v1/vms/"+vm.ID, testAdminKey, nil, &got)
	if got.State != "disposed" {
		t.Fatalf("cleanly shut down vm: %+v", got)
	}
}

// stopGateway sends the gateway binary cmd SIGTERM and waits, at most a
// minute, for it to exit cleanly; logs are its output, for the failure.
func stopGateway(t testing.TB, cmd *exec.Cmd, logs *syncBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not exit after SIGTERM\n%s", logs.String())
	}
}

// startBinary runs the gateway binary on a free port with dataDir and the
// environment variables env ("NAME=value") besides the test's, waits until
// it is ready and kills it at cleanup if it still runs.
func startBinary(t testing.TB, bin, dataDir string, env ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	port := freePort(t)
	// One warm VM, and VMs disposed at a stop, as startGateway's tests get,
	// for the same reasons.
	cmd := exec.Command(bin, "--addr", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", dataDir, "--shutdown-grace", "5s", "--warm-vms", "1", "--on-shutdown", "dispose")
	// A private TMPDIR: a gateway the test SIGKILLs cannot remove its
	// sidecars' temporary directories, and they must not outlive the test.
	cmd.Env = append(os.Environ(), "AGENTOS_GATEWAY_ADMIN_KEY="+testAdminKey, "TMPDIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitReady(t, base)
	return cmd, base, logs
}

// killGateway SIGKILLs the gateway binary cmd, which c calls, and waits
// until it and its sidecars are gone (the sidecars end by themselves when
// their gateway dies).
func killGateway(t testing.TB, cmd *exec.Cmd, c *client.Client) {
	t.Helper()
	sidecars, err := c.Sidecars(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, sc := range sidecars {
		waitDead(t, sc.Pid)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*netTCPAddr).Port
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func waitDead(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(-pid, syscall.SIGKILL)
			t.Fatalf("sidecar %d outlived its gateway", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
