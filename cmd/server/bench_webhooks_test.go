package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkWebhooks measures the outbox (issue 24): exec echo hi with an
// Idempotency-Key for a tenant whose "*" subscription gets its exec.done
// (the outcome and the event in one transaction, then a delivery) beside
// the same exec for a tenant without one, alternating; and the time from
// an event's creation to its receipt by a receiver on loopback.
func BenchmarkWebhooks(b *testing.B) {
	g := startGateway(b, "", "--webhook-allow", "127.0.0.1")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	admin := mustClient(b, g.URL, testAdminKey)
	ctx := ctxFor(b, 10*time.Minute)
	var (
		mu      sync.Mutex
		latency []time.Duration
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := time.Now()
		raw, _ := io.ReadAll(r.Body)
		var body client.WebhookEvent
		if json.Unmarshal(raw, &body) == nil {
			mu.Lock()
			latency = append(latency, got.Sub(body.CreatedAt))
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rc.Close()
	tenant := func(name string) (string, string) {
		tn, err := admin.CreateTenant(ctx, client.TenantCreate{Name: name})
		if err != nil {
			b.Fatal(err)
		}
		k, err := admin.CreateKey(ctx, tn.ID)
		if err != nil {
			b.Fatal(err)
		}
		vm, err := mustClient(b, g.URL, k.Key).CreateVM(ctx, client.CreateVMRequest{})
		if err != nil {
			b.Fatal(err)
		}
		return k.Key, vm.ID
	}
	hookKey, hookVM := tenant("with-webhook")
	plainKey, plainVM := tenant("without")
	if _, err := mustClient(b, g.URL, hookKey).CreateWebhook(ctx, client.WebhookRequest{URL: rc.URL, Events: []string{client.EventAll}}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"command":"echo hi"}`)
	n := 0
	exec := func(key, vm string) time.Duration {
		n++
		start := time.Now()
		req, _ := http.NewRequest("POST", g.URL+"/v1/vms/"+vm+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", n))
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("exec: %d %s", resp.StatusCode, raw)
		}
		return time.Since(start)
	}
	exec(hookKey, hookVM)
	exec(plainKey, plainVM)
	benchWaitWarm(b, admin)
	var hookDurs, plainDurs []time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			plainDurs = append(plainDurs, exec(plainKey, plainVM))
			hookDurs = append(hookDurs, exec(hookKey, hookVM))
		} else {
			hookDurs = append(hookDurs, exec(hookKey, hookVM))
			plainDurs = append(plainDurs, exec(plainKey, plainVM))
		}
		i++
	}
	b.StopTimer()
	// Every exec.done of the loop arrives.
	want := i + 1
	eventually(b, time.Minute, "the loop's deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(latency) >= want
	})
	mu.Lock()
	lat := append([]time.Duration(nil), latency...)
	mu.Unlock()
	b.ReportMetric(medianMs(plainDurs), "exec-p50-ms")
	b.ReportMetric(medianMs(hookDurs), "exec-outbox-p50-ms")
	b.ReportMetric(medianMs(hookDurs)/medianMs(plainDurs), "outbox/plain")
	b.ReportMetric(medianMs(lat), "event-to-receipt-p50-ms")
}
