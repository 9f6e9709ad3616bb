package main

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkHibernate measures hibernation through the gateway over HTTP,
// on the defaults (SQLite, the data directory for images). For VMs holding
// 1 MiB and 100 MiB of files in /workspace, each iteration hibernates the
// VM (hibernate-<n>mib-ms), then times an exec of echo hi on the hibernated
// VM, which wakes it (wake-<n>mib-ms: wake to first output), and beside it
// the reference: POST /v1/vms with fromSnapshot of a snapshot of the same
// VM, then the same exec (fromsnapshot-<n>mib-ms), whose VM is deleted;
// wake/fromsnapshot-<n>mib is their ratio, of medians. Then the sidecars'
// resident memory (the gateway runs in this process, shared with the
// benchmark) with 32 idle VMs running, and after they hibernated
// (rss-32-running-mib, rss-32-hibernated-mib).
func BenchmarkHibernate(b *testing.B) {
	g := startGateway(b, "")
	c := mustClient(b, g.URL, testAdminKey, client.WithHTTPClient(&http.Client{}))
	ctx := ctxFor(b, 60*time.Minute)
	limits := map[string]any{"resources": map[string]any{"maxFilesystemBytes": 512 << 20}}
	echo := func(vm string) {
		res, err := c.VM(vm).Exec(ctx, client.ExecRequest{Command: "echo hi"})
		if err != nil || string(res.Stdout) != "hi\n" {
			b.Fatalf("echo hi: %+v %v", res, err)
		}
	}
	sizes := []int64{1, 100}
	vms, snaps := map[int64]string{}, map[int64]string{}
	for _, mib := range sizes {
		vms[mib] = vmHolding(ctx, b, c, limits, mib)
		snap, err := c.VM(vms[mib]).CreateSnapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		snaps[mib] = snap.ID
	}
	durs := timings{}
	for b.Loop() {
		for _, mib := range sizes {
			n := strconv.FormatInt(mib, 10) + "mib-ms"
			durs.time("hibernate-"+n, func() {
				if _, err := c.VM(vms[mib]).Hibernate(ctx); err != nil {
					b.Fatal(err)
				}
			})
			durs.time("wake-"+n, func() { echo(vms[mib]) })
			var fresh string
			durs.time("fromsnapshot-"+n, func() {
				vm, err := c.CreateVM(ctx, client.CreateVMRequest{Limits: limits, FromSnapshot: snaps[mib]})
				if err != nil {
					b.Fatal(err)
				}
				fresh = vm.ID
				echo(fresh)
			})
			if _, err := c.VM(fresh).Delete(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	durs.report(b)
	for _, mib := range sizes {
		n := strconv.FormatInt(mib, 10) + "mib"
		b.ReportMetric(medianMs(durs["wake-"+n+"-ms"])/medianMs(durs["fromsnapshot-"+n+"-ms"]), "wake/fromsnapshot-"+n)
	}
	for _, id := range vms {
		if _, err := c.VM(id).Delete(ctx); err != nil {
			b.Fatal(err)
		}
	}

	// Memory: 32 idle VMs running, then hibernated.
	sidecarsRSS := func() float64 {
		scs, err := c.Sidecars(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		for _, sc := range scs {
			total += sc.RSSBytes
		}
		return float64(total) / (1 << 20)
	}
	var idle []string
	for range 32 {
		vm, err := c.CreateVM(ctx, client.CreateVMRequest{})
		if err != nil {
			b.Fatal(err)
		}
		echo(vm.ID)
		idle = append(idle, vm.ID)
	}
	time.Sleep(2 * time.Second)
	b.ReportMetric(sidecarsRSS(), "rss-32-running-mib")
	for _, id := range idle {
		if _, err := c.VM(id).Hibernate(ctx); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	b.ReportMetric(sidecarsRSS(), "rss-32-hibernated-mib")
	if rss, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(rss), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				b.Logf("benchmark process (the gateway and the benchmark) %s", strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
			}
		}
	}
}
