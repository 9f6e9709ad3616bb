package vms

import (
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// TestWarmServable checks which specs a VM created with the default spec
// may serve: only those whose differences are applied after creation or
// kept by the gateway; empty lists and maps are the default.
func TestWarmServable(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec gateway.VMSpec
		want bool
	}{
		{"default", gateway.VMSpec{}, true},
		{"env, labels, idle timeout", gateway.VMSpec{Env: map[string]string{"A": "1"}, Labels: map[string]string{"t": "x"}, IdleTimeoutSeconds: 60}, true},
		{"empty lists", gateway.VMSpec{Software: []string{}, Agents: []string{}, LoopbackExemptPorts: []uint16{}, Limits: map[string]any{}}, true},
		{"empty permissions", gateway.VMSpec{Permissions: map[string]any{}}, false},
		{"software", gateway.VMSpec{Software: []string{"@agentos-software/pi"}}, false},
		{"agents", gateway.VMSpec{Agents: []string{"pi"}}, false},
		{"permissions", gateway.VMSpec{Permissions: map[string]any{"fs": "deny"}}, false},
		{"limits", gateway.VMSpec{Limits: map[string]any{"resources": map[string]any{"maxProcesses": 8}}}, false},
		{"loopback ports", gateway.VMSpec{LoopbackExemptPorts: []uint16{8080}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := warmServable(tc.spec); got != tc.want {
				t.Fatalf("warmServable(%+v) = %v, want %v", tc.spec, got, tc.want)
			}
		})
	}
}
