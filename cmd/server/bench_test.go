package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// BenchmarkExecEchoHiHTTP is exec `echo hi` through the whole gateway: HTTP on
// loopback, auth, the vms service, the pooled sidecar. bench/run.sh puts it
// next to the Go client's BenchmarkExecEchoHi and the official SDK. Like
// theirs, the timed execs run on a process that does nothing else: the warm
// VM the create took (or the first one, still filling when the create came)
// is refilled before the timer starts, as that refill's VM creation and
// warm-up commands would otherwise share the two cores and the sidecar with
// the first second or so of execs.
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
		if string(res.Stdout) != "hi\n" {
			b.Fatalf("stdout %q", res.Stdout)
		}
	}
	exec() // the VM's first process pays the runtime's warm-up
	benchWaitWarm(b, mustClient(b, g.URL, testAdminKey))
	var durs []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		exec()
		durs = append(durs, time.Since(start))
	}
	reportLatency(b, durs)
}

// BenchmarkPromptHelloHTTP is one pi turn through the whole gateway: HTTP,
// auth, the sessions service, its durable record (every event written to
// SQLite before it is published) and the pooled sidecar, against the
// offline mock model. bench/run.sh sets it next to the Go client's
// BenchmarkPromptHello: the ratio is what the gateway adds to a turn.
func BenchmarkPromptHelloHTTP(b *testing.B) {
	g := startGateway(b, "")
	mock := mockanthropic.Start(b)
	c := mustClient(b, g.URL, testAdminKey)
	ctx := ctxFor(b, 10*time.Minute)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	if err != nil {
		b.Fatal(err)
	}
	sess, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", Env: mock.Env()})
	if err != nil {
		b.Fatal(err)
	}
	turn := func() {
		res, err := c.VM(vm.ID).Session(sess.ID).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		if err != nil || res.StopReason != "end_turn" {
			b.Fatalf("prompt: %+v %v", res, err)
		}
	}
	turn() // the agent's first turn pays its start-up
	var durs []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		turn()
		durs = append(durs, time.Since(start))
	}
	reportLatency(b, durs)
}

// reportLatency reports the median and 95th percentile of the iterations'
// durations, the metrics bench/run.sh reads.
func reportLatency(b *testing.B, durs []time.Duration) {
	slices.Sort(durs)
	ms := func(q float64) float64 { return float64(durs[int(q*float64(len(durs)-1))]) / 1e6 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.95), "p95-ms")
}

// BenchmarkExecEchoHiToken is exec `echo hi` through the whole gateway with
// a tenant key and with a token bound to the VM (scope exec), side by side:
// each iteration runs one of each, in alternating order, on the same VM and
// connection pool. token/key is the ratio of their medians (target at most
// 1.05): what looking a token up and checking its scope, VM and origin
// adds to a call.
func BenchmarkExecEchoHiToken(b *testing.B) {
	g := startGateway(b, "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	c := mustClient(b, g.URL, testAdminKey)
	ctx := ctxFor(b, 10*time.Minute)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeExec}, VM: vm.ID, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"command":"echo hi"}`)
	exec := func(secret string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("POST", g.URL+"/v1/vms/"+vm.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var res struct{ Stdout string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &res) != nil || res.Stdout != "hi\n" {
			b.Fatalf("exec: %d %s", resp.StatusCode, raw)
		}
		return time.Since(start)
	}
	exec(testAdminKey)
	benchWaitWarm(b, c)
	var keyDurs, tokDurs []time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			keyDurs = append(keyDurs, exec(testAdminKey))
			tokDurs = append(tokDurs, exec(tok.Secret))
		} else {
			tokDurs = append(tokDurs, exec(tok.Secret))
			keyDurs = append(keyDurs, exec(testAdminKey))
		}
		i++
	}
	b.ReportMetric(medianMs(keyDurs), "key-p50-ms")
	b.ReportMetric(medianMs(tokDurs), "token-p50-ms")
	b.ReportMetric(medianMs(tokDurs)/medianMs(keyDurs), "token/key")
}

// timings collects durations by metric name, for the benchmarks that
// report medians of several steps.
type timings map[string][]time.Duration

// time runs f and adds its duration to name's.
func (ts timings) time(name string, f func()) {
	start := time.Now()
	f()
	ts[name] = append(ts[name], time.Since(start))
}

// medianMs is the median of ds in milliseconds (ds is sorted).
func medianMs(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / 1e6
}

// report reports every name's median.
func (ts timings) report(b *testing.B) {
	for name, ds := range ts {
		b.ReportMetric(medianMs(ds), name)
	}
}
