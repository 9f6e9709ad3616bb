package handlers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// TestMCPProblems: the MCP SDK's plain-text refusals become the gateway's
// problem documents, with their status and their sentence; its answers
// pass untouched.
func TestMCPProblems(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantType   string
		wantCode   string
		wantDetail string
		wantBody   string
	}{
		{
			name: "a plain-text 400",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "Accept must contain both 'application/json' and 'text/event-stream'", http.StatusBadRequest)
			},
			wantStatus: http.StatusBadRequest, wantType: "application/problem+json", wantCode: "invalid_argument",
			wantDetail: "Accept must contain both 'application/json' and 'text/event-stream'",
		},
		{
			name: "a plain-text 413",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "request body exceeds 4194304 bytes", http.StatusRequestEntityTooLarge)
			},
			wantStatus: http.StatusRequestEntityTooLarge, wantType: "application/problem+json", wantCode: "payload_too_large",
			wantDetail: "request body exceeds 4194304 bytes",
		},
		{
			name: "a JSON-RPC answer",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","error":{"code":-32600}}`)
			},
			wantStatus: http.StatusBadRequest, wantType: "application/json", wantBody: `{"jsonrpc":"2.0","error":{"code":-32600}}`,
		},
		{
			name: "an event stream",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "event: message\ndata: {}\n\n")
			},
			wantStatus: http.StatusOK, wantType: "text/event-stream", wantBody: "event: message\ndata: {}\n\n",
		},
		{
			name: "a plain-text 415 is the gateway's 400",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "Content-Type must be 'application/json'", http.StatusUnsupportedMediaType)
			},
			wantStatus: http.StatusBadRequest, wantType: "application/problem+json", wantCode: "invalid_argument",
			wantDetail: "Content-Type must be 'application/json'",
		},
		{
			name: "a status it has no code for",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			},
			wantStatus: http.StatusMethodNotAllowed, wantType: "text/plain; charset=utf-8", wantBody: "Method Not Allowed\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mcpResponses(tt.handler, 0).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil))
			if rec.Code != tt.wantStatus || rec.Header().Get("Content-Type") != tt.wantType {
				t.Fatalf("got %d %s, want %d %s: %s", rec.Code, rec.Header().Get("Content-Type"), tt.wantStatus, tt.wantType, rec.Body)
			}
			if tt.wantCode == "" {
				if rec.Body.String() != tt.wantBody {
					t.Errorf("body %q, want %q", rec.Body, tt.wantBody)
				}
				return
			}
			var p api.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("not a problem: %v: %s", err, rec.Body)
			}
			if string(p.Code) != tt.wantCode || p.Detail != tt.wantDetail || p.Status != tt.wantStatus {
				t.Errorf("problem %+v, want %s %q", p, tt.wantCode, tt.wantDetail)
			}
		})
	}
}

// lockedRecorder is a recorder whose body may be read while a handler
// writes.
type lockedRecorder struct {
	*httptest.ResponseRecorder
	mu sync.Mutex
}

func (r *lockedRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ResponseRecorder.Write(b)
}

func (r *lockedRecorder) WriteString(s string) (int, error) { return r.Write([]byte(s)) }

func (r *lockedRecorder) body() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Body.String()
}

// TestMCPHeartbeat: a quiet MCP event stream gets heartbeat comments
// between its events, never inside one, and none once the handler
// returned; a JSON answer gets none.
func TestMCPHeartbeat(t *testing.T) {
	const beat = 10 * time.Millisecond
	tests := []struct {
		name      string
		ctype     string
		wantBeats bool
	}{
		{"an event stream", "text/event-stream", true},
		{"a JSON answer", "application/json", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &lockedRecorder{ResponseRecorder: httptest.NewRecorder()}
			events := []string{"event: message\ndata: {\"a\":1}\n\n", "event: message\ndata: {\"b\":2}\n\n"}
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, events[0])
				w.(http.Flusher).Flush()
				deadline := time.Now().Add(5 * time.Second)
				for !strings.Contains(rec.body(), mcpHeartbeat+mcpHeartbeat) && time.Now().Before(deadline) && tt.wantBeats {
					time.Sleep(beat)
				}
				if !tt.wantBeats {
					time.Sleep(5 * beat)
				}
				_, _ = io.WriteString(w, events[1])
			})
			mcpResponses(h, beat).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil))
			got := rec.body()
			after := len(got)
			time.Sleep(5 * beat)
			if rec.body() != got || len(got) != after {
				t.Errorf("written to after the handler returned: %q", rec.body())
			}
			rest := strings.ReplaceAll(got, mcpHeartbeat, "")
			if rest != events[0]+events[1] {
				t.Errorf("the events are not whole and in order: %q", got)
			}
			if beats := strings.Count(got, mcpHeartbeat); tt.wantBeats != (beats > 0) {
				t.Errorf("%d heartbeats in %q", beats, got)
			}
			if !strings.HasPrefix(got, events[0]) || !strings.HasSuffix(got, events[1]) {
				t.Errorf("heartbeats outside the quiet time: %q", got)
			}
		})
	}
}
