// Package otlpcollector is an in-process OpenTelemetry collector for tests:
// an HTTP server on loopback that takes OTLP/HTTP trace exports (POST
// /v1/traces, protobuf, gzipped or not), as the gateway's exporter sends
// them, and keeps the spans for the test to read.
package otlpcollector

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as the collector received it, its values as text.
type Span struct {
	// TraceID, SpanID and ParentSpanID are in lower-case hex; ParentSpanID
	// is empty for a root span.
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	// Error says the span's status is an error.
	Error bool
	// Attributes are the span's, Resource its resource's.
	Attributes, Resource map[string]string
}

// Collector is the collector; its zero value is not usable: Start one.
type Collector struct {
	srv *httptest.Server

	mu     sync.Mutex
	spans  []Span
	errs   []error
	update chan struct{} // closed and replaced at each export
}

// Start starts a collector on 127.0.0.1; Close stops it.
func Start() *Collector {
	c := &Collector{update: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// Endpoint is the base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) Endpoint() string { return c.srv.URL }

// Close stops the collector and its connections.
func (c *Collector) Close() { c.srv.Close() }

// Spans returns the spans received so far, in the order they came.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Err returns the first export the collector could not read, if any.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	return nil
}

// Wait waits until done holds for the spans received, and returns them;
// when ctx ends first it returns the spans and ctx's error.
func (c *Collector) Wait(ctx context.Context, done func([]Span) bool) ([]Span, error) {
	for {
		c.mu.Lock()
		spans, update := append([]Span(nil), c.spans...), c.update
		c.mu.Unlock()
		if done(spans) {
			return spans, nil
		}
		select {
		case <-update:
		case <-ctx.Done():
			return spans, ctx.Err()
		}
	}
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	spans, err := decode(r)
	c.mu.Lock()
	if err != nil {
		c.errs = append(c.errs, err)
	}
	c.spans = append(c.spans, spans...)
	close(c.update)
	c.update = make(chan struct{})
	c.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// decode reads one export request into spans.
func decode(r *http.Request) ([]Span, error) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		defer gz.Close()
		body = gz
	}
	raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q, want application/x-protobuf", ct)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("decode ExportTraceServiceRequest: %w", err)
	}
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		res := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				spans = append(spans, Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Error:      s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Attributes: attributes(s.GetAttributes()), Resource: res,
				})
			}
		}
	}
	return spans, nil
}

// attributes renders key-values as text.
func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
