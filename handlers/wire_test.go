package handlers

import (
	"encoding/json"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// The handlers define no JSON shape of their own, named or anonymous: every
// body, event and frame they read or write is a type of package api or of
// the root package, where it is held against the spec (api/types_test.go).
func TestHandlersDefineNoWireShapes(t *testing.T) {
	for _, st := range apispec.JSONStructs(t, ".") {
		what := "an anonymous struct"
		if st.Name != "" {
			what = "struct " + st.Name
		}
		t.Errorf("%s: %s has JSON tags; wire shapes belong in package api (or the root package)", st.Pos, what)
	}
}

// The bytes on the wire are the ones the gateway has always sent: fields in
// the same order, times in UTC as RFC 3339 with nanoseconds (trailing zeros
// dropped), absent signals null.
func TestWireBytes(t *testing.T) {
	at := time.Date(2026, 12, 1, 13, 4, 5, 120000000, time.FixedZone("CET", 3600))
	mustJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"exec exit", string(exitEvent(3, &vms.ExecResult{ExitCode: 1, StdoutTruncated: true, Duration: 1500 * time.Millisecond}, nil).Data),
			`{"durationMs":1500,"exitCode":1,"signal":null,"truncated":true}`},
		{"exec exit by signal", string(exitEvent(3, &vms.ExecResult{ExitCode: 143, Signal: "SIGTERM"}, nil).Data),
			`{"durationMs":0,"exitCode":143,"signal":"SIGTERM","truncated":false}`},
		{"process exit", string(exitJSON(&gateway.ExitStatus{ExitCode: 0})), `{"exitCode":0,"signal":null}`},
		{"error", string(sse.EndEvent(3, gateway.Errorf(gateway.CodeConflict, "the VM is lost")).Data), `{"code":"conflict","detail":"the VM is lost"}`},
		{"output", string(outputEvent(streamlog.Entry[vms.Chunk]{Seq: 2, V: vms.Chunk{Stream: "stdout", Data: []byte("hi\n"), Time: at}}).Data),
			`{"seq":2,"stream":"stdout","data":"hi\n","encoding":"utf8","ts":"2026-12-01T12:04:05.12Z"}`},
		{"vm times", mustJSON(vmResource(gateway.VM{ID: "vm_1", State: gateway.VMReady, CreatedAt: at, UpdatedAt: at.Add(time.Second / 2)})),
			`{"id":"vm_1","state":"ready","labels":{},"loopbackExemptPorts":[],"software":[],"agents":[],"idleTimeoutSeconds":0,` +
				`"checkpointSeconds":0,"restorable":false,"createdAt":"2026-12-01T12:04:05.12Z","updatedAt":"2026-12-01T12:04:05.62Z"}`},
		{"permission", mustJSON(permissionResources([]gateway.Permission{{RequestID: "r", AskedAt: at, Status: gateway.PermissionPending}})[0]),
			`{"requestId":"r","options":null,"toolCall":null,"askedAt":"2026-12-01T12:04:05.12Z","status":"pending","decision":null}`},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, c.got, c.want)
		}
	}
}
