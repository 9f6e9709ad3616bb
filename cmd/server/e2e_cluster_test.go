package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
	"github.com/agentos-gateway/agentos-gateway/internal/pgtest"
)

// Cluster timings of the test: short, so that a dead node is found out
// quickly, and still many heartbeats per timeout on a loaded machine. With
// a 3 s timeout, a VM placed on a node that had just restarted (starting
// its sidecars and warm VM) answered lost in one fresh clone's run: most
// likely a heartbeat 3 s late, which makes the others declare it dead.
const (
	clusterHeartbeat = 300 * time.Millisecond
	clusterTimeout   = 5 * time.Second
	clusterSecret    = "e2e-cluster-secret-0123456789"
)

// clusterNode is one gateway binary of the cluster test.
type clusterNode struct {
	id      string
	port    int
	dataDir string
	// extra are flags of this node's own.
	extra  []string
	cmd    *exec.Cmd
	logs   *syncBuffer
	e      *e2e
	c      *client.Client
	exited chan error
}

func (n *clusterNode) url() string { return "http://127.0.0.1:" + strconv.Itoa(n.port) }

// start runs the node's binary on the cluster's store and waits until it
// is ready.
func (n *clusterNode) start(t testing.TB, bin, dsn string) {
	t.Helper()
	args := []string{"--addr", "127.0.0.1:" + strconv.Itoa(n.port), "--data-dir", n.dataDir, "--store", dsn,
		"--node-id", n.id, "--node-heartbeat", clusterHeartbeat.String(), "--node-timeout", clusterTimeout.String(),
		"--max-sidecars", "2", "--min-idle-sidecars", "1", "--shutdown-grace", "5s", "--log-level", "warn",
		// One warm VM, as startGateway's tests get: a node's three more
		// warm-ups would slow every other test of the suite. VMs disposed
		// at a stop, as there too (extra may ask for hibernation).
		"--warm-vms", "1", "--on-shutdown", "dispose"}
	n.cmd = exec.Command(bin, append(args, n.extra...)...)
	// A private TMPDIR: a node the test SIGKILLs cannot remove its
	// sidecars' temporary directories, and they must not outlive the test.
	n.cmd.Env = append(os.Environ(), "AGENTOS_GATEWAY_ADMIN_KEY="+testAdminKey, "AGENTOS_GATEWAY_CLUSTER_SECRET="+clusterSecret,
		"TMPDIR="+t.TempDir())
	n.logs = &syncBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan error, 1)
	cmd, exited := n.cmd, n.exited
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	waitReady(t, n.url())
}

// testCluster is gateway binaries sharing a fresh database of the test
// PostgreSQL, with an HTTP client validating every answer against the spec.
type testCluster struct {
	nodes    []*clusterNode
	bin, dsn string
	hc       *http.Client
}

// startCluster starts n nodes, n1 to n<n>, each with the extra flags, and
// waits until each is ready; without the test PostgreSQL it skips t.
func startCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	base := os.Getenv("AGENTOS_GATEWAY_TEST_POSTGRES")
	if base == "" {
		t.Skip("AGENTOS_GATEWAY_TEST_POSTGRES is not set (make test sets it)")
	}
	cl := &testCluster{dsn: pgtest.Database(t, base, "cluster"), bin: buildGateway(t)}
	doc := apispec.MustLoad(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cl.hc = &http.Client{Transport: apispec.Transport(t, doc, tr)}
	for i := range n {
		node := &clusterNode{id: fmt.Sprintf("n%d", i+1), port: freePort(t), dataDir: t.TempDir(), extra: extra}
		node.start(t, cl.bin, cl.dsn)
		node.e = &e2e{t: t, gw: &gatewayProc{URL: node.url()}, doc: doc, tr: tr, hc: cl.hc, n: new(atomic.Int64)}
		node.c = mustClient(t, node.url(), testAdminKey, client.WithHTTPClient(cl.hc))
		node.e.admin = node.c
		cl.nodes = append(cl.nodes, node)
	}
	return cl
}

// wait waits for the node's process to exit and returns its error.
func (n *clusterNode) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-n.exited:
		n.exited <- err
		return err
	case <-time.After(d):
		t.Fatalf("node %s did not exit within %s\n%s", n.id, d, n.logs.String())
		return nil
	}
}

// nodeJSON is GET /v1/nodes's item, as the test reads it.
type nodeJSON struct {
	ID    string `json:"id"`
	State string `json:"state"`
	VMs   int    `json:"vms"`
	Self  bool   `json:"self"`
}

// TestE2ECluster is the "done when" of scale-out: one PostgreSQL, three
// real gateway binaries on loopback. It places VMs from one node onto the
// others, uses every VM through every node (exec, files, a resumed process
// stream, a shell WebSocket, an agent session), admits exactly a tenant's
// quota from concurrent creates on all nodes, drains a node, SIGKILLs one
// (whose checkpointed VM another node restores) and restarts it, and leaves
// no process behind.
func TestE2ECluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs three gateway binaries")
	}
	cl := startCluster(t, 3)
	nodes, bin, dsn, hc := cl.nodes, cl.bin, cl.dsn, cl.hc
	mock := mockanthropic.Start(t)
	ctx := ctxFor(t, 10*time.Minute)

	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	var sidecarPids []int
	collectSidecars := func(n *clusterNode) {
		scs, err := n.c.Sidecars(ctx)
		if err != nil {
			t.Fatalf("sidecars of %s: %v", n.id, err)
		}
		for _, sc := range scs {
			if sc.Pid > 0 && !slices.Contains(sidecarPids, sc.Pid) {
				sidecarPids = append(sidecarPids, sc.Pid)
			}
		}
	}
	listNodes := func(via *clusterNode) map[string]nodeJSON {
		t.Helper()
		resp, b := via.e.send("GET", "/v1/nodes", testAdminKey, nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /v1/nodes via %s: %d %s", via.id, resp.StatusCode, b)
		}
		var list struct{ Items []nodeJSON }
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		out := map[string]nodeJSON{}
		for _, n := range list.Items {
			out[n.ID] = n
		}
		return out
	}
	if got := listNodes(n2); len(got) != 3 || got["n1"].State != "live" || !got["n2"].Self || got["n3"].State != "live" {
		t.Fatalf("nodes: %+v", got)
	}

	// Three creates through node 1: least-loaded placement puts one VM on
	// each node, so two of them land on nodes 2 and 3.
	owner := map[string]string{} // vm id → node id
	var vmIDs []string
	for range 3 {
		vm := n1.e.agentVM(n1.c, mock, "pi")
		owner[vm.ID] = vm.Node
		vmIDs = append(vmIDs, vm.ID)
	}
	placed := slices.Sorted(func(yield func(string) bool) {
		for _, n := range owner {
			if !yield(n) {
				return
			}
		}
	})
	if !slices.Equal(placed, []string{"n1", "n2", "n3"}) {
		t.Fatalf("VMs created through n1 placed on %v; want one on each node", placed)
	}
	for _, n := range nodes {
		collectSidecars(n)
	}

	// The serving node names itself, and the client cannot tell otherwise.
	for _, vm := range vmIDs {
		resp, b := n1.e.send("GET", "/v1/vms/"+vm, testAdminKey, nil, nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-AgentOS-Node") != owner[vm] || len(resp.Header.Values("X-AgentOS-Node")) != 1 {
			t.Fatalf("GET %s via n1: %d, X-AgentOS-Node %q, want %s: %s", vm, resp.StatusCode, resp.Header.Values("X-AgentOS-Node"), owner[vm], b)
		}
	}

	// A request that claims to come from another node without the
	// secret's signature is refused.
	forged, b := n1.e.send("GET", "/v1/vms/"+vmIDs[1], testAdminKey, nil, map[string]string{"X-AgentOS-Forwarded-By": "n2 1764590000 AAAA"})
	if forged.StatusCode != 401 {
		t.Fatalf("a forged forwarded request: %d %s", forged.StatusCode, b)
	}

	// Every VM through every node.
	for i, vm := range vmIDs {
		sid := "s-" + vm
		if _, err := nodes[i].c.VM(vm).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi", Env: mock.Env()}); err != nil {
			t.Fatalf("open session on %s (owner %s) via %s: %v", vm, owner[vm], nodes[i].id, err)
		}
		for _, via := range nodes {
			// Not subtests: the e2e helpers fail the test they were made for.
			t.Logf("%s (on %s) through %s", vm, owner[vm], via.id)
			useVM(t, via, nodes, vm, sid)
		}
	}
	for _, n := range nodes {
		collectSidecars(n)
	}

	// A tenant at its quota: concurrent creates from all three nodes admit
	// exactly the quota between them.
	_, key := n1.e.tenantWithKey("quota", &client.Quotas{MaxVMs: 2})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []string
		refused  int
	)
	for i := range 6 {
		via := nodes[i%3]
		wg.Go(func() {
			vm, err := mustClient(t, via.url(), key, client.WithHTTPClient(hc)).CreateVM(ctx, client.CreateVMRequest{})
			mu.Lock()
			defer mu.Unlock()
			var ce *client.Error
			switch {
			case err == nil:
				admitted = append(admitted, vm.ID)
			case errors.As(err, &ce) && ce.Code == "resource_exhausted":
				refused++
			default:
				t.Errorf("create via %s: %v", via.id, err)
			}
		})
	}
	wg.Wait()
	if len(admitted) != 2 || refused != 4 {
		t.Fatalf("quota 2: %d admitted, %d refused; want 2 and 4", len(admitted), refused)
	}
	quotaClient := mustClient(t, n2.url(), key, client.WithHTTPClient(hc))
	for _, vm := range admitted {
		if _, err := quotaClient.VM(vm).Delete(ctx); err != nil {
			t.Fatalf("delete %s: %v", vm, err)
		}
	}

	// Drain node 3 (it still runs a VM, so it stays up, draining): new VMs
	// avoid it, whichever node is asked.
	resp, b := n1.e.send("POST", "/v1/nodes/n3/drain?deadlineSeconds=600", testAdminKey, nil, nil)
	if resp.StatusCode != 202 {
		t.Fatalf("drain n3: %d %s", resp.StatusCode, b)
	}
	eventually(t, 10*clusterHeartbeat, "n3 draining", func() bool { return listNodes(n3)["n3"].State == "draining" })
	// From its next heartbeat on, it tells a load balancer it is not ready.
	eventually(t, 10*clusterHeartbeat, "n3's /readyz to answer 503", func() bool {
		resp, err := http.Get(n3.url() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	var extra []string
	for _, via := range []*clusterNode{n3, n1} {
		vm, err := via.c.CreateVM(ctx, client.CreateVMRequest{})
		if err != nil {
			t.Fatalf("create via %s while n3 drains: %v", via.id, err)
		}
		if vm.Node == "n3" {
			t.Fatalf("a VM created via %s while n3 drains was placed on n3", via.id)
		}
		owner[vm.ID] = vm.Node
		extra = append(extra, vm.ID)
	}

	// Node 2 dies (SIGKILL) while a stream of one of its VMs is proxied
	// through node 1.
	var n2VM string
	for _, vm := range vmIDs {
		if owner[vm] == "n2" {
			n2VM = vm
		}
	}
	// It has a checkpoint, taken through n1.
	if _, err := n1.c.VM(n2VM).WriteFile(ctx, "/workspace/kept.txt", strings.NewReader("kept-"+n2VM), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if ck, err := n1.c.VM(n2VM).Checkpoint(ctx); err != nil || ck.CheckpointAt == nil {
		t.Fatalf("checkpoint of n2's VM through n1: %+v %v", ck, err)
	}
	proc, err := n1.c.VM(n2VM).Spawn(ctx, client.SpawnRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	outReq := n1.e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", n2VM, proc.Pid()))
	stream, err := n1.c.VM(n2VM).Process(proc.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := n2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = n2.wait(t, 10*time.Second)
	// Its VMs answer lost, from the nodes still alive, within the timeout
	// (and the heartbeats it takes to notice).
	within := clusterTimeout + 4*clusterHeartbeat + 2*time.Second
	for _, via := range []*clusterNode{n1, n3} {
		eventually(t, within-time.Since(killed), "n2's VM lost via "+via.id, func() bool {
			vm, err := via.c.VM(n2VM).Get(ctx)
			return err == nil && vm.State == client.VMLost
		})
		_, err := via.c.VM(n2VM).Exec(ctx, client.ExecRequest{Command: "true"})
		if ce := wantCode(t, err, "conflict", 409); ce.Details["state"] != "lost" {
			t.Fatalf("exec on n2's VM via %s: %v", via.id, ce)
		}
	}
	t.Logf("n2's VMs were lost %s after the SIGKILL (timeout %s)", time.Since(killed).Round(time.Millisecond), clusterTimeout)
	evs := n1.e.collect(stream, outReq, within)
	if last := evs[len(evs)-1]; last.Type != "lost" {
		t.Fatalf("the stream proxied to n2 ended with %s %s; want lost", last.Type, last.Data)
	}
	if got := listNodes(n1)["n2"].State; got != "dead" {
		t.Fatalf("n2 is %s; want dead", got)
	}
	// Its agent session's record and history are read from PostgreSQL by
	// the nodes alive.
	for _, via := range []*clusterNode{n1, n3} {
		if s := mustSession(t, via.c, n2VM, "s-"+n2VM); s.State != client.SessionLost {
			t.Fatalf("n2's session via %s: %+v", via.id, s)
		}
		hist, err := via.c.VM(n2VM).Session("s-"+n2VM).History(ctx, client.HistoryQuery{Limit: 1000})
		if err != nil || len(hist.Events) == 0 {
			t.Fatalf("n2's session history via %s: %+v %v", via.id, hist, err)
		}
	}
	// n2's VM is restorable from its checkpoint: a wake through n1 brings
	// it back there, under its id, with its file (read through n3).
	if lost, err := n3.c.VM(n2VM).Get(ctx); err != nil || !lost.Restorable || lost.CheckpointAt == nil {
		t.Fatalf("n2's lost VM: %+v %v", lost, err)
	}
	restored, err := n1.c.VM(n2VM).Wake(ctx)
	if err != nil || restored.State != client.VMReady || restored.Node != "n1" || restored.Restorable {
		t.Fatalf("restore of n2's VM through n1: %+v %v", restored, err)
	}
	if got := n3.e.exec(n3.c, n2VM, "cat /workspace/kept.txt"); got != "kept-"+n2VM {
		t.Fatalf("n2's VM after its restore: %q", got)
	}
	owner[n2VM] = "n1"
	// The other VMs keep working, through the nodes alive.
	alive := func() []string {
		var out []string
		for vm, node := range owner {
			if node != "n2" {
				out = append(out, vm)
			}
		}
		return out
	}
	for _, vm := range alive() {
		for _, via := range []*clusterNode{n1, n3} {
			if got := via.e.exec(via.c, vm, "echo still-"+vm); got != "still-"+vm+"\n" {
				t.Fatalf("exec on %s via %s after n2 died: %q", vm, via.id, got)
			}
		}
	}

	// Node 2 restarts with its id and rejoins; nobody else's VM changes.
	n2.start(t, bin, dsn)
	collectSidecars(n2)
	if got := listNodes(n1)["n2"].State; got != "live" {
		t.Fatalf("n2 after its restart is %s; want live", got)
	}
	for _, vm := range alive() {
		got, err := n2.c.VM(vm).Get(ctx)
		if err != nil || got.State != client.VMReady || got.Node != owner[vm] {
			t.Fatalf("%s after n2 rejoined: %+v %v", vm, got, err)
		}
	}
	rejoined := n3.e.vm(n3.c, client.CreateVMRequest{})
	if rejoined.Node != "n2" {
		t.Fatalf("a VM created after n2 rejoined went to %s; want the least-loaded n2", rejoined.Node)
	}
	if got := n1.e.exec(n1.c, rejoined.ID, "echo back"); got != "back\n" {
		t.Fatalf("exec on n2's new VM via n1: %q", got)
	}

	// The drained node exits by itself once its last VM is gone.
	for vm, node := range owner {
		if node == "n3" {
			if _, err := n1.c.VM(vm).Delete(ctx); err != nil {
				t.Fatalf("delete %s: %v", vm, err)
			}
		}
	}
	if err := n3.wait(t, 30*time.Second); err != nil {
		t.Fatalf("n3 after its drain: %v\n%s", err, n3.logs.String())
	}
	eventually(t, 5*time.Second, "n3 dead", func() bool { return listNodes(n1)["n3"].State == "dead" })

	// A stream that n1 proxies from n2 ends, when n1 shuts down, as n1's
	// own streams do.
	sleeper, err := n1.c.VM(rejoined.ID).Spawn(ctx, client.SpawnRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	sleepReq := n1.e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", rejoined.ID, sleeper.Pid()))
	sleepStream, err := n1.c.VM(rejoined.ID).Process(sleeper.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// SIGTERM the others; no gateway or sidecar process is left.
	for _, n := range []*clusterNode{n1, n2} {
		collectSidecars(n)
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if n == n1 {
			evs := n1.e.collect(sleepStream, sleepReq, 30*time.Second)
			if last := evs[len(evs)-1]; last.Type != "error" || !strings.Contains(string(last.Data), `"unavailable"`) {
				t.Fatalf("the stream proxied through n1 ended with %s %s at its shutdown", last.Type, last.Data)
			}
		}
		if err := n.wait(t, 60*time.Second); err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", n.id, err, n.logs.String())
		}
	}
	for _, pid := range sidecarPids {
		waitDead(t, pid)
	}
}

// useVM runs exec, a file round trip, a resumed process stream, a shell
// over a WebSocket and an agent prompt on vm through node via.
func useVM(t *testing.T, via *clusterNode, nodes []*clusterNode, vm, sid string) {
	ctx := ctxT(t)
	c := via.c
	tag := via.id
	if got := via.e.exec(c, vm, "echo hi-"+tag); got != "hi-"+tag+"\n" {
		t.Fatalf("exec: %q", got)
	}

	content := bytes.Repeat([]byte("cluster "+tag+"\n"), 64<<10) // 640 KiB: streamed both ways
	p := "/workspace/" + tag + ".txt"
	if _, err := c.VM(vm).WriteFile(ctx, p, bytes.NewReader(content), client.WriteFileOptions{}); err != nil {
		t.Fatalf("upload: %v", err)
	}
	rc, err := c.VM(vm).ReadFile(ctx, p)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("download: %d bytes, %v; want %d", len(got), err, len(content))
	}

	// Mounts and software through any node.
	mnt := "/mnt/" + tag
	if _, err := c.VM(vm).Mount(ctx, client.MountRequest{Path: mnt, Driver: client.MountMemory}); err != nil {
		t.Fatalf("mount: %v", err)
	}
	if ms, err := c.VM(vm).Mounts(ctx); err != nil || !slices.ContainsFunc(ms, func(m client.Mount) bool { return m.Path == mnt }) {
		t.Fatalf("mounts: %+v, %v", ms, err)
	}
	if err := c.VM(vm).Unmount(ctx, mnt); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	if l, err := c.VM(vm).LinkSoftware(ctx, "@agentos-software/pi"); err != nil || l.Name != "pi" {
		t.Fatalf("link software: %+v, %v", l, err)
	}
	if sw, err := c.VM(vm).Software(ctx); err != nil || !slices.ContainsFunc(sw, func(s client.Software) bool { return s.Name == "pi" }) {
		t.Fatalf("software: %+v, %v", sw, err)
	}

	proc, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"sh", "-c", "echo one; echo two; echo three"}})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	path := fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm, proc.Pid())
	s, err := c.VM(vm).Process(proc.Pid()).Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := via.e.collect(s, via.e.eventReq("GET", path), e2eTimeout)
	if out := output(t, all, "stdout"); out != "one\ntwo\nthree\n" {
		t.Fatalf("process output %q (%s)", out, summarize(all))
	}
	// Resumed through another node, after the first event.
	other := nodes[(slices.Index(nodes, via)+1)%len(nodes)]
	s, err = other.c.VM(vm).Process(proc.Pid()).Output(ctx, client.StreamOptions{LastEventID: all[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	rest := other.e.collect(s, other.e.eventReq("GET", path), e2eTimeout)
	if out := output(t, rest, "stdout"); out != strings.TrimPrefix(output(t, all, "stdout"), output(t, all[:1], "stdout")) {
		t.Fatalf("resumed via %s after %s: %q", other.id, all[0].ID, out)
	}

	// A shell over a WebSocket.
	id, err := c.VM(vm).OpenShell(ctxT(t), client.ShellRequest{})
	if err != nil {
		t.Fatalf("open shell: %v", err)
	}
	a := via.e.attach(t, "/v1/vms/"+url.PathEscape(vm)+"/shells/"+id.ID()+"/attach", false)
	a.waitHello()
	a.send("echo ws-" + tag + "\r")
	a.waitFor(0, "ws-"+tag)
	a.send("exit\r")
	a.waitFrame("exit")

	res, err := c.VM(vm).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello from " + tag)})
	if err != nil || res.StopReason == "" {
		t.Fatalf("prompt: %+v %v", res, err)
	}
	hist, err := c.VM(vm).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
	if err != nil || len(hist.Events) == 0 {
		t.Fatalf("history: %v", err)
	}
}
