package attach

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/api"
)

func TestDecodeControl(t *testing.T) {
	shell := []string{"resize"}
	proc := []string{"close_stdin", "signal"}
	tests := []struct {
		name    string
		in      string
		allowed []string
		want    api.AttachControlFrame
		ok      bool
	}{
		{"resize", `{"type":"resize","cols":120,"rows":40}`, shell, api.AttachControlFrame{Type: "resize", Cols: 120, Rows: 40}, true},
		{"resize, spaces around", " {\"type\":\"resize\",\"cols\":1,\"rows\":1000}\n", shell, api.AttachControlFrame{Type: "resize", Cols: 1, Rows: 1000}, true},
		{"resize too wide", `{"type":"resize","cols":1001,"rows":40}`, shell, api.AttachControlFrame{}, false},
		{"resize without rows", `{"type":"resize","cols":80}`, shell, api.AttachControlFrame{}, false},
		{"resize with a signal", `{"type":"resize","cols":80,"rows":24,"signal":"SIGINT"}`, shell, api.AttachControlFrame{}, false},
		{"resize on a process", `{"type":"resize","cols":80,"rows":24}`, proc, api.AttachControlFrame{}, false},
		{"negative size", `{"type":"resize","cols":-1,"rows":24}`, shell, api.AttachControlFrame{}, false},
		{"close_stdin", `{"type":"close_stdin"}`, proc, api.AttachControlFrame{Type: "close_stdin"}, true},
		{"close_stdin with a size", `{"type":"close_stdin","cols":3}`, proc, api.AttachControlFrame{}, false},
		{"signal", `{"type":"signal","signal":"SIGTERM"}`, proc, api.AttachControlFrame{Type: "signal", Signal: "SIGTERM"}, true},
		{"signal without a name", `{"type":"signal"}`, proc, api.AttachControlFrame{}, false},
		{"signal name too long", `{"type":"signal","signal":"` + strings.Repeat("X", 17) + `"}`, proc, api.AttachControlFrame{}, false},
		{"signal on a shell", `{"type":"signal","signal":"SIGTERM"}`, shell, api.AttachControlFrame{}, false},
		{"unknown type", `{"type":"paste"}`, shell, api.AttachControlFrame{}, false},
		{"no type", `{}`, shell, api.AttachControlFrame{}, false},
		{"unknown field", `{"type":"resize","cols":80,"rows":24,"x":1}`, shell, api.AttachControlFrame{}, false},
		{"two values", `{"type":"close_stdin"}{"type":"close_stdin"}`, proc, api.AttachControlFrame{}, false},
		{"not JSON", `resize 80 24`, shell, api.AttachControlFrame{}, false},
		{"array", `["resize"]`, shell, api.AttachControlFrame{}, false},
		{"too large", `{"type":"close_stdin"}` + strings.Repeat(" ", maxControlFrame), proc, api.AttachControlFrame{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeControl([]byte(tt.in), tt.allowed...)
			if tt.ok != (err == nil) {
				t.Fatalf("decodeControl(%q) error %v, want ok %v", tt.in, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errControl) {
				t.Fatalf("error %v is not errControl", err)
			}
			if got != tt.want {
				t.Fatalf("decodeControl(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzDecodeControl: any client text frame is either refused with
// errControl, with a reason that fits a close frame, or decodes to a frame
// of an allowed type whose fields are within bounds.
func FuzzDecodeControl(f *testing.F) {
	for _, s := range []string{`{"type":"resize","cols":80,"rows":24}`, `{"type":"signal","signal":"SIGINT"}`, `{"type":"close_stdin"}`, `{`, `null`, `{"type":"resize","cols":1e3,"rows":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeControl(b, "resize", "close_stdin", "signal")
		if err != nil {
			if !errors.Is(err, errControl) {
				t.Fatalf("error %v is not errControl", err)
			}
			if len(truncateReason(err.Error())) > 123 {
				t.Fatalf("close reason %q too long", err.Error())
			}
			return
		}
		switch got.Type {
		case "resize":
			if got.Cols < 1 || got.Cols > 1000 || got.Rows < 1 || got.Rows > 1000 {
				t.Fatalf("resize %+v out of bounds", got)
			}
		case "signal":
			if got.Signal == "" || len(got.Signal) > 16 {
				t.Fatalf("signal %+v", got)
			}
		case "close_stdin":
		default:
			t.Fatalf("type %q", got.Type)
		}
	})
}

func TestWebSocketRequestHelpers(t *testing.T) {
	tests := []struct {
		name     string
		header   http.Header
		upgrade  bool
		key      string
		hasKey   bool
		origins  []string
		originOK bool
	}{
		{"plain GET", http.Header{}, false, "", false, nil, true},
		{"upgrade", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, true, "", false, nil, true},
		{"upgrade among other tokens", http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}}, true, "", false, nil, true},
		{"upgrade to something else", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c"}}, false, "", false, nil, true},
		{"key as a subprotocol", http.Header{"Sec-Websocket-Protocol": {"agentos-gateway.v1, bearer.agentos-gateway.agk_abc"}}, false, "agk_abc", true, nil, true},
		{"key in a second header line", http.Header{"Sec-Websocket-Protocol": {"agentos-gateway.v1", "bearer.agentos-gateway.agk_abc"}}, false, "agk_abc", true, nil, true},
		{"empty key", http.Header{"Sec-Websocket-Protocol": {"bearer.agentos-gateway."}}, false, "", false, nil, true},
		{"other prefix", http.Header{"Sec-Websocket-Protocol": {"bearer.other.agk_abc"}}, false, "", false, nil, true},
		{"same origin", http.Header{"Origin": {"http://gw.example:8080"}}, false, "", false, nil, true},
		{"foreign origin", http.Header{"Origin": {"https://app.example"}}, false, "", false, nil, false},
		{"allowed host pattern", http.Header{"Origin": {"https://app.example"}}, false, "", false, []string{"*.example"}, true},
		{"allowed scheme and host", http.Header{"Origin": {"https://app.example"}}, false, "", false, []string{"https://app.example"}, true},
		{"scheme differs", http.Header{"Origin": {"http://app.example"}}, false, "", false, []string{"https://app.example"}, false},
		{"any origin", http.Header{"Origin": {"https://app.example"}}, false, "", false, []string{"*"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://gw.example:8080/v1/vms/vm_1/shells/sh_1/attach", nil)
			r.Header = tt.header
			if got := IsUpgrade(r); got != tt.upgrade {
				t.Errorf("IsUpgrade = %v", got)
			}
			if key, ok := BearerFromProtocols(r); key != tt.key || ok != tt.hasKey {
				t.Errorf("BearerFromProtocols = %q, %v", key, ok)
			}
			h := NewHub(Config{AllowedOrigins: tt.origins})
			if got := h.originAllowed(r); got != tt.originOK {
				t.Errorf("originAllowed = %v", got)
			}
		})
	}
}
