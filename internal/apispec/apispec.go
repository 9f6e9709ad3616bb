// Package apispec checks HTTP responses against the gateway's OpenAPI
// document (api/openapi.yaml), for tests: wrap a client's transport with
// Transport and every response it carries is checked — its status must be
// documented for the operation, its Content-Type must be one the operation
// declares for that status, and JSON and problem+json bodies must match
// their schema. Server-Sent Events bodies are left to the caller (they are
// streamed), but their status, content type and headers are checked, and
// each of their events can be checked with CheckEvent or ValidateEvent.
//
//	doc := apispec.MustLoad(t)
//	client := &http.Client{Transport: apispec.Transport(t, doc, nil)}
//	// ... every response of client is checked; for an event stream:
//	apispec.ValidateEvent(t, doc, req, "stdout", data)
//
// Only responses are checked: tests send invalid requests on purpose.
package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// Load parses and validates the embedded api/openapi.yaml.
func Load() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.Spec)
	if err != nil {
		return nil, fmt.Errorf("apispec: load openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("apispec: openapi.yaml is invalid: %w", err)
	}
	return doc, nil
}

var (
	loadOnce sync.Once
	loaded   *openapi3.T
	loadErr  error
)

// MustLoad returns the document, loaded once per test binary, and fails t if
// it does not load. Callers must not modify it.
func MustLoad(t testing.TB) *openapi3.T {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = Load() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// routerFor builds (once per document) the router that finds a request's
// operation.
var routerCache sync.Map // *openapi3.T → routers.Router or error

func routerFor(doc *openapi3.T) (routers.Router, error) {
	if v, ok := routerCache.Load(doc); ok {
		if err, isErr := v.(error); isErr {
			return nil, err
		}
		return v.(routers.Router), nil
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		err = fmt.Errorf("apispec: build router: %w", err)
		routerCache.Store(doc, err)
		return nil, err
	}
	v, _ := routerCache.LoadOrStore(doc, r)
	if err, isErr := v.(error); isErr {
		return nil, err
	}
	return v.(routers.Router), nil
}

// findRoute finds the operation req is for. chi serves a subrouter's root
// with and without a trailing slash ("/v1/vms/{vm}" and "/v1/vms/{vm}/"), so
// a path that matches nothing is tried again without its trailing slashes.
func findRoute(doc *openapi3.T, req *http.Request) (*routers.Route, map[string]string, error) {
	router, err := routerFor(doc)
	if err != nil {
		return nil, nil, err
	}
	route, params, err := router.FindRoute(req)
	if errors.Is(err, routers.ErrPathNotFound) && len(req.URL.Path) > 1 && strings.HasSuffix(req.URL.Path, "/") {
		r2 := req.Clone(req.Context())
		r2.URL.Path = strings.TrimRight(req.URL.Path, "/")
		r2.URL.RawPath = ""
		if rt, ps, err2 := router.FindRoute(r2); err2 == nil {
			return rt, ps, nil
		}
	}
	return route, params, err
}

// Check validates one response to req against doc and returns what is wrong,
// or nil. body is the whole response body; it is ignored for event streams.
//
// A request that matches no operation of the document (an unknown route, a
// method the route does not have) must be answered with a problem document.
func Check(doc *openapi3.T, req *http.Request, status int, header http.Header, body []byte) error {
	what := req.Method + " " + req.URL.Path
	route, params, err := findRoute(doc, req)
	if err != nil {
		if !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed) {
			return fmt.Errorf("%s: find operation: %w", what, err)
		}
		if status < 400 {
			return fmt.Errorf("%s: no operation in openapi.yaml, yet answered %d", what, status)
		}
		if req.Method == http.MethodHead {
			return nil
		}
		if err := checkProblem(doc, header, body); err != nil {
			return fmt.Errorf("%s (no operation in openapi.yaml) %d: %w", what, status, err)
		}
		return nil
	}
	what = fmt.Sprintf("%s (%s %s) %d", what, req.Method, route.Path, status)

	respRef := route.Operation.Responses.Status(status)
	if respRef == nil {
		respRef = route.Operation.Responses.Default()
	}
	if respRef == nil || respRef.Value == nil {
		return fmt.Errorf("%s: status %d is not documented for operation %s", what, status, route.Operation.OperationID)
	}
	resp := respRef.Value
	if req.Method == http.MethodHead {
		// A HEAD response has no body to check (and kin-openapi skips HEAD).
		return nil
	}

	ct := header.Get("Content-Type")
	if len(resp.Content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("%s: the spec documents no body, got %d bytes of %q", what, len(body), ct)
		}
		return validateHeadersOnly(req, route, params, status, header)
	}
	if ct == "" && len(body) == 0 {
		return fmt.Errorf("%s: the spec documents a body (%s), got none", what, contentTypes(resp.Content))
	}
	mt := resp.Content.Get(ct)
	if mt == nil {
		return fmt.Errorf("%s: Content-Type %q is not documented (want one of %s)", what, ct, contentTypes(resp.Content))
	}
	if base, _, _ := mime.ParseMediaType(ct); !isJSON(ct) || resp.Content[base] == nil {
		// Raw bytes, YAML, metrics text, event streams: the media type is
		// all there is to check, besides the headers. So it is for JSON
		// that only a wildcard documents, such as a .json file's bytes.
		return validateHeadersOnly(req, route, params, status, header)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s: %w\nbody: %s", what, err, clip(body))
	}
	return nil
}

func validateHeadersOnly(req *http.Request, route *routers.Route, params map[string]string, status int, header http.Header) error {
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(nil)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s %d: %w", req.Method, req.URL.Path, status, err)
	}
	return nil
}

// checkProblem validates an answer to a request that matches no operation:
// it must be a problem document.
func checkProblem(doc *openapi3.T, header http.Header, body []byte) error {
	ct := header.Get("Content-Type")
	if base, _, _ := mime.ParseMediaType(ct); base != "application/problem+json" {
		return fmt.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	ref := doc.Components.Schemas["Problem"]
	if ref == nil || ref.Value == nil {
		return errors.New("openapi.yaml has no Problem schema")
	}
	v, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("problem body: %w\nbody: %s", err, clip(body))
	}
	opts := schemaOptions(doc)
	if err := ref.Value.VisitJSON(v, opts...); err != nil {
		return fmt.Errorf("problem body does not match Problem: %w\nbody: %s", err, clip(body))
	}
	return nil
}

// CheckEvent validates the data of one Server-Sent Event that the stream
// answering req sent: the operation must list the event name in its
// x-sse-events extension, and data must match the schema it names.
func CheckEvent(doc *openapi3.T, req *http.Request, event string, data []byte) error {
	route, _, err := findRoute(doc, req)
	if err != nil {
		return fmt.Errorf("%s %s: find operation: %w", req.Method, req.URL.Path, err)
	}
	what := fmt.Sprintf("%s %s: event %q", req.Method, route.Path, event)
	events, _ := route.Operation.Extensions["x-sse-events"].(map[string]any)
	if events == nil {
		return fmt.Errorf("%s %s: the operation documents no events (x-sse-events)", req.Method, route.Path)
	}
	spec, _ := events[event].(map[string]any)
	if spec == nil {
		return fmt.Errorf("%s is not documented in x-sse-events", what)
	}
	ref, _ := spec["data"].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	schema := doc.Components.Schemas[name]
	if !ok || schema == nil || schema.Value == nil {
		return fmt.Errorf("%s: data schema %q is not a component schema", what, ref)
	}
	v, err := decodeJSON(data)
	if err != nil {
		return fmt.Errorf("%s: data is not JSON: %w\ndata: %s", what, err, clip(data))
	}
	opts := schemaOptions(doc)
	if err := schema.Value.VisitJSON(v, opts...); err != nil {
		return fmt.Errorf("%s: data does not match %s: %w\ndata: %s", what, name, err, clip(data))
	}
	return nil
}

// ValidateEvent is CheckEvent reporting a mismatch as a test error.
func ValidateEvent(t testing.TB, doc *openapi3.T, req *http.Request, event string, data []byte) {
	t.Helper()
	if err := CheckEvent(doc, req, event, data); err != nil {
		t.Errorf("event does not match openapi.yaml: %v", err)
	}
}

// ValidateResponse checks one response (whose body the caller has read into
// body) and reports any mismatch as a test error.
func ValidateResponse(t testing.TB, doc *openapi3.T, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	if err := Check(doc, req, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("response does not match openapi.yaml: %v", err)
	}
}

// Transport returns a RoundTripper that sends requests through base (nil:
// http.DefaultTransport) and checks every response against doc, reporting
// mismatches with t.Errorf. Non-streaming bodies are read whole, checked and
// handed back to the caller unchanged; event streams are handed over as
// they arrive, with their status, content type and headers checked.
func Transport(t testing.TB, doc *openapi3.T, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, doc: doc, base: base}
}

type transport struct {
	t    testing.TB
	doc  *openapi3.T
	base http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if isEventStream(resp.Header.Get("Content-Type")) {
		if err := Check(tr.doc, req, resp.StatusCode, resp.Header, nil); err != nil {
			tr.t.Errorf("response does not match openapi.yaml: %v", err)
		}
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// A transfer cut short (for example a file read aborted after its
		// headers) cannot be checked; the caller sees the same error.
		resp.Body = &errBody{r: bytes.NewReader(body), err: rerr}
		return resp, nil
	}
	if err := Check(tr.doc, req, resp.StatusCode, resp.Header, body); err != nil {
		tr.t.Errorf("response does not match openapi.yaml: %v", err)
	}
	return resp, nil
}

// errBody replays what was read, then the read error.
type errBody struct {
	r   *bytes.Reader
	err error
}

func (b *errBody) Read(p []byte) (int, error) {
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	return 0, b.err
}

func (b *errBody) Close() error { return nil }

func isJSON(ct string) bool {
	base, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return base == "application/json" || strings.HasSuffix(base, "+json")
}

func isEventStream(ct string) bool {
	base, _, err := mime.ParseMediaType(ct)
	return err == nil && base == "text/event-stream"
}

func contentTypes(c openapi3.Content) string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	return strings.Join(out, ", ")
}

func clip(b []byte) string {
	const max = 2048
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

func decodeJSON(b []byte) (any, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// schemaOptions are the options openapi3filter uses to validate a response
// body of doc.
func schemaOptions(doc *openapi3.T) []openapi3.SchemaValidationOption {
	opts := []openapi3.SchemaValidationOption{openapi3.VisitAsResponse(), openapi3.MultiErrors()}
	if doc.IsOpenAPI31OrLater() {
		opts = append(opts, openapi3.EnableJSONSchema2020())
	}
	return opts
}

// JSONFields returns the JSON names of a struct type's fields, as
// encoding/json marshals them (untagged embedded structs flattened, "-"
// and unexported fields left out), each with whether it is omitempty.
func JSONFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			maps.Copy(out, JSONFields(f.Type))
			continue
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = strings.Contains(opts, "omitempty")
	}
	return out
}

// CheckType reports where a Go type's JSON fields differ from the
// properties of a schema of doc's components. With sends set, the type is
// one its side of the API encodes, and a property must be required in the
// schema exactly when the type always sends it (is not omitempty).
func CheckType(t testing.TB, doc *openapi3.T, schema string, v any, sends bool) {
	t.Helper()
	ref := doc.Components.Schemas[schema]
	if ref == nil {
		t.Errorf("no schema %s", schema)
		return
	}
	s := ref.Value
	fields := JSONFields(reflect.TypeOf(v))
	if got, want := slices.Sorted(maps.Keys(s.Properties)), slices.Sorted(maps.Keys(fields)); !slices.Equal(got, want) {
		t.Errorf("%s: schema properties %v, Go %T fields %v", schema, got, v, want)
	}
	if !sends {
		return
	}
	for name, omitempty := range fields {
		if required := slices.Contains(s.Required, name); required == omitempty {
			t.Errorf("%s.%s: required %v, but Go %T omitempty %v", schema, name, required, v, omitempty)
		}
	}
}
