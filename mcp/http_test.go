package agentmcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHandlerCallsAsTheCaller: a tool call served over Streamable HTTP
// reaches the gateway handler in process with the request's own
// credential, host and forwarded headers, so that the router judges it as
// it would judge the request.
func TestHandlerCallsAsTheCaller(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		header map[string]string
	}{
		{name: "a tenant key", secret: "agk_one"},
		{name: "a token behind a proxy", secret: "agt_two", header: map[string]string{"X-Forwarded-Proto": "https", "Origin": "https://app.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var mu sync.Mutex
			var seen []*http.Request
			gateway := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"items":[],"nextCursor":""}`))
			})
			srv := httptest.NewServer(NewHandler(gateway, HandlerOptions{}))
			defer srv.Close()
			hc := &http.Client{Transport: headers{secret: tt.secret, extra: tt.header}}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
				Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_vms", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("list_vms: %+v, %v", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 {
				t.Fatalf("the gateway saw %d requests, want 1", len(seen))
			}
			r := seen[0]
			if got := r.Header.Get("Authorization"); got != "Bearer "+tt.secret {
				t.Errorf("Authorization %q, want the caller's", got)
			}
			if r.Method != http.MethodGet || r.URL.Path != "/v1/vms" || r.Host != srv.Listener.Addr().String() {
				t.Errorf("%s %s on %s, want GET /v1/vms on the request's host", r.Method, r.URL.Path, r.Host)
			}
			if r.RemoteAddr == "" || r.RemoteAddr == "127.0.0.1:0" {
				t.Errorf("RemoteAddr %q, want the caller's", r.RemoteAddr)
			}
			for k, v := range tt.header {
				if r.Header.Get(k) != v {
					t.Errorf("%s = %q, want %q forwarded", k, r.Header.Get(k), v)
				}
			}
		})
	}
}

// headers is the MCP client's transport: the credential and headers of a
// caller.
type headers struct {
	secret string
	extra  map[string]string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.secret)
	for k, v := range h.extra {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}
