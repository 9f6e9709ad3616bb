package problemlistener

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// TestProblemListener sends what only net/http itself answers, over a real
// connection to a real http.Server, and checks each answer is problem+json.
func TestProblemListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A handler's own text/plain error must pass untouched.
			http.Error(w, "from the handler", http.StatusTeapot)
		}),
		MaxHeaderBytes:    1 << 10,
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(Wrap(ln)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	tests := []struct {
		name    string
		request string
		status  int
		code    string
		detail  string
	}{
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400, "invalid_argument", "missing required Host header"},
		{"NUL in a header", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, "invalid_argument", "malformed"},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431, "headers_too_large", "headers"},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", 501, "not_implemented", "transfer coding"},
		{"not HTTP", "HELLO\r\n\r\n", 400, "invalid_argument", "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte(tc.request)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			defer resp.Body.Close()
			var p api.Problem
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if resp.StatusCode != tc.status || p.Status != tc.status || string(p.Code) != tc.code ||
				resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("got %d %s %+v, want %d %s with %q", resp.StatusCode, resp.Header.Get("Content-Type"), p, tc.status, tc.code, tc.detail)
			}
		})
	}
	t.Run("handler answers pass", func(t *testing.T) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("handler's answer changed: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	})
}

func FuzzRewritePlainError(f *testing.F) {
	f.Add([]byte("HTTP/1.1 400 Bad Request" + plainErrorHeaders + "400 Bad Request"))
	f.Add([]byte("HTTP/1.1 431 Request Header Fields Too Large" + plainErrorHeaders + "431 Request Header Fields Too Large"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nDate: x\r\n\r\nhello"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, ok := rewritePlainError(b)
		if !ok {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
		if err != nil {
			t.Fatalf("rewritten answer is not HTTP: %v\n%q", err, out)
		}
		var p api.Problem
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.Status != resp.StatusCode {
			t.Fatalf("rewritten body %+v, %v", p, err)
		}
	})
}
