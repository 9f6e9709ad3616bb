package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/vmspec"
)

// TestParseConfigMountAllow: --mount-allow is repeatable and
// comma-separated, AGENTOS_GATEWAY_MOUNT_ALLOW sets it too, flags replace
// the variable, and a bad entry fails start-up naming the flag.
func TestParseConfigMountAllow(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "c")
	for _, d := range []string{a, b, c} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		args    []string
		env     string
		want    []vmspec.MountRule
		wantErr string
	}{
		{name: "none"},
		{name: "repeated and comma-separated", args: []string{"--mount-allow", a + "," + b + ":rw", "--mount-allow=" + c + ":ro"},
			want: []vmspec.MountRule{{Path: a}, {Path: b, ReadWrite: true}, {Path: c}}},
		{name: "env", env: a + ":rw," + b, want: []vmspec.MountRule{{Path: a, ReadWrite: true}, {Path: b}}},
		{name: "flag replaces env", args: []string{"--mount-allow", c}, env: a + ":rw", want: []vmspec.MountRule{{Path: c}}},
		{name: "relative", args: []string{"--mount-allow", "data"}, wantErr: "--mount-allow"},
		{name: "missing", env: filepath.Join(base, "nope"), wantErr: "--mount-allow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, func(k string) string {
				if k == "AGENTOS_GATEWAY_MOUNT_ALLOW" {
					return tc.env
				}
				return ""
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.mountAllow, tc.want) {
				t.Fatalf("mountAllow = %+v, want %+v", cfg.mountAllow, tc.want)
			}
		})
	}
}
