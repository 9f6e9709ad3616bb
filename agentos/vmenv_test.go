package agentos

import (
	"strings"
	"testing"
	"time"
)

// TestSetEnv checks that variables given after creation reach every later
// process under its own, as the create-time environment does: a process's
// variable wins over the VM's, the VM's wins over the default one, and a
// second SetEnv replaces the first.
func TestSetEnv(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 2*time.Minute)
	vm.SetEnv(map[string]string{"LATE": "vm", "BOTH": "vm", "HOME": "/workspace"})
	for _, tc := range []struct {
		name string
		own  map[string]string
		want []string
	}{
		{"vm only", nil, []string{"LATE=vm", "BOTH=vm", "HOME=/workspace", "USER=agentos"}},
		{"process wins", map[string]string{"BOTH": "proc"}, []string{"LATE=vm", "BOTH=proc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := vm.Exec(ctx, "env", ExecOptions{Env: tc.own})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("env: %v, %+v", err, res)
			}
			lines := strings.Split(string(res.Stdout), "\n")
			for _, w := range tc.want {
				if !contains(lines, w) {
					t.Errorf("env lacks %s:\n%s", w, res.Stdout)
				}
			}
		})
	}
	vm.SetEnv(map[string]string{"OTHER": "x"})
	res, err := vm.Exec(ctx, "env", ExecOptions{})
	if lines := strings.Split(string(res.Stdout), "\n"); err != nil || contains(lines, "LATE=vm") || !contains(lines, "OTHER=x") {
		t.Fatalf("after a second SetEnv: %v\n%s", err, res.Stdout)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}
