package handlers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

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
			mcpProblems(tt.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil))
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
