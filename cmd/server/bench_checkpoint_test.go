package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkCheckpoint measures checkpoints through the gateway over HTTP, on
// the defaults (SQLite, the data directory for layers), of a VM holding 100
// files of 1 MiB in /workspace. Once: the first checkpoint, a full capture
// (full-100mib-ms). Each iteration, side by side: writing 1 MiB over one of
// the files through the files API (write-1mib-ms, the reference), then a
// checkpoint (checkpoint-api-1mib-ms, which the files API's journal tells
// what changed); ckpt/write-api is their ratio, of medians. Then a command
// copies 1 MiB into a new file and a checkpoint follows
// (checkpoint-guest-1mib-ms): guest code may have written anywhere, so the
// tree is compared with a find the VM runs; ckpt-guest/write is that one's
// ratio to the same reference.
func BenchmarkCheckpoint(b *testing.B) {
	g := startGateway(b, "")
	c := mustClient(b, g.URL, testAdminKey, client.WithHTTPClient(&http.Client{}))
	ctx := ctxFor(b, 60*time.Minute)
	never := time.Duration(0)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{CheckpointInterval: &never,
		Limits: map[string]any{"resources": map[string]any{"maxFilesystemBytes": 512 << 20}}})
	if err != nil {
		b.Fatal(err)
	}
	const files = 100
	tree := []treeEntry{{name: "data", typ: tar.TypeDir, mode: 0o755}}
	for i := range files {
		tree = append(tree, treeEntry{name: fmt.Sprintf("data/f%d.bin", i), typ: tar.TypeReg, mode: 0o644, size: 1 << 20})
	}
	body, wait := streamTree(tree, false)
	_, err = c.VM(vm.ID).UploadArchive(ctx, "/workspace/tree", body, client.ArchiveOptions{Mkdirs: true})
	if werr := wait(); err == nil {
		err = werr
	}
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if _, err := c.VM(vm.ID).Checkpoint(ctx); err != nil {
		b.Fatal(err)
	}
	full := time.Since(start)

	durs := timings{}
	mib := make([]byte, 1<<20)
	i := 0
	for b.Loop() {
		_, _ = rand.Read(mib)
		name := fmt.Sprintf("/workspace/tree/data/f%d.bin", i%files)
		durs.time("write-1mib-ms", func() {
			if _, err := c.VM(vm.ID).WriteFile(ctx, name, bytes.NewReader(mib), client.WriteFileOptions{}); err != nil {
				b.Fatal(err)
			}
		})
		durs.time("checkpoint-api-1mib-ms", func() {
			if _, err := c.VM(vm.ID).Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
		})
		cmd := fmt.Sprintf("cp /workspace/tree/data/f%d.bin /workspace/tree/copy-%d.bin", i%files, i)
		if res, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: cmd}); err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %+v %v", cmd, res, err)
		}
		durs.time("checkpoint-guest-1mib-ms", func() {
			if _, err := c.VM(vm.ID).Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
		})
		i++
	}
	b.ReportMetric(float64(full)/1e6, "full-100mib-ms")
	durs.report(b)
	write := medianMs(durs["write-1mib-ms"])
	b.ReportMetric(medianMs(durs["checkpoint-api-1mib-ms"])/write, "ckpt/write-api")
	b.ReportMetric(medianMs(durs["checkpoint-guest-1mib-ms"])/write, "ckpt-guest/write")
	if _, err := c.VM(vm.ID).Delete(ctx); err != nil {
		b.Fatal(err)
	}
}
