package gateway_test

import (
	"errors"
	"fmt"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestErrorCodeAndMessage(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.1: refused")
	for _, tc := range []struct {
		name    string
		err     error
		code    gateway.Code
		message string
	}{
		{"nil", nil, "", "internal error"},
		{"plain", cause, gateway.CodeInternal, "internal error"},
		{"gateway", gateway.Errorf(gateway.CodeNotFound, "vm %s not found", "vm_1"), gateway.CodeNotFound, "vm vm_1 not found"},
		{"wrapped", fmt.Errorf("store: %w", gateway.Errorf(gateway.CodeConflict, "busy")), gateway.CodeConflict, "busy"},
		{"with a cause", gateway.Wrap(gateway.CodeUnavailable, cause, "the sidecar is gone"), gateway.CodeUnavailable, "the sidecar is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gateway.ErrorCode(tc.err); got != tc.code {
				t.Errorf("ErrorCode = %q, want %q", got, tc.code)
			}
			if tc.err != nil {
				if got := gateway.ErrorMessage(tc.err); got != tc.message {
					t.Errorf("ErrorMessage = %q, want %q", got, tc.message)
				}
			}
		})
	}
	// The cause stays reachable for errors.Is, and out of the message.
	err := gateway.Wrap(gateway.CodeUnavailable, cause, "gone")
	if !errors.Is(err, cause) || gateway.ErrorMessage(err) != "gone" {
		t.Fatalf("Wrap lost its cause or shows it: %v", err)
	}
}
