package handlers

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// TestConsoleServing serves a console (an in-memory stand-in for web.Dist,
// whose real bundle the web/bundle tests check) and holds every answer to
// the spec and to the caching, compression and CSP rules.
func TestConsoleServing(t *testing.T) {
	page := "<!doctype html><title>console</title>" + strings.Repeat("<p>padding</p>", 50)
	script := "console.log('hi');" + strings.Repeat("/* padding */", 50)
	dist := fstest.MapFS{
		"index.html":               {Data: []byte(page)},
		"assets/main-ABCD1234.js":  {Data: []byte(script)},
		"assets/main-ABCD1234.css": {Data: []byte("body{margin:0}")},
	}
	s := New(Config{Console: dist}, nil, nil, nil, nil, nil, nil)
	t.Cleanup(s.Close)
	doc := apispec.MustLoad(t)

	type hdr = map[string]string
	for _, c := range []struct {
		name, path string
		header     hdr
		status     int
		body       string // the decoded body, for 200s
		want       hdr    // response headers that must be there
	}{
		{"page", "/", nil, 200, page, hdr{"Cache-Control": "no-cache", "Content-Type": "text/html; charset=utf-8"}},
		{"page gzip", "/", hdr{"Accept-Encoding": "br, gzip"}, 200, page, hdr{"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}},
		{"page gzip refused", "/", hdr{"Accept-Encoding": "gzip;q=0"}, 200, page, hdr{"Content-Encoding": ""}},
		{"script", "/assets/main-ABCD1234.js", hdr{"Accept-Encoding": "gzip"}, 200, script,
			hdr{"Cache-Control": "public, max-age=31536000, immutable", "Content-Encoding": "gzip", "Content-Type": "text/javascript; charset=utf-8"}},
		{"stylesheet", "/assets/main-ABCD1234.css", nil, 200, "body{margin:0}", hdr{"Content-Type": "text/css; charset=utf-8"}},
		{"unknown asset", "/assets/main-0000.js", nil, 404, "", hdr{"Content-Type": "application/problem+json"}},
		{"deep link from a browser", "/vms/vm_1", hdr{"Accept": "text/html,application/xhtml+xml"}, 200, page, hdr{"Cache-Control": "no-cache"}},
		{"deep link from a program", "/vms/vm_1", nil, 404, "", hdr{"Content-Type": "application/problem+json"}},
		{"api path from a browser", "/v1/nothing", hdr{"Accept": "text/html"}, 401, "", hdr{"Content-Type": "application/problem+json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, c.path, nil)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			res := rec.Result()
			raw := rec.Body.Bytes()
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, c.status, raw)
			}
			for k, v := range c.want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			body := raw
			if res.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
				if len(raw) >= len(body) {
					t.Errorf("gzip made %d bytes of %d", len(raw), len(body))
				}
			}
			if c.status == 200 && string(body) != c.body {
				t.Errorf("body %q, want %q", body, c.body)
			}
			if c.body == page {
				csp := res.Header.Get("Content-Security-Policy")
				for _, want := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self' ws://example.com wss://example.com", "frame-ancestors 'none'"} {
					if !strings.Contains(csp, want) {
						t.Errorf("CSP %q lacks %q", csp, want)
					}
				}
				if strings.Contains(csp, "script-src 'self' 'unsafe") {
					t.Errorf("CSP %q allows inline script", csp)
				}
			}
			// Deep links answered with the page are no operation of the
			// spec; every other answer is checked against it.
			if c.path == "/" || strings.HasPrefix(c.path, "/assets/") || c.status >= 400 {
				if err := apispec.Check(doc, req, res.StatusCode, res.Header, raw); err != nil {
					t.Error(err)
				}
			}

			// The client's copy is current: 304, no body.
			if etag := res.Header.Get("ETag"); c.status == 200 && etag != "" {
				again := httptest.NewRequest(http.MethodGet, c.path, nil)
				again.Header = req.Header.Clone()
				again.Header.Set("If-None-Match", etag)
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, again)
				if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
					t.Errorf("If-None-Match: %d with %d bytes", rec.Code, rec.Body.Len())
				}
			}
		})
	}
}

// TestConsoleAbsent: a gateway built without a console answers / with a
// problem.
func TestConsoleAbsent(t *testing.T) {
	s := New(Config{}, nil, nil, nil, nil, nil, nil)
	t.Cleanup(s.Close)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}
