package main

// End-to-end tests of warm VMs (--warm-vms), placement (--placement) and the
// recycling of sidecars over --memory-high-water, on real sidecars.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// warmTimeout is how long a warm VM may take to be created and warmed up
// on a loaded machine (its first process alone has taken seconds there).
const warmTimeout = 90 * time.Second

// waitWarm waits until n warm VMs are ready.
func (e *e2e) waitWarm(n int) {
	e.t.Helper()
	eventually(e.t, warmTimeout, fmt.Sprintf("%d warm VMs ready", n), func() bool {
		return e.metric("agentos_gateway_warm_vms") == float64(n)
	})
}

// warmCounts returns the hits and misses counted so far.
func (e *e2e) warmCounts() (hits, misses float64) {
	e.t.Helper()
	b, err := e.admin.Metrics(ctxT(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return sumMetric(string(b), "agentos_gateway_warm_vm_hits_total"), sumMetric(string(b), "agentos_gateway_warm_vm_misses_total")
}

// TestE2EWarmVMs checks which creates a warm VM serves: the default spec,
// and specs whose differences are applied after creation (env, labels, the
// idle timeout), count as hits, get the spec's env in their processes and
// are refilled; a spec that needs a new VM is a miss that still works.
// Either way the record names this node as the VM's owner.
func TestE2EWarmVMs(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--warm-vms=1", "--node-id=warm-node")
	e.waitWarm(1)
	for i, tc := range []struct {
		name      string
		req       client.CreateVMRequest
		hit       bool
		wantInEnv string
	}{
		{name: "default spec", req: client.CreateVMRequest{}, hit: true},
		{name: "env and labels", req: client.CreateVMRequest{Env: map[string]string{"GREETING": "warm"}, Labels: map[string]string{"team": "docs"}, IdleTimeout: 10 * time.Minute}, hit: true, wantInEnv: "GREETING=warm"},
		{name: "loopback ports need a new VM", req: client.CreateVMRequest{LoopbackExemptPorts: []uint16{9}, Env: map[string]string{"GREETING": "cold"}}, wantInEnv: "GREETING=cold"},
		{name: "limits need a new VM", req: client.CreateVMRequest{Limits: map[string]any{"resources": map[string]any{"maxProcesses": 64}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			e.t = t
			if tc.hit {
				e.waitWarm(1)
			}
			hits0, misses0 := e.warmCounts()
			vm := e.vm(e.admin, tc.req)
			hits, misses := e.warmCounts()
			if want := map[bool][2]float64{true: {hits0 + 1, misses0}, false: {hits0, misses0 + 1}}[tc.hit]; hits != want[0] || misses != want[1] {
				t.Fatalf("hits %v misses %v after create %d, want %v", hits, misses, i, want)
			}
			// A warm VM is local to its node, and recorded as its.
			if vm.Node != "warm-node" || vm.SidecarID == "" {
				t.Fatalf("vm %+v: want node warm-node and a sidecar", vm)
			}
			if got := vm.Labels; tc.req.Labels != nil && got["team"] != "docs" {
				t.Fatalf("labels %v", got)
			}
			if got := e.exec(e.admin, vm.ID, "echo hi"); got != "hi\n" {
				t.Fatalf("echo hi: %q", got)
			}
			env := e.exec(e.admin, vm.ID, "env")
			if tc.wantInEnv != "" && !slices.Contains(strings.Split(env, "\n"), tc.wantInEnv) {
				t.Fatalf("env lacks %s:\n%s", tc.wantInEnv, env)
			}
			if _, err := e.admin.VM(vm.ID).Delete(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
	e.t = t
	// Each hit was refilled: the pool created its first VM and one per hit.
	e.waitWarm(1)
	if n := e.metric("agentos_gateway_warm_vm_refill_seconds_count"); n != 3 {
		t.Fatalf("refills %v, want 3 (the first fill and one per hit)", n)
	}
	if s := e.metric("agentos_gateway_warm_vm_refill_seconds_sum"); s <= 0 {
		t.Fatalf("refill time %v, want > 0", s)
	}
}

// TestE2EWarmVMsNeverSharedAndFree races more creates than there are warm
// VMs: every create succeeds, each on a VM of its own (a marker file one VM
// writes is seen by no other), at most the ready warm VMs are hits; and
// warm VMs count against no tenant's quota until one is taken.
func TestE2EWarmVMsNeverSharedAndFree(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--warm-vms=2")
	e.waitWarm(2)

	t.Run("concurrent creates", func(t *testing.T) {
		e := e.sub(t)
		e.t = t
		defer func() { e.t = t }()
		const n = 6
		vms := make([]*client.VM, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { vms[i], errs[i] = e.admin.CreateVM(ctxT(t), client.CreateVMRequest{}) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
		}
		hits, misses := e.warmCounts()
		if hits < 2 || hits+misses != n {
			t.Fatalf("hits %v misses %v, want at least the 2 ready warm VMs taken and %d creates counted", hits, misses, n)
		}
		for _, vm := range vms {
			e.exec(e.admin, vm.ID, "touch /workspace/"+vm.ID)
		}
		for _, vm := range vms {
			if got := e.exec(e.admin, vm.ID, "ls /workspace"); got != vm.ID+"\n" {
				t.Fatalf("vm %s sees %q in /workspace, want only its own marker", vm.ID, got)
			}
			if _, err := e.admin.VM(vm.ID).Delete(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("quota", func(t *testing.T) {
		e := e.sub(t)
		e.t = t
		defer func() { e.t = t }()
		e.waitWarm(2)
		_, c := e.tenant(e.uniq("warm-quota"), &client.Quotas{MaxVMs: 1})
		// Two warm VMs exist, yet the tenant's one slot is free.
		vm := e.vm(c, client.CreateVMRequest{})
		_, err := c.CreateVM(ctxT(t), client.CreateVMRequest{})
		wantCode(t, err, client.CodeResourceExhausted, 429)
		hits, _ := e.warmCounts()
		list, err := c.ListVMs(ctxT(t), client.ListVMsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].ID != vm.ID {
			t.Fatalf("tenant lists %+v, want only its VM %s", list.Items, vm.ID)
		}
		// The refused create took no warm VM: one is left until the refill.
		if ready := e.metric("agentos_gateway_warm_vms"); ready < 1 {
			t.Fatalf("%v warm VMs ready after a refused create, want the untaken one", ready)
		}
		if h, _ := e.warmCounts(); h != hits {
			t.Fatalf("hits went from %v to %v on a refused create", hits, h)
		}
		if _, err := c.VM(vm.ID).Delete(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestE2EWarmBurst makes creates back to back, more than a pool of
// several warm VMs holds: each create, its first command and its delete
// end before the next create, and the ready warm VMs serve the first of
// them. The pool aims at its size again and refills once the creates are
// quiet. Two warm VMs show it as well as the default's four (config_test
// checks the default, BenchmarkCreateFirstOutputBurst times it), at half
// the warm-ups on a loaded machine.
func TestE2EWarmBurst(t *testing.T) {
	t.Parallel()
	const size, creates = 2, 4
	e := newE2E(t, fmt.Sprintf("--warm-vms=%d", size))
	e.waitWarm(size)
	if got := e.metric("agentos_gateway_warm_vm_target"); got != size {
		t.Fatalf("warm VM target %v, want %d", got, size)
	}
	hits, _ := e.warmCounts()
	for i := range creates {
		vm := e.vm(e.admin, client.CreateVMRequest{})
		if got := e.exec(e.admin, vm.ID, "echo hi"); got != "hi\n" {
			t.Fatalf("create %d: echo hi printed %q", i, got)
		}
		if _, err := e.admin.VM(vm.ID).Delete(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	// A refill may end within the burst when a create, its command and its
	// delete outlast the quiet period on a loaded machine: at least the
	// ready ones were hits.
	if h, _ := e.warmCounts(); h-hits < size {
		t.Fatalf("%v of %d creates back to back were warm hits, want at least the %d ready", h-hits, creates, size)
	}
	e.waitWarm(size)
}

// TestE2EWarmVMsShutdown stops a gateway holding warm VMs: the stop
// succeeds, every sidecar is gone (the goroutines are checked by TestMain).
func TestE2EWarmVMsShutdown(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--warm-vms=2")
	e.waitWarm(2)
	scs, err := e.admin.Sidecars(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	warmOn := 0
	for _, sc := range scs {
		warmOn += sc.VMCount
	}
	if warmOn != 2 {
		t.Fatalf("sidecars %+v hold %d VMs, want the 2 warm ones", scs, warmOn)
	}
	e.tr.CloseIdleConnections()
	e.gw.stop(t)
	for _, sc := range scs {
		if processAlive(sc.Pid) {
			t.Errorf("sidecar %s (pid %d) outlived the gateway", sc.ID, sc.Pid)
		}
	}
}

// processAlive reports whether pid is a live agentos-sidecar.
func processAlive(pid int) bool {
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(cmd), "agentos-sidecar")
}

// TestE2EPlacement observes each placement rule through the sidecar a VM
// lands on, with a warm sidecar kept idle: pack puts every VM (and the warm
// VM) on one sidecar, spread puts each on its own.
func TestE2EPlacement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		placement string
		warm      string
		distinct  int
	}{
		{"pack", "--warm-vms=1", 1},
		{"spread", "--warm-vms=0", 3},
	} {
		t.Run(tc.placement, func(t *testing.T) {
			e := newE2E(t, "--placement="+tc.placement, tc.warm, "--min-idle-sidecars=1", "--max-sidecars=4")
			if tc.warm == "--warm-vms=1" {
				e.waitWarm(1)
			}
			on := map[string]int{}
			for range 3 {
				vm := e.vm(e.admin, client.CreateVMRequest{Limits: map[string]any{"resources": map[string]any{"maxProcesses": 64}}})
				on[vm.SidecarID]++
			}
			if len(on) != tc.distinct {
				t.Fatalf("VMs on sidecars %v, want %d distinct", on, tc.distinct)
			}
			for sc, n := range on {
				want := n
				if tc.placement == "pack" {
					want = n + 1 // the warm VM packs there too
					e.waitWarm(1)
				}
				if got := e.metric("agentos_gateway_sidecar_vms", `sidecar="`+sc+`"`); got != float64(want) {
					t.Fatalf("metric says %v VMs on %s, want %d", got, sc, want)
				}
			}
		})
	}
}

// TestE2EMemoryHighWaterRecycle sets a high-water mark a sidecar passes
// with its first VM's first process: the next create goes to a new
// sidecar, the live VM keeps working on the draining one, and the drained
// sidecar is stopped once that VM is gone.
func TestE2EMemoryHighWaterRecycle(t *testing.T) {
	t.Parallel()
	// 100 MiB: a fresh sidecar is about 21 MiB, one that ran a process
	// about 250 MiB.
	e := newE2E(t, "--memory-high-water=104857600", "--warm-vms=0", "--min-idle-sidecars=1")
	a := e.vm(e.admin, client.CreateVMRequest{})
	e.exec(e.admin, a.ID, "echo hi")
	pidA := e.sidecarPid(a)
	b := e.vm(e.admin, client.CreateVMRequest{})
	if b.SidecarID == a.SidecarID {
		t.Fatalf("b placed on %s, the sidecar over the mark", b.SidecarID)
	}
	scs, err := e.admin.Sidecars(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		if sc.ID == a.SidecarID && (sc.State != "draining" || sc.VMCount != 1) {
			t.Fatalf("sidecar %+v, want draining with a's VM", sc)
		}
	}
	if got := e.exec(e.admin, a.ID, "echo still"); got != "still\n" {
		t.Fatalf("a on the draining sidecar: %q", got)
	}
	if _, err := e.admin.VM(a.ID).Delete(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "the drained sidecar stopped", func() bool { return !processAlive(pidA) })
	if n := e.metric("agentos_gateway_sidecar_retired_total"); n != 1 {
		t.Fatalf("retired %v, want 1", n)
	}
	if got := e.exec(e.admin, b.ID, "echo hi"); got != "hi\n" {
		t.Fatalf("b after the recycle: %q", got)
	}
}

// TestE2ETenantAffinity: by default each tenant's VMs go to sidecars that
// hold no other tenant's (so that one tenant's stalled sidecar cannot slow
// another's VMs), a warm VM included, until --max-sidecars is reached, when
// a VM shares rather than fail, counted; --tenant-affinity=false packs
// tenants together.
func TestE2ETenantAffinity(t *testing.T) {
	t.Parallel()
	t.Run("default", func(t *testing.T) {
		e := newE2E(t, "--max-sidecars=2", "--warm-vms=1")
		e.waitWarm(1)
		_, a := e.tenant("affine-a", nil)
		_, b := e.tenant("affine-b", nil)
		_, c := e.tenant("affine-c", nil)
		va := e.vm(a, client.CreateVMRequest{}) // takes the warm VM
		e.waitWarm(1)                           // the refill packs onto a's sidecar
		vb := e.vm(b, client.CreateVMRequest{}) // leaves it: a's sidecar is not b's
		if vb.SidecarID == va.SidecarID {
			t.Fatalf("b's VM placed on %s with a's", vb.SidecarID)
		}
		if got := e.metric("agentos_gateway_sidecar_shared_placements_total"); got != 0 {
			t.Fatalf("shared placements %v before the cap", got)
		}
		va2 := e.vm(a, client.CreateVMRequest{}) // the warm VM on a's sidecar suits a
		if va2.SidecarID != va.SidecarID {
			t.Fatalf("a's second VM on %s, its first on %s", va2.SidecarID, va.SidecarID)
		}
		// Two sidecars run, each another tenant's to c: c shares one.
		vc := e.vm(c, client.CreateVMRequest{})
		if vc.SidecarID != va.SidecarID && vc.SidecarID != vb.SidecarID {
			t.Fatalf("c's VM on %s, a third sidecar past --max-sidecars=2", vc.SidecarID)
		}
		if got := e.metric("agentos_gateway_sidecar_shared_placements_total"); got != 1 {
			t.Fatalf("shared placements %v, want 1", got)
		}
		for _, v := range []struct {
			c  *client.Client
			id string
		}{{a, va.ID}, {b, vb.ID}, {a, va2.ID}, {c, vc.ID}} {
			if got := e.exec(v.c, v.id, "echo hi"); got != "hi\n" {
				t.Fatalf("exec in %s: %q", v.id, got)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		e := newE2E(t, "--max-sidecars=2", "--warm-vms=0", "--tenant-affinity=false")
		_, a := e.tenant("packed-a", nil)
		_, b := e.tenant("packed-b", nil)
		va := e.vm(a, client.CreateVMRequest{})
		vb := e.vm(b, client.CreateVMRequest{})
		if vb.SidecarID != va.SidecarID {
			t.Fatalf("without affinity b's VM went to %s, a's is on %s with room", vb.SidecarID, va.SidecarID)
		}
	})
}
