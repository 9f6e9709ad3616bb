package agentos

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// tracer makes the spans of engine requests. The global provider's tracer
// follows the provider the gateway installs at start (package tracing).
var tracer = otel.Tracer("github.com/agentos-gateway/agentos-gateway/agentos")

// The attributes of an engine request's span.
const (
	attrRequest    = attribute.Key("agentos.request")
	attrVMID       = attribute.Key("agentos.vm.id")
	attrSidecarPid = attribute.Key("agentos.sidecar.pid")
)

// engineSpanOptions are the options of every engine span, made once: a
// variadic argument built at each call would be allocated at each call.
var engineSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// startRequestSpan starts the client span of one engine request, named
// "engine <RequestType>", under the span in ctx, and returns nil when that
// span does not record: with tracing off, or for the gateway's own
// background calls, a request costs one context lookup and formats nothing.
func (s *Sidecar) startRequestSpan(ctx context.Context, own protocol.OwnershipScope, req protocol.RequestPayload) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	name := payloadName(req)
	_, span := tracer.Start(ctx, "engine "+name, engineSpanOptions...)
	span.SetAttributes(attrRequest.String(name), attrSidecarPid.Int(s.pid))
	if vo, ok := own.(protocol.VMOwnership); ok {
		span.SetAttributes(attrVMID.String(vo.VMID))
	}
	return span
}

// endRequestSpan ends the span of a request that returned err; nil (no
// span) is left alone.
func endRequestSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
