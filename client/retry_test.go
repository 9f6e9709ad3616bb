package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestRetryHonoursRetryAfter checks that a GET answered 503 with
// Retry-After is sent again once, no sooner than the gateway asked, even
// when the policy's own backoff is much shorter.
func TestRetryHonoursRetryAfter(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	busy := problem(503, "unavailable", "the sidecar restarts")
	busy.header = map[string]string{"Retry-After": "1"}
	rec.reset(busy, canned{ctype: jsonCT, body: vmJSON})
	vm, err := newClient(t, srv.URL, fastRetry(5)).VM("vm").Get(context.Background())
	if err != nil || vm.ID != "vm_1" {
		t.Fatalf("get: %+v, %v", vm, err)
	}
	got := rec.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if wait := got[1].At.Sub(got[0].At); wait < time.Second || wait > time.Minute {
		t.Fatalf("retried after %v, Retry-After said 1 s", wait)
	}
}

// TestRetryWaitEndsWithContext checks that a context that ends during the
// wait for a retry ends the call with the last answer.
func TestRetryWaitEndsWithContext(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	busy := problem(503, "unavailable", "busy")
	busy.header = map[string]string{"Retry-After": "30"}
	rec.reset(busy)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := newClient(t, srv.URL).Health(ctx)
	if !client.IsCode(err, client.CodeUnavailable) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the call waited %v, past its context", d)
	}
	if n := len(rec.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

// TestRetry checks which calls are retried on which answers.
func TestRetry(t *testing.T) {
	ok := canned{ctype: jsonCT, body: `{"status":"ok"}`}
	busy := problem(503, "unavailable", "busy")
	limited := problem(429, "resource_exhausted", "slow down")
	written := canned{ctype: jsonCT, body: `{"path":"/f","size":3}`}
	spawned := canned{status: 201, ctype: jsonCT, body: processJSON}
	execd := canned{ctype: jsonCT, body: `{"exitCode":0,"stdout":"","stderr":"","encoding":"utf8","truncated":false,"durationMs":1}`}
	for _, tc := range []struct {
		name     string
		policy   client.RetryPolicy
		answers  []canned
		call     func(ctx context.Context, c *client.Client) error
		requests int
		code     client.Code // of the error; "" for success
	}{
		{name: "GET on 503", answers: []canned{busy, ok}, requests: 2,
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "GET on 429", answers: []canned{limited, limited, ok}, requests: 3,
			call: func(ctx context.Context, c *client.Client) error { return c.Ready(ctx) }},
		{name: "GET gives up after MaxAttempts", answers: []canned{busy}, requests: 4, code: client.CodeUnavailable,
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "MaxAttempts 1 disables retries", policy: client.RetryPolicy{MaxAttempts: 1}, answers: []canned{busy, ok}, requests: 1, code: client.CodeUnavailable,
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "GET not on 500", answers: []canned{problem(500, "internal", "bug"), ok}, requests: 1, code: client.CodeInternal,
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "GET not on 502", answers: []canned{{status: 502, ctype: "text/plain", body: "bad gateway"}, ok}, requests: 1, code: client.CodeUnavailable,
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "GET not on 404", answers: []canned{problem(404, "not_found", "no VM"), ok}, requests: 1, code: client.CodeNotFound,
			call: func(ctx context.Context, c *client.Client) error { _, err := c.VM("vm").Get(ctx); return err }},
		{name: "DELETE on 503", answers: []canned{busy, {status: 204}}, requests: 2,
			call: func(ctx context.Context, c *client.Client) error { _, err := c.VM("vm").Delete(ctx); return err }},
		{name: "PUT of a replayable body on 503", answers: []canned{busy, written}, requests: 2,
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM("vm").WriteFile(ctx, "/f", strings.NewReader("abc"), client.WriteFileOptions{})
				return err
			}},
		{name: "PUT streamed from a plain reader not on 503", answers: []canned{busy, written}, requests: 1, code: client.CodeUnavailable,
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM("vm").WriteFile(ctx, "/f", io.MultiReader(strings.NewReader("abc")), client.WriteFileOptions{})
				return err
			}},
		{name: "POST without an Idempotency-Key not on 503", answers: []canned{busy, spawned}, requests: 1, code: client.CodeUnavailable,
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM("vm").Spawn(ctx, client.SpawnRequest{Command: "sleep 1"})
				return err
			}},
		{name: "POST without an Idempotency-Key not on 429", answers: []canned{limited, {status: 201, ctype: jsonCT, body: vmJSON}}, requests: 1, code: client.CodeResourceExhausted,
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateVM(ctx, client.CreateVMRequest{})
				return err
			}},
		{name: "POST with an Idempotency-Key on 503", answers: []canned{busy, busy, execd}, requests: 3,
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM("vm").Exec(ctx, client.ExecRequest{Command: "true"}, client.WithIdempotencyKey("k-1"))
				return err
			}},
		{name: "streamed exec with an Idempotency-Key on 503", answers: []canned{busy, {ctype: sseCT, body: exitSSE}}, requests: 2,
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM("vm").Exec(ctx, client.ExecRequest{Command: "true", Stdout: io.Discard}, client.WithIdempotencyKey("k-2"))
				if err != nil {
					return err
				}
				return expect(res.ExitCode == 0, "result", res)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			rec.reset(tc.answers...)
			p := tc.policy
			if p.MaxAttempts == 0 {
				p = client.RetryPolicy{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
			}
			err := tc.call(context.Background(), newClient(t, srv.URL, client.WithRetryPolicy(p)))
			switch {
			case tc.code == "" && err != nil:
				t.Fatalf("call: %v", err)
			case tc.code != "" && client.CodeOf(err) != tc.code:
				t.Fatalf("err %v, want code %s", err, tc.code)
			}
			got := rec.requests()
			if len(got) != tc.requests {
				t.Fatalf("%d requests, want %d", len(got), tc.requests)
			}
			// A retry is the same request again.
			for _, r := range got[1:] {
				if r.Method != got[0].Method || r.EscapedPath != got[0].EscapedPath || !bytes.Equal(r.Body, got[0].Body) ||
					r.Header.Get("Idempotency-Key") != got[0].Header.Get("Idempotency-Key") || r.Header.Get("Authorization") != got[0].Header.Get("Authorization") {
					t.Fatalf("retry %+v differs from %+v", r, got[0])
				}
			}
		})
	}
}

// TestRetryAfterTransportFailure checks that a dropped connection is
// retried for a read and a keyed call, and not for an unkeyed POST (it may
// have run).
func TestRetryAfterTransportFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   canned
		call     func(ctx context.Context, c *client.Client) error
		requests int32
	}{
		{"GET", canned{ctype: jsonCT, body: `{"status":"ok"}`}, func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }, 2},
		{"keyed POST", canned{status: 201, ctype: jsonCT, body: processJSON}, func(ctx context.Context, c *client.Client) error {
			_, err := c.VM("vm").Spawn(ctx, client.SpawnRequest{Command: "x"}, client.WithIdempotencyKey("k"))
			return err
		}, 2},
		{"unkeyed POST", canned{status: 201, ctype: jsonCT, body: processJSON}, func(ctx context.Context, c *client.Client) error {
			_, err := c.VM("vm").Spawn(ctx, client.SpawnRequest{Command: "x"})
			var e *client.Error
			if err == nil || errors.As(err, &e) {
				return expect(false, "error", err)
			}
			return nil
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			rec := &recorder{}
			rec.reset(tc.answer)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					panic(http.ErrAbortHandler)
				}
				rec.ServeHTTP(w, r)
			}))
			defer srv.Close()
			if err := tc.call(context.Background(), newClient(t, srv.URL, fastRetry(3))); err != nil {
				t.Fatal(err)
			}
			if got := n.Load(); got != tc.requests {
				t.Fatalf("%d requests, want %d", got, tc.requests)
			}
		})
	}
}
