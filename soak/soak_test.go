package soak

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testLog writes the run's progress lines to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestSoak is the 1-minute soak of make test: the real gateway binary, 3
// tenants, a sidecar SIGKILLed every 20 s. make soak runs the same for 10
// minutes with a kill every 60 s.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on the real gateway binary")
	}
	bin := filepath.Join(t.TempDir(), "agentos-gateway")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/agentos-gateway/agentos-gateway/cmd/server").CombinedOutput()
	if err != nil {
		t.Fatalf("build the gateway: %v\n%s", err, out)
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	rep, err := Run(ctx, Config{GatewayBin: bin, Duration: time.Minute, KillEvery: 20 * time.Second,
		Dir: dir, Progress: testLog{t}, ProgressEvery: 20 * time.Second})
	if err != nil {
		// The directory goes with the test: its log's end is kept here.
		t.Fatalf("%v\nthe gateway log's last lines:\n%s", err, logTail(filepath.Join(dir, "gateway.log"), 80))
	}
	var b bytes.Buffer
	if err := rep.Print(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if !rep.Passed() {
		t.Fatalf("soak failed: %s", strings.Join(rep.Failures, "; "))
	}
	// The driver's own goroutines (workers, killer, streams) are gone too.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("the soak left %d goroutines of its own\n%s", runtime.NumGoroutine()-before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestLeakedProcesses checks the process leak detection on a real
// process: one that carries the gateway's TMPDIR is found until it ends.
func TestLeakedProcesses(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{"TMPDIR=" + tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	for _, tc := range []struct {
		name   string
		groups map[int]bool
		tmp    string
	}{
		{"by TMPDIR", nil, tmp},
		{"by process group", map[int]bool{cmd.Process.Pid: true}, filepath.Join(tmp, "other")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left := leakedProcesses(tc.groups, tc.tmp)
			if !containsPid(left, cmd.Process.Pid) {
				t.Fatalf("sleep %d not found among %q", cmd.Process.Pid, left)
			}
		})
	}
	if left := leakedProcesses(nil, filepath.Join(tmp, "other")); containsPid(left, cmd.Process.Pid) {
		t.Fatalf("a process of another TMPDIR was counted: %q", left)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if left := leakedProcesses(nil, tmp); containsPid(left, cmd.Process.Pid) {
		t.Fatalf("an ended process was counted: %q", left)
	}
}

func containsPid(left []string, pid int) bool {
	for _, l := range left {
		if strings.HasPrefix(l, "pid "+strconv.Itoa(pid)+" ") {
			return true
		}
	}
	return false
}
