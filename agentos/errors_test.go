package agentos

import (
	"fmt"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// TestRejectionsNameEngineConditions holds the engine's wordings, as 0.2.21
// sends them, against the conditions the client reads out of them.
func TestRejectionsNameEngineConditions(t *testing.T) {
	for _, tc := range []struct {
		message string
		code    EngineCode
		errno   string
	}{
		{"ERR_AGENTOS_VM_EXECUTION_CONFLICT: another execution is being admitted", EngineExecutionConflict, ""},
		{"dispose failed: ERR_AGENTOS_VM_TEARDOWN_DEADLINE (vm-3)", EngineTeardownDeadline, ""},
		{"command not found on native sidecar path: foo", EngineCommandNotFound, "ENOENT"},
		{"ENOENT: no such file or directory, stat '/x'", "", "ENOENT"},
		{"ERR_AGENTOS_VM_EXECUTION_CONFLICTING is another code", "ERR_AGENTOS_VM_EXECUTION_CONFLICTING", ""},
		{"something else", "", ""},
	} {
		t.Run(tc.message, func(t *testing.T) {
			rej := newRejectedError("ExecuteRequest", protocol.RejectedResponse{Code: "execution_error", Message: tc.message})
			if rej.EngineCode != tc.code || rej.Errno != tc.errno {
				t.Fatalf("engine code %q errno %q, want %q %q", rej.EngineCode, rej.Errno, tc.code, tc.errno)
			}
			wrapped := fmt.Errorf("launch: %w", rej)
			if tc.code != "" && !HasEngineCode(wrapped, tc.code) {
				t.Fatalf("HasEngineCode(%v, %s) = false", wrapped, tc.code)
			}
			for _, other := range []EngineCode{EngineExecutionConflict, EngineTeardownDeadline, EngineCommandNotFound} {
				if other != tc.code && HasEngineCode(wrapped, other) {
					t.Fatalf("HasEngineCode matches %s", other)
				}
			}
		})
	}
}
