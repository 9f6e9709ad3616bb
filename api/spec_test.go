package api_test

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentos-gateway/agentos-gateway/api"
)

const problemRef = "#/components/schemas/Problem"

func load(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml does not validate: %v", err)
	}
	return doc
}

type op struct {
	method, path string
	*openapi3.Operation
}

func operations(doc *openapi3.T) []op {
	var out []op
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			out = append(out, op{method, path, o})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].path != out[j].path {
			return out[i].path < out[j].path
		}
		return out[i].method < out[j].method
	})
	return out
}

func TestSpecLoadsAndValidates(t *testing.T) {
	doc := load(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi: %s, want 3.1", doc.OpenAPI)
	}
	if len(operations(doc)) == 0 {
		t.Fatal("no operations")
	}
}

func TestEveryOperationHasAnIDAndASummary(t *testing.T) {
	seen := map[string]string{}
	for _, o := range operations(load(t)) {
		name := o.method + " " + o.path
		if o.OperationID == "" {
			t.Errorf("%s: no operationId", name)
			continue
		}
		if prev, dup := seen[o.OperationID]; dup {
			t.Errorf("%s: operationId %q also used by %s", name, o.OperationID, prev)
		}
		seen[o.OperationID] = name
		if o.Summary == "" {
			t.Errorf("%s: no summary", name)
		}
		if len(o.Tags) == 0 {
			t.Errorf("%s: no tag", name)
		}
	}
}

// Every error response is a problem document (HEAD answers carry no body).
func TestErrorResponsesAreProblems(t *testing.T) {
	doc := load(t)
	problem := doc.Components.Schemas["Problem"]
	if problem == nil {
		t.Fatal("no Problem schema")
	}
	for _, o := range operations(doc) {
		for code, ref := range o.Responses.Map() {
			status, err := strconv.Atoi(code)
			if err != nil {
				t.Errorf("%s %s: response %q: use explicit statuses", o.method, o.path, code)
				continue
			}
			if status < 400 {
				continue
			}
			where := o.method + " " + o.path + " " + code
			if o.method == http.MethodHead {
				if len(ref.Value.Content) != 0 {
					t.Errorf("%s: a HEAD response has no body", where)
				}
				continue
			}
			if len(ref.Value.Content) != 1 {
				t.Errorf("%s: want exactly application/problem+json, got %d media types", where, len(ref.Value.Content))
			}
			mt := ref.Value.Content["application/problem+json"]
			if mt == nil || mt.Schema == nil {
				t.Errorf("%s: no application/problem+json schema", where)
				continue
			}
			if mt.Schema.Ref != problemRef && mt.Schema.Value != problem.Value {
				t.Errorf("%s: schema is %q, want %s", where, mt.Schema.Ref, problemRef)
			}
			if ref.Value.Headers["X-Request-ID"] == nil {
				t.Errorf("%s: no X-Request-ID header", where)
			}
		}
	}
}

// The problem codes are exactly the gateway's.
func TestErrorCodeEnum(t *testing.T) {
	doc := load(t)
	want := []string{"conflict", "deadline_exceeded", "headers_too_large", "internal", "invalid_argument", "method_not_allowed",
		"not_found", "not_implemented", "payload_too_large", "permission_denied", "precondition_failed", "range_not_satisfiable",
		"request_timeout", "resource_exhausted", "unauthenticated", "unavailable", "unprocessable"}
	var got []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		got = append(got, v.(string))
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ErrorCode enum = %v, want %v", got, want)
	}
}

// readsRecord are the VM routes served from the store alone: they answer
// for VMs that have ended too, so they never refuse with 409.
var readsRecord = map[string]bool{
	"GET /v1/vms/{vm}":                                true,
	"GET /v1/vms/{vm}/sessions":                       true,
	"GET /v1/vms/{vm}/sessions/{session}":             true,
	"GET /v1/vms/{vm}/sessions/{session}/history":     true,
	"GET /v1/vms/{vm}/sessions/{session}/permissions": true,
	"GET /v1/vms/{vm}/sessions/{session}/events":      true,
}

// Authenticated operations document 401 and 429; admin ones 403; VM ones
// 404 and 409 (a lost or disposed VM) unless they only read records; JSON
// bodies 400 and 413; public ones need no key.
func TestErrorStatusesFollowTheRules(t *testing.T) {
	doc := load(t)
	public := map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/v1/openapi.yaml": true, "/": true, "/assets/{asset}": true,
		// Previews are opened by their token, not the API key.
		"/p/{token}": true, "/p/{token}/{path}": true}
	for _, o := range operations(doc) {
		name := o.method + " " + o.path
		has := func(code string) bool { return o.Responses.Value(code) != nil }
		need := func(codes ...string) {
			for _, c := range codes {
				if !has(c) {
					t.Errorf("%s: does not document %s", name, c)
				}
			}
		}
		if public[o.path] {
			if o.Security == nil || len(*o.Security) != 0 {
				t.Errorf("%s: public, want security: []", name)
			}
			continue
		}
		if o.Security != nil {
			t.Errorf("%s: overrides the global bearer security", name)
		}
		need("401", "429", "500", "503")
		if strings.HasPrefix(o.path, "/v1/tenants") || o.path == "/v1/sidecars" {
			need("403")
		}
		if strings.HasPrefix(o.path, "/v1/vms/{vm}") {
			need("404")
			if !readsRecord[name] {
				need("409")
			}
		}
		if o.RequestBody != nil && o.RequestBody.Value.Content["application/json"] != nil {
			need("400", "413")
			if !o.RequestBody.Value.Required {
				t.Errorf("%s: JSON request body not required", name)
			}
		}
		for _, p := range o.Parameters {
			if p.Value.Name == "Idempotency-Key" {
				need("409", "422")
			}
		}
	}
}

// Every request body schema rejects unknown fields, as the handlers do.
func TestRequestBodiesAreClosed(t *testing.T) {
	doc := load(t)
	for _, o := range operations(doc) {
		if o.RequestBody == nil {
			continue
		}
		mt := o.RequestBody.Value.Content["application/json"]
		if mt == nil {
			continue
		}
		s := mt.Schema.Value
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("%s %s: request schema %s allows unknown fields", o.method, o.path, mt.Schema.Ref)
		}
	}
}

// mcpPath is the Model Context Protocol's endpoint, whose event stream is
// the transport's (Streamable HTTP), not the gateway's.
const mcpPath = "/mcp"

// Streaming operations say which events they send, and every event's data
// schema exists.
func TestEventStreamsDescribeTheirEvents(t *testing.T) {
	doc := load(t)
	streams := 0
	for _, o := range operations(doc) {
		name := o.method + " " + o.path
		isStream := false
		for _, r := range o.Responses.Map() {
			if r.Value.Content["text/event-stream"] != nil {
				isStream = true
			}
		}
		ext, hasExt := o.Extensions["x-sse-events"]
		if isStream != hasExt {
			t.Errorf("%s: text/event-stream response %v but x-sse-events %v", name, isStream, hasExt)
		}
		if !hasExt {
			continue
		}
		events, ok := ext.(map[string]any)
		if !ok || len(events) == 0 {
			t.Errorf("%s: x-sse-events must map event names to {data, description}, got %T", name, ext)
			continue
		}
		final := false
		for ev, v := range events {
			m, _ := v.(map[string]any)
			ref, _ := m["data"].(string)
			schema, found := strings.CutPrefix(ref, "#/components/schemas/")
			if !found || doc.Components.Schemas[schema] == nil {
				t.Errorf("%s: event %q: data %q is not a component schema", name, ev, ref)
			}
			if d, _ := m["description"].(string); d == "" {
				t.Errorf("%s: event %q has no description", name, ev)
			}
			switch ev {
			case "exit", "end", "error":
				final = true
			}
		}
		if o.path == mcpPath {
			// The MCP transport's stream, not one of the gateway's: JSON-RPC
			// messages, the last of them the result, no ids to resume from.
			if len(events) != 1 || events["message"] == nil {
				t.Errorf("%s: the MCP stream carries message events alone", name)
			}
			continue
		}
		streams++
		if events["error"] == nil {
			t.Errorf("%s: every stream can end with an error event", name)
		}
		if !final {
			t.Errorf("%s: no final event", name)
		}
		if o.method == http.MethodGet {
			var hdr, query bool
			for _, p := range o.Parameters {
				hdr = hdr || p.Value.Name == "Last-Event-ID" && p.Value.In == "header"
				query = query || p.Value.Name == "lastEventId" && p.Value.In == "query"
			}
			if !hdr || !query {
				t.Errorf("%s: resumable stream without Last-Event-ID header and lastEventId query parameters", name)
			}
		}
	}
	if streams != 6 {
		t.Errorf("%d streaming operations, want 6 (VM events, exec, process output, shell output, session events, file watch)", streams)
	}
}

// Lists answer {items, nextCursor}.
func TestListsHaveItemsAndNextCursor(t *testing.T) {
	doc := load(t)
	for name, ref := range doc.Components.Schemas {
		if !strings.HasSuffix(name, "List") {
			continue
		}
		s := ref.Value
		if s.Properties["items"] == nil || s.Properties["nextCursor"] == nil {
			t.Errorf("%s: want items and nextCursor", name)
		}
		req := strings.Join(s.Required, ",")
		if req != "items,nextCursor" {
			t.Errorf("%s: required %q, want items,nextCursor", name, req)
		}
	}
}

// The document's own examples match their schemas (kin-openapi checks them
// during Validate; this makes sure there are some).
func TestExamplesExist(t *testing.T) {
	doc := load(t)
	n := 0
	for _, o := range operations(doc) {
		if o.RequestBody == nil {
			continue
		}
		for _, mt := range o.RequestBody.Value.Content {
			if mt.Example != nil || len(mt.Examples) > 0 {
				n++
			}
		}
	}
	if n < 8 {
		t.Errorf("only %d request examples", n)
	}
}
