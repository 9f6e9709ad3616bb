package tracing

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// clientKind is the option of every client span, made once.
var clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// Transport wraps base (http.DefaultTransport when nil) so that each
// request it sends is a client span named "<name> <METHOD>" (for example
// "webhook POST") and carries the trace context of the request's context
// (Inject). The span holds the method, the target's host and port and the
// answer's status; a status of 400 or more, or no answer, is an error. It
// records neither the URL's path nor its query, which may hold a secret (a
// webhook's token), and ends when the answer's head has arrived.
//
// A request whose context carries no span context is sent as it is.
func Transport(base http.RoundTripper, name string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, name: name}
}

type transport struct {
	base http.RoundTripper
	name string
	// tp makes the spans; nil is the global provider (tests set one).
	tp trace.TracerProvider
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := tracerOf(t.tp).Start(req.Context(), t.name, clientKind...)
	defer span.End()
	if span.SpanContext().IsValid() {
		// A RoundTripper must not change the request it is given.
		out := req.WithContext(ctx)
		out.Header = req.Header.Clone()
		if out.Header == nil {
			out.Header = http.Header{}
		}
		Inject(ctx, out.Header)
		req = out
	}
	if span.IsRecording() {
		span.SetName(t.name + " " + req.Method)
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddressKey.String(req.URL.Hostname()))
		if port := portOf(req.URL); port > 0 {
			span.SetAttributes(semconv.ServerPortKey.Int(port))
		}
	}
	resp, err := t.base.RoundTrip(req)
	if !span.IsRecording() {
		return resp, err
	}
	if err != nil {
		// url.Error repeats the URL, which may hold a secret.
		cause := err
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err
		}
		span.SetStatus(codes.Error, cause.Error())
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(resp.StatusCode))
	if resp.StatusCode >= http.StatusBadRequest {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of the base transport,
// as http.Client.CloseIdleConnections asks of the transport it wraps.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// portOf is u's port, explicit or the scheme's.
func portOf(u *url.URL) int {
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p)
		return n
	}
	switch u.Scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}
