package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeTargets checks, without running them, what `make run` and `make
// build` would run: run passes ARGS to the gateway, and build writes the
// bin/agentos-gateway the README names.
func TestMakeTargets(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "ARGS=--addr 127.0.0.1:9090 --log-format console"}, "go run ./cmd/server --addr 127.0.0.1:9090 --log-format console\n"},
		{[]string{"run"}, "go run ./cmd/server \n"},
		{[]string{"build"}, "go build -o bin/agentos-gateway ./cmd/server\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// -n prints the commands without running them; the recipes of
			// make setup are printed too, when its stamps are not current.
			out, err := exec.Command("make", append([]string{"-n", "-C", "../..", "--no-print-directory", "GO=go"}, tc.args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %v: %v\n%s", tc.args, err, out)
			}
			if !strings.HasSuffix(string(out), tc.want) {
				t.Fatalf("make -n %v ends with %q, want %q", tc.args, out, tc.want)
			}
		})
	}
}
