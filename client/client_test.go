package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		base string
		want string // BaseURL; "" when New must refuse base
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https://gw.example:8443/", "https://gw.example:8443"},
		{"http://gw.example/prefix/", "http://gw.example/prefix"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"127.0.0.1:8080", ""},
		{"localhost:8080", ""},
		{"gw.example", ""},
		{"ftp://x", ""},
		{"ws://x", ""},
		{"http://", ""},
		{"http:///path", ""},
		{"http://x/?a=b", ""},
		{"http://x?", ""},
		{"http://x/#frag", ""},
		{"http://user:pw@x", ""},
		{"http://x y", ""},
		{"", ""},
	} {
		c, err := client.New(tc.base, apiKey)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("New(%q) accepted: %s", tc.base, c.BaseURL())
		case tc.want == "" && c != nil:
			t.Errorf("New(%q) returned a client with its error", tc.base)
		case tc.want != "" && err != nil:
			t.Errorf("New(%q): %v", tc.base, err)
		case tc.want != "" && c.BaseURL() != tc.want:
			t.Errorf("New(%q).BaseURL() = %q, want %q", tc.base, c.BaseURL(), tc.want)
		}
	}
}

// TestDurationsOnTheWire checks that each time.Duration travels in the
// unit its schema names, rounded up, and reads back.
func TestDurationsOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"exec timeout 1500µs", client.ExecRequest{Command: "x", Timeout: 1500 * time.Microsecond}, `{"command":"x","timeoutMs":2}`},
		{"exec timeout 0 is not sent", client.ExecRequest{Command: "x"}, `{"command":"x"}`},
		{"idle timeout 1.2 s", client.CreateVMRequest{IdleTimeout: 1200 * time.Millisecond}, `{"idleTimeoutSeconds":2}`},
		{"idle timeout of a minute", client.CreateVMRequest{IdleTimeout: time.Minute}, `{"idleTimeoutSeconds":60}`},
		{"permission default 90 s", client.PermissionDefault{Decision: "reject", TimeoutSeconds: 90}, `{"decision":"reject","timeoutSeconds":90}`},
		{"retention of 36 h", client.SessionSettingsUpdate{Retention: client.Ptr(36 * time.Hour)}, `{"retentionDays":2}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, b, err, tc.want)
		}
	}

	var d client.PermissionDefault
	if err := json.Unmarshal([]byte(`{"decision":"reject","timeoutSeconds":90}`), &d); err != nil || d != (client.PermissionDefault{Decision: "reject", TimeoutSeconds: 90}) {
		t.Fatalf("permission default %+v, %v", d, err)
	}
	if b, _ := json.Marshal(d); string(b) != `{"decision":"reject","timeoutSeconds":90}` {
		t.Fatalf("round trip %s", b)
	}
	var s client.SessionSettings
	if err := json.Unmarshal([]byte(`{"retentionDays":3,"permissionDefault":{"decision":"allow","timeoutSeconds":5}}`), &s); err != nil ||
		s.Retention() != 72*time.Hour || s.PermissionDefault == nil || s.PermissionDefault.Timeout() != 5*time.Second {
		t.Fatalf("settings %+v, %v", s, err)
	}
	var vm client.VM
	if err := json.Unmarshal([]byte(vmJSON), &vm); err != nil || vm.IdleTimeout() != 30*time.Second {
		t.Fatalf("vm %+v, %v", vm, err)
	}
	for _, bad := range []string{`{"timeoutSeconds":"x"}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("permission default %s accepted", bad)
		}
		if err := json.Unmarshal([]byte(bad), &vm); err == nil && bad == `[]` {
			t.Errorf("vm %s accepted", bad)
		}
	}
}
