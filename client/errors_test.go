package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestProblemBecomesError(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClient(t, srv.URL)
	rec.reset(canned{status: 409, ctype: "application/problem+json", header: map[string]string{"X-Request-ID": "hdr-id"},
		body: `{"type":"urn:agentos-gateway:problem:conflict","title":"Conflict","status":409,"detail":"the VM is lost: sidecar died",` +
			`"instance":"/v1/vms/vm_1/exec","code":"conflict","requestId":"req-1","details":{"state":"lost","reason":"sidecar died"}}` + "\n"})

	_, err := c.VM("vm_1").Exec(context.Background(), client.ExecRequest{Command: "true"})
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err %T %v, want *client.Error", err, err)
	}
	if e.Status != 409 || e.Code != client.CodeConflict || e.Title != "Conflict" || e.Detail != "the VM is lost: sidecar died" ||
		e.RequestID != "req-1" || e.Details["state"] != "lost" || e.Details["reason"] != "sidecar died" ||
		e.Type != "urn:agentos-gateway:problem:conflict" || e.Instance != "/v1/vms/vm_1/exec" {
		t.Fatalf("error %+v", e)
	}
	if !client.IsCode(err, client.CodeConflict) || client.IsCode(err, client.CodeNotFound) {
		t.Fatal("IsCode")
	}
	// Wrapped errors still match.
	wrapped := fmt.Errorf("exec: %w", err)
	if !client.IsCode(wrapped, client.CodeConflict) || client.CodeOf(wrapped) != client.CodeConflict || !errors.As(wrapped, &e) {
		t.Fatal("wrapped error lost its code")
	}
	if msg := err.Error(); !strings.Contains(msg, "409 conflict: the VM is lost: sidecar died") || !strings.Contains(msg, "req-1") {
		t.Fatalf("message %q", msg)
	}
	if client.IsCode(errors.New("x"), client.CodeConflict) || client.IsCode(nil, client.CodeConflict) || client.CodeOf(nil) != "" ||
		client.CodeOf(errors.New("x")) != "" {
		t.Fatal("IsCode on a foreign error")
	}
}

func TestErrorFallbacks(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClient(t, srv.URL, noRetry)
	ctx := context.Background()
	vm := c.VM("x")

	cases := []struct {
		name   string
		resp   canned
		call   func() error
		status int
		code   client.Code
		detail string
		retry  time.Duration
		reqID  string
	}{
		{name: "plain text from a proxy", resp: canned{status: 502, ctype: "text/plain", body: "bad gateway\n"},
			call: func() error { return c.Health(ctx) }, status: 502, code: client.CodeUnavailable, detail: "bad gateway"},
		{name: "HTML", resp: canned{status: 404, ctype: "text/html", body: "<html>nope</html>"},
			call: func() error { _, err := vm.Get(ctx); return err }, status: 404, code: client.CodeNotFound, detail: "<html>nope</html>"},
		{name: "no body", resp: canned{status: 401, header: map[string]string{"X-Request-ID": "abc"}},
			call: func() error { _, err := vm.Get(ctx); return err }, status: 401, code: client.CodeUnauthenticated, reqID: "abc"},
		{name: "JSON that is not a problem", resp: canned{status: 500, ctype: "application/json", body: `[1,2]`},
			call: func() error { _, err := vm.Get(ctx); return err }, status: 500, code: client.CodeInternal, detail: "[1,2]"},
		{name: "broken problem", resp: canned{status: 413, ctype: "application/problem+json", body: `{"code":`},
			call: func() error { return c.Ready(ctx) }, status: 413, code: client.CodePayloadTooLarge, detail: `{"code":`},
		{name: "problem without code", resp: canned{status: 504, ctype: "application/problem+json", body: `{"title":"Gateway Timeout","detail":"slow"}`},
			call: func() error { return c.Ready(ctx) }, status: 504, code: client.CodeDeadlineExceeded, detail: "slow"},
		{name: "rate limited", resp: canned{status: 429, ctype: "application/problem+json", header: map[string]string{"Retry-After": "3"},
			body: `{"status":429,"code":"resource_exhausted","detail":"slow down","details":{"quota":"requestsPerSecond"}}`},
			call: func() error { _, err := c.ListVMs(ctx, client.ListVMsOptions{}); return err }, status: 429, code: client.CodeResourceExhausted, detail: "slow down", retry: 3 * time.Second},
		{name: "Retry-After as a date in the past", resp: canned{status: 503, header: map[string]string{"Retry-After": "Thu, 02 Jan 2025 03:04:05 GMT"}},
			call: func() error { return c.Ready(ctx) }, status: 503, code: client.CodeUnavailable},
		{name: "HEAD has no body", resp: canned{status: 404},
			call: func() error { _, err := vm.HeadFile(ctx, "/x"); return err }, status: 404, code: client.CodeNotFound},
		{name: "range not satisfiable without a body", resp: canned{status: 416},
			call:   func() error { _, err := vm.ReadFileRange(ctx, "/x", client.ReadRangeOptions{Offset: 5}); return err },
			status: 416, code: client.CodeRangeNotSatisfiable},
		{name: "binary body", resp: canned{status: 400, ctype: "application/octet-stream", body: "\xff\xfe\x00"},
			call: func() error { return c.Health(ctx) }, status: 400, code: client.CodeInvalidArgument, detail: "(3 bytes of binary body)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec.reset(tc.resp)
			err := tc.call()
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T %v", err, err)
			}
			if e.Status != tc.status || e.Code != tc.code || e.Detail != tc.detail || e.RetryAfter != tc.retry || e.RequestID != tc.reqID {
				t.Fatalf("error %+v", e)
			}
			if e.Title != http.StatusText(tc.status) && tc.name != "problem without code" {
				t.Fatalf("title %q", e.Title)
			}
		})
	}
}

func TestLongErrorBodyIsCut(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{status: 500, ctype: "text/plain", body: strings.Repeat("é", 100000)})
	err := newClient(t, srv.URL).Health(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || len(e.Detail) > 600 || !strings.HasSuffix(e.Detail, "…") {
		t.Fatalf("detail of %d bytes", len(e.Detail))
	}
}

func TestTransportErrorIsNotAnError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := newClient(t, url, fastRetry(2)).Health(context.Background())
	var e *client.Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("err %v: a transport failure must not look like a gateway answer", err)
	}
}
