package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkExecEchoHiHTTP is exec `echo hi` through the whole gateway: HTTP on
// loopback, auth, the vms service, the pooled sidecar. bench/run.sh puts it
// next to the Go client's BenchmarkExecEchoHi and the official SDK.
func BenchmarkExecEchoHiHTTP(b *testing.B) {
	g := startGateway(b, "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	post := func(path string, body any, out any) {
		buf, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", g.URL+path, bytes.NewReader(buf))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			b.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	var vm struct{ ID string }
	post("/v1/vms", map[string]any{}, &vm)
	exec := func() {
		var res struct{ Stdout string }
		post("/v1/vms/"+vm.ID+"/exec", map[string]any{"command": "echo hi"}, &res)
		if res.Stdout != "hi\n" {
			b.Fatalf("stdout %q", res.Stdout)
		}
	}
	exec() // the VM's first process pays the runtime's warm-up
	var durs []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		exec()
		durs = append(durs, time.Since(start))
	}
	slices.Sort(durs)
	ms := func(q float64) float64 { return float64(durs[int(q*float64(len(durs)-1))]) / 1e6 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.95), "p95-ms")
}
