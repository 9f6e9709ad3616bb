package main

import (
	"bytes"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/pgtest"
)

// benchCluster starts two gateway binaries on a fresh PostgreSQL database
// and a VM on one of them; it returns a client of the VM's owner and one of
// the other node, whose requests for the VM are proxied to the owner.
func benchCluster(b *testing.B) (direct, proxied *client.Client, vm string) {
	b.Helper()
	base := os.Getenv("AGENTOS_GATEWAY_TEST_POSTGRES")
	if base == "" {
		b.Skip("AGENTOS_GATEWAY_TEST_POSTGRES is not set (bench/run.sh sets it)")
	}
	dsn := pgtest.Database(b, base, "cluster")
	bin := buildGateway(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(hc.CloseIdleConnections)
	var clients []*client.Client
	ids := map[string]int{}
	for i, id := range []string{"n1", "n2"} {
		// A replay log that holds the whole streamed output, so that a
		// reader falling behind for a moment loses nothing.
		n := &clusterNode{id: id, port: freePort(b), dataDir: b.TempDir(), extra: []string{"--output-buffer-bytes", "67108864"}}
		n.start(b, bin, dsn)
		clients = append(clients, mustClient(b, n.url(), testAdminKey, client.WithHTTPClient(hc)))
		ids[id] = i
	}
	v, err := clients[0].CreateVM(ctxFor(b, time.Minute), client.CreateVMRequest{})
	if err != nil {
		b.Fatal(err)
	}
	owner := ids[v.Node]
	return clients[owner], clients[1-owner], v.ID
}

// BenchmarkClusterExec is exec `echo hi` on the VM's owner node and through
// the other node (proxied over loopback), alternately, so that both see the
// same machine load. bench/run.sh reports the proxied/direct ratio.
func BenchmarkClusterExec(b *testing.B) {
	direct, proxied, vm := benchCluster(b)
	ctx := ctxFor(b, 10*time.Minute)
	exec := func(c *client.Client) time.Duration {
		start := time.Now()
		res, err := c.VM(vm).Exec(ctx, client.ExecRequest{Command: "echo hi"})
		if err != nil || string(res.Stdout) != "hi\n" {
			b.Fatalf("exec: %+v %v", res, err)
		}
		return time.Since(start)
	}
	exec(direct) // the VM's first process pays the runtime's warm-up
	var d, p []time.Duration
	for b.Loop() {
		d = append(d, exec(direct))
		p = append(p, exec(proxied))
	}
	reportPair(b, d, p, "ms", func(x time.Duration) float64 { return float64(x) / 1e6 })
}

// BenchmarkClusterSSE streams a process's output (`cat` of a 16 MiB file,
// as SSE events) from the owner node and through the other node. The cat
// waits a second, so that the stream is open before the output starts; the
// time counted starts with it.
func BenchmarkClusterSSE(b *testing.B) {
	direct, proxied, vm := benchCluster(b)
	ctx := ctxFor(b, 10*time.Minute)
	const size = 16 << 20
	content := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if _, err := direct.VM(vm).WriteFile(ctx, "/workspace/big.txt", bytes.NewReader(content), client.WriteFileOptions{}); err != nil {
		b.Fatal(err)
	}
	stream := func(c *client.Client) time.Duration {
		p, err := direct.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"sh", "-c", "sleep 1; cat /workspace/big.txt"}})
		if err != nil {
			b.Fatal(err)
		}
		var start time.Time
		n := 0
		for ev, ferr := range c.VM(vm).Process(p.Pid()).Follow(ctx) {
			if ferr != nil {
				err = ferr
				break
			}
			if o, ok := ev.(*client.Output); ok {
				if start.IsZero() {
					start = time.Now()
				}
				n += len(o.Data)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		if n != size {
			b.Fatalf("streamed %d bytes of %d", n, size)
		}
		return time.Since(start)
	}
	var d, p []time.Duration
	for b.Loop() {
		d = append(d, stream(direct))
		p = append(p, stream(proxied))
	}
	mibps := func(x time.Duration) float64 { return float64(size) / (1 << 20) / x.Seconds() }
	reportPair(b, d, p, "MiB/s", mibps)
}

// reportPair reports the medians of the direct and proxied runs in unit
// and their ratio (proxied over direct).
func reportPair(b *testing.B, direct, proxied []time.Duration, unit string, conv func(time.Duration) float64) {
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	d, p := conv(med(direct)), conv(med(proxied))
	b.ReportMetric(d, "direct-"+unit)
	b.ReportMetric(p, "proxied-"+unit)
	b.ReportMetric(p/d, "proxied/direct")
}
