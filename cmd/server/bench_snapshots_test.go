package main

import (
	"archive/tar"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkFork measures forks through the gateway over HTTP. Each
// iteration forks a VM with the default tree (one snapshot frame) into
// three VMs (per-vm-ms: the fork's time per new VM) and into one (fork-ms),
// then VMs holding 10, 50 and 100 MiB more in /workspace into one each (the
// size-to-time curve, 10mib-ms, 50mib-ms and 100mib-ms, with 100mib/10mib,
// their ratio, and MiB/s at 100 MiB); medians over the iterations. The new
// VMs are deleted before the next iteration.
func BenchmarkFork(b *testing.B) {
	g := startGateway(b, "")
	c := mustClient(b, g.URL, testAdminKey, client.WithHTTPClient(&http.Client{}))
	ctx := ctxFor(b, 30*time.Minute)
	limits := map[string]any{"resources": map[string]any{"maxFilesystemBytes": 512 << 20}}
	sizes := []int64{0, 10, 50, 100}
	vms := map[int64]string{}
	for _, mib := range sizes {
		vms[mib] = vmHolding(ctx, b, c, limits, mib)
	}
	fork := func(vm string, count int) time.Duration {
		start := time.Now()
		forks, err := c.VM(vm).Fork(ctx, count)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range forks {
			if _, err := c.VM(f.ID).Delete(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return d
	}
	durs := timings{}
	for b.Loop() {
		durs["per-vm-ms"] = append(durs["per-vm-ms"], fork(vms[0], 3)/3)
		for _, mib := range sizes {
			name := "fork-ms"
			if mib > 0 {
				name = strconv.FormatInt(mib, 10) + "mib-ms"
			}
			durs[name] = append(durs[name], fork(vms[mib], 1))
		}
	}
	durs.report(b)
	b.ReportMetric(medianMs(durs["100mib-ms"])/medianMs(durs["10mib-ms"]), "100mib/10mib")
	b.ReportMetric(100/(medianMs(durs["100mib-ms"])/1000), "MiB/s")
}

// vmHolding creates a VM with limits whose /workspace/tree/data holds mib
// MiB more, in files of at most 16 MiB, as a working tree has them.
func vmHolding(ctx context.Context, b *testing.B, c *client.Client, limits map[string]any, mib int64) string {
	b.Helper()
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	if mib == 0 {
		return vm.ID
	}
	tree := []treeEntry{{name: "data", typ: tar.TypeDir, mode: 0o755}}
	for i, left := 0, mib<<20; left > 0; i++ {
		n := min(left, 16<<20)
		tree = append(tree, treeEntry{name: fmt.Sprintf("data/f%d.bin", i), typ: tar.TypeReg, mode: 0o644, size: n})
		left -= n
	}
	body, wait := streamTree(tree, false)
	_, err = c.VM(vm.ID).UploadArchive(ctx, "/workspace/tree", body, client.ArchiveOptions{Mkdirs: true})
	if werr := wait(); err == nil {
		err = werr
	}
	if err != nil {
		b.Fatal(err)
	}
	return vm.ID
}
