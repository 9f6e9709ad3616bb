package agentos

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestEngineSpans holds an exec under a traced request to a client span per
// engine request, named after the request's type, with the VM's engine id,
// and a refused request to an error span. The package's tracer follows the
// global provider, which delegates to the first one installed: this test
// installs it, and no other test of the package does.
func TestEngineSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp)
	vm := newVM(t, VMOptions{})
	sr.Reset()

	ctx, parent := tp.Tracer("test").Start(testContext(t, 60*time.Second), "request")
	res, err := vm.Exec(ctx, "echo hi", ExecOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if err := vm.signal(ctx, "no-such-process", "SIGKILL"); err == nil {
		t.Fatal("killing a process that does not exist succeeded")
	}
	parent.End()
	// Outside any trace: no span.
	if _, err := vm.Exec(context.Background(), "true", ExecOptions{}); err != nil {
		t.Fatal(err)
	}

	var exec, kill sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		switch s.Name() {
		case "engine ExecuteRequest":
			exec = s
		case "engine KillProcessRequest":
			kill = s
		case "request":
		default:
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("span %q outside the request's trace", s.Name())
			}
		}
	}
	if exec == nil || kill == nil {
		t.Fatalf("no ExecuteRequest or KillProcessRequest span among %d", len(sr.Ended()))
	}
	a := map[attribute.Key]string{}
	for _, kv := range exec.Attributes() {
		a[kv.Key] = kv.Value.Emit()
	}
	if exec.SpanKind() != trace.SpanKindClient || exec.Parent().SpanID() != parent.SpanContext().SpanID() ||
		a[attrVMID] != vm.own.VMID || a[attrRequest] != "ExecuteRequest" || exec.Status().Code == codes.Error {
		t.Errorf("exec span: kind %v, parent %v, attributes %v, status %v", exec.SpanKind(), exec.Parent().SpanID(), a, exec.Status())
	}
	if kill.Status().Code != codes.Error {
		t.Errorf("a refused request's span has status %v", kill.Status())
	}
}

// TestEngineSpanUntracedCost holds an engine request outside a recording
// trace to no allocation for its span: tracing off costs the hot path a
// context lookup.
func TestEngineSpanUntracedCost(t *testing.T) {
	s := &Sidecar{}
	var own protocol.OwnershipScope = protocol.VMOwnership{VMID: "vm"}
	var req protocol.RequestPayload = protocol.ExecuteRequest{ProcessID: "p"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if n := testing.AllocsPerRun(100, func() {
		span := s.startRequestSpan(ctx, own, req)
		endRequestSpan(span, nil)
	}); n != 0 {
		t.Fatalf("an untraced engine request's span costs %v allocations", n)
	}
}
