package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// spans is the recorder behind the global provider that the store's
// tracer follows, installed once for the package's tests: the global
// provider delegates to the first one installed, for good.
var spans = sync.OnceValue(func() *tracetest.SpanRecorder {
	sr := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	return sr
})

// TestStoreSpans holds the store's operations under a traced request to one
// span each, named after the method: a statement's with its verb and text
// (placeholders, no values), a transaction's covering its statements; and
// operations outside any trace to none.
func TestStoreSpans(t *testing.T) {
	sr := spans()
	db := openTest(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := testContext(t)
	mustTenant(t, db, "t_traced")
	sr.Reset()

	parentCtx, parent := otel.Tracer("test").Start(ctx, "request")
	if _, err := db.GetTenant(parentCtx, "t_traced"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsureTenant(parentCtx, gateway.Tenant{ID: "t_traced", Name: "traced"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetTenant(parentCtx, "t_missing"); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Fatalf("missing tenant: %v", err)
	}
	parent.End()
	if _, err := db.GetTenant(context.Background(), "t_traced"); err != nil {
		t.Fatal(err)
	}

	var got []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() != "request" {
			got = append(got, s)
		}
	}
	want := []struct{ name, op string }{{"store GetTenant", "SELECT"}, {"store EnsureTenant", "transaction"}, {"store GetTenant", "SELECT"}}
	if len(got) != len(want) {
		names := []string{}
		for _, s := range got {
			names = append(names, s.Name())
		}
		t.Fatalf("spans %q, want %v", names, want)
	}
	for i, s := range got {
		a := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			a[kv.Key] = kv.Value.Emit()
		}
		if s.Name() != want[i].name || a["db.operation.name"] != want[i].op || a["db.system.name"] != "sqlite" || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %d: %q %v, want %q with operation %s", i, s.Name(), a, want[i].name, want[i].op)
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q is not under the request's", s.Name())
		}
		if want[i].op == "SELECT" && (a["db.query.text"] == "" || a["code.function.name"] == "") {
			t.Errorf("span %q without its statement or function: %v", s.Name(), a)
		}
		if s.Status().Code != 0 {
			t.Errorf("span %q has status %v: a tenant not found is an answer", s.Name(), s.Status())
		}
	}
}

// TestShortFuncName holds span names to the method that ran the statement.
func TestShortFuncName(t *testing.T) {
	for full, want := range map[string]string{
		"github.com/agentos-gateway/agentos-gateway/store.(*DB).CreateVM":        "CreateVM",
		"github.com/agentos-gateway/agentos-gateway/store.(*DB).CreateVM.func1":  "CreateVM",
		"github.com/agentos-gateway/agentos-gateway/store.getTenantRow":          "getTenantRow",
		"github.com/agentos-gateway/agentos-gateway/store.scan[...]":             "scan",
		"github.com/agentos-gateway/agentos-gateway/store.(*DB).list[...].func2": "list",
	} {
		if got := shortFuncName(full); got != want {
			t.Errorf("shortFuncName(%s) = %q, want %q", full, got, want)
		}
	}
	for q, want := range map[string]string{"\n\tSELECT id FROM t": "SELECT", "insert into t": "INSERT", "WITH x AS (": "WITH"} {
		if got := sqlVerb(q); got != want {
			t.Errorf("sqlVerb(%q) = %q, want %q", q, got, want)
		}
	}
}
