package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/agentos-gateway/agentos-gateway/internal/otlpcollector"
)

// TestE2ETraces runs the real binary with OTEL_EXPORTER_OTLP_ENDPOINT set
// to an in-process OTLP/HTTP collector. An exec sent with a traceparent is
// a server span under the caller's span, named after its route, with the
// engine's and the store's spans under it, all in the caller's trace; the
// spans reach the collector when SIGTERM stops the gateway. The batch
// processor's delay is an hour, so that nothing is sent before the stop:
// what arrives was flushed by the shutdown, and the test waits for no timer.
func TestE2ETraces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	col := otlpcollector.Start()
	defer col.Close()
	bin := buildGateway(t)
	cmd, base, logs := startBinary(t, bin, t.TempDir(), "OTEL_EXPORTER_OTLP_ENDPOINT="+col.Endpoint(),
		"OTEL_BSP_SCHEDULE_DELAY=3600000", "OTEL_SERVICE_NAME=", "AGENTOS_GATEWAY_NODE_ID=trace-node")

	var vm struct{ ID string }
	if st := call(t, "POST", base+"/v1/vms", testAdminKey, map[string]any{}, &vm); st != 201 {
		t.Fatalf("create: %d\n%s", st, logs.String())
	}
	var id [24]byte
	_, _ = rand.Read(id[:])
	traceID, callerSpan := hex.EncodeToString(id[:16]), hex.EncodeToString(id[16:])
	body, _ := json.Marshal(map[string]any{"command": "echo hi"})
	req, _ := http.NewRequest("POST", base+"/v1/vms/"+vm.ID+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(answer), `hi\n`) {
		t.Fatalf("exec: %d %s", resp.StatusCode, answer)
	}
	requestID := resp.Header.Get("X-Request-ID")
	if n := len(col.Spans()); n != 0 {
		t.Fatalf("%d spans exported before the stop, with an hour's batch delay", n)
	}

	stopGateway(t, cmd, logs)
	if err := col.Err(); err != nil {
		t.Fatalf("collector: %v", err)
	}

	// The trace of the exec: the caller's trace id on every span.
	byID := map[string]otlpcollector.Span{}
	for _, s := range col.Spans() {
		if s.TraceID == traceID {
			byID[s.SpanID] = s
		}
	}
	t.Logf("the exec's trace:%s", names(slices.Collect(maps.Values(byID))))
	var server *otlpcollector.Span
	for _, s := range byID {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			server = &s
		}
	}
	if server == nil {
		t.Fatalf("no server span in trace %s; spans: %s", traceID, names(col.Spans()))
	}
	if server.Name != "POST /v1/vms/{vm}/exec" || server.ParentSpanID != callerSpan {
		t.Errorf("server span %q under %s, want POST /v1/vms/{vm}/exec under the caller's %s", server.Name, server.ParentSpanID, callerSpan)
	}
	a := server.Attributes
	if a["http.route"] != "/v1/vms/{vm}/exec" || a["http.response.status_code"] != "200" || a["agentos_gateway.request_id"] != requestID || server.Error {
		t.Errorf("server span attributes %v (error %v), request id %s", a, server.Error, requestID)
	}
	if r := server.Resource; r["service.name"] != "agentos-gateway" || r["service.instance.id"] != "trace-node" {
		t.Errorf("resource %v", r)
	}
	// under says whether s descends from the server span.
	under := func(s otlpcollector.Span) bool {
		for range 16 {
			if s.ParentSpanID == server.SpanID {
				return true
			}
			p, ok := byID[s.ParentSpanID]
			if !ok {
				return false
			}
			s = p
		}
		return false
	}
	var engine, store bool
	for _, s := range byID {
		switch {
		case s.Name == "engine ExecuteRequest" && under(s):
			engine = engine || s.Kind == tracepb.Span_SPAN_KIND_CLIENT && s.Attributes["agentos.vm.id"] != "" && !s.Error
		case strings.HasPrefix(s.Name, "store ") && under(s):
			store = store || s.Attributes["db.system.name"] == "sqlite"
		}
	}
	if !engine || !store {
		t.Errorf("engine span %v, store span %v under the server span; the trace: %s", engine, store, names(slices.Collect(maps.Values(byID))))
	}
}

// names lists spans by name, for failure messages.
func names(spans []otlpcollector.Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("\n  " + s.TraceID + " " + s.SpanID + " <- " + s.ParentSpanID + " " + s.Name)
	}
	return b.String()
}
