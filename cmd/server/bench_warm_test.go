package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// benchWarmGateway starts a gateway with args and a client of it.
func benchWarmGateway(b *testing.B, args ...string) *client.Client {
	b.Helper()
	g := startGateway(b, "", args...)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.Cleanup(hc.CloseIdleConnections)
	return mustClient(b, g.URL, testAdminKey, client.WithHTTPClient(hc))
}

// benchMetric reads one metric of the gateway, summed over its labels.
func benchMetric(b *testing.B, c *client.Client, name string) float64 {
	b.Helper()
	text, err := c.Metrics(ctxFor(b, time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	return sumMetric(string(text), name)
}

// benchWaitWarm waits until the gateway holds a warm VM: the refill that
// the last create started (or the first fill) is done, and the sidecar is
// no longer busy creating and warming it up.
func benchWaitWarm(b *testing.B, c *client.Client) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for benchMetric(b, c, "agentos_gateway_warm_vms") < 1 {
		if time.Now().After(deadline) {
			b.Fatal("the warm VM was not refilled within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// createFirstOutput is what a client waits for from asking for a VM to its
// first command's output: POST /v1/vms, then exec `echo hi`. It returns the
// whole and the create's part.
func createFirstOutput(b *testing.B, c *client.Client) (vm string, took, create time.Duration) {
	b.Helper()
	ctx := ctxFor(b, 5*time.Minute)
	start := time.Now()
	v, err := c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		b.Fatal(err)
	}
	create = time.Since(start)
	res, err := c.VM(v.ID).Exec(ctx, client.ExecRequest{Command: "echo hi"})
	if err != nil || string(res.Stdout) != "hi\n" {
		b.Fatalf("exec: %+v %v", res, err)
	}
	return v.ID, time.Since(start), create
}

// benchCreateFirstOutput times createFirstOutput; the VM is deleted outside
// the timer. With warm VMs, each iteration waits (untimed) for the pool to
// be refilled and must be a hit: the figure is a warm create's.
func benchCreateFirstOutput(b *testing.B, warm bool) {
	flag := "--warm-vms=0"
	if warm {
		flag = "--warm-vms=1"
	}
	c := benchWarmGateway(b, flag)
	ctx := ctxFor(b, 30*time.Minute)
	waitWarm := func() { benchWaitWarm(b, c) }
	del := func(vm string) {
		if _, err := c.VM(vm).Delete(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Untimed: the sidecar's first VM loads the software packages.
	if warm {
		waitWarm()
	}
	vm, _, _ := createFirstOutput(b, c)
	del(vm)
	var durs, creates []time.Duration
	for b.Loop() {
		b.StopTimer()
		if warm {
			waitWarm()
		}
		// A create that finds the gateway at rest: the sidecar has
		// finished with the refill's (or the last iteration's) work.
		time.Sleep(500 * time.Millisecond)
		hits := benchMetric(b, c, "agentos_gateway_warm_vm_hits_total")
		b.StartTimer()
		vm, d, cd := createFirstOutput(b, c)
		b.StopTimer()
		if got := benchMetric(b, c, "agentos_gateway_warm_vm_hits_total") - hits; (got == 1) != warm {
			b.Fatalf("%v warm hits in an iteration with warm=%v", got, warm)
		}
		del(vm)
		b.StartTimer()
		durs = append(durs, d)
		creates = append(creates, cd)
	}
	reportLatency(b, durs)
	slices.Sort(creates)
	b.ReportMetric(float64(creates[len(creates)/2])/1e6, "create-p50-ms")
}

// BenchmarkCreateFirstOutputWarm is create-to-first-output through HTTP on
// a gateway whose warm VM is ready; bench/run.sh compares it with
// AgentOs.create() + exec in the official SDK.
func BenchmarkCreateFirstOutputWarm(b *testing.B) { benchCreateFirstOutput(b, true) }

// BenchmarkCreateFirstOutputCold is the same without warm VMs: every create
// makes a VM and its first process pays the runtime's warm-up.
func BenchmarkCreateFirstOutputCold(b *testing.B) { benchCreateFirstOutput(b, false) }

// burstCreates is how many creates a burst makes back to back.
const burstCreates = 7

// BenchmarkCreateFirstOutputBurst is create-to-first-output of creates back
// to back on the default warm pool: an iteration waits (untimed) until the
// pool is refilled and the gateway at rest, then makes burstCreates creates
// in a row, each one's exec `echo hi` and delete done before the next
// create. The p50 is over every create of every burst; bench/run.sh
// compares it with AgentOs.create() + exec in the official SDK.
func BenchmarkCreateFirstOutputBurst(b *testing.B) {
	c := benchWarmGateway(b)
	ctx := ctxFor(b, 30*time.Minute)
	atRest := func() {
		deadline := time.Now().Add(2 * time.Minute)
		for benchMetric(b, c, "agentos_gateway_warm_vms") < benchMetric(b, c, "agentos_gateway_warm_vm_target") {
			if time.Now().After(deadline) {
				b.Fatal("the warm VMs were not refilled within 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var durs []time.Duration
	var hits float64
	for b.Loop() {
		b.StopTimer()
		atRest()
		before := benchMetric(b, c, "agentos_gateway_warm_vm_hits_total")
		b.StartTimer()
		for range burstCreates {
			vm, d, _ := createFirstOutput(b, c)
			if _, err := c.VM(vm).Delete(ctx); err != nil {
				b.Fatal(err)
			}
			durs = append(durs, d)
		}
		b.StopTimer()
		hits += benchMetric(b, c, "agentos_gateway_warm_vm_hits_total") - before
		b.StartTimer()
	}
	reportLatency(b, durs)
	b.ReportMetric(hits/float64(b.N), "hits/burst")
}

// placementVMs are the idle VM counts node memory is measured at.
var placementVMs = []int{16, 64}

// benchPlacement measures a placement rule on the defaults otherwise: exec
// `echo hi` throughput of 8 concurrent clients over 16 VMs (an iteration
// is one exec by each client), and node RSS (the gateway process and its
// sidecars) per idle VM at 16 and 64 VMs, each of which printed its first
// output. Then every VM is deleted and the node's RSS once its sidecars
// were recycled is reported, against the fresh node's.
func benchPlacement(b *testing.B, placement string) {
	// A short idle timeout, so that the recycling of sidecars after the
	// load is seen within the benchmark; it changes nothing while they
	// hold VMs.
	c := benchWarmGateway(b, "--placement="+placement, "--warm-vms=0", "--max-sidecars=4", "--sidecar-idle-timeout=10s")
	ctx := ctxFor(b, 60*time.Minute)
	base := nodeRSS(b, c)
	// Reported at the end: b.Loop drops the metrics reported before it.
	metrics := map[string]float64{"base-MiB": float64(base) / (1 << 20)}
	var vms []string
	grow := func(n int) {
		for len(vms) < n {
			vm, _, _ := createFirstOutput(b, c)
			vms = append(vms, vm)
		}
		// Let the engine settle after the last process.
		time.Sleep(2 * time.Second)
		metrics[fmt.Sprintf("MiB/VM@%d", n)] = float64(nodeRSS(b, c)) / float64(n) / (1 << 20)
		metrics[fmt.Sprintf("sidecars@%d", n)] = benchMetric(b, c, "agentos_gateway_sidecars")
	}
	grow(placementVMs[0])
	const clients = 8
	// exec runs on the clients' goroutines: it may report, not stop.
	exec := func(vm string) {
		res, err := c.VM(vm).Exec(ctx, client.ExecRequest{Command: "echo hi"})
		if err != nil || string(res.Stdout) != "hi\n" {
			b.Errorf("exec: %+v %v", res, err)
		}
	}
	start := time.Now()
	rounds := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() { exec(vms[(rounds*clients+i)%len(vms)]) })
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		rounds++
	}
	metrics["exec/s"] = float64(rounds*clients) / time.Since(start).Seconds()
	b.StopTimer()
	grow(placementVMs[1])
	for _, vm := range vms {
		if _, err := c.VM(vm).Delete(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Sidecars over --memory-high-water are stopped once idle, the others
	// after the idle timeout, and a fresh one takes the place of the warm
	// one: wait for the node to be back within 1.5 times its fresh RSS.
	deadline := time.Now().Add(time.Minute)
	for nodeRSS(b, c) > base*3/2 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	metrics["after-MiB"] = float64(nodeRSS(b, c)) / (1 << 20)
	for unit, v := range metrics {
		b.ReportMetric(v, unit)
	}
}

// BenchmarkPlacementPack is benchPlacement with --placement=pack.
func BenchmarkPlacementPack(b *testing.B) { benchPlacement(b, "pack") }

// BenchmarkPlacementSpread is benchPlacement with --placement=spread.
func BenchmarkPlacementSpread(b *testing.B) { benchPlacement(b, "spread") }

// nodeRSS is the resident memory of the node: this process, which runs
// the gateway, and every sidecar of its pool.
func nodeRSS(b *testing.B, c *client.Client) int64 {
	b.Helper()
	scs, err := c.Sidecars(ctxFor(b, time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	total := selfRSS(b)
	for _, sc := range scs {
		total += sc.RSSBytes
	}
	return total
}

// selfRSS reads this process's VmRSS.
func selfRSS(b *testing.B) int64 {
	b.Helper()
	f, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
