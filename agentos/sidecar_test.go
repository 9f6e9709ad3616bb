package agentos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLocateEngineNamesMakeSetup(t *testing.T) {
	t.Setenv(EngineEnvPackages, t.TempDir())
	t.Setenv(EngineEnvBin, "")
	_, err := LocateEngine()
	if !errors.Is(err, ErrEngineMissing) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("err = %v, want ErrEngineMissing naming make setup", err)
	}
}

func TestStartFailuresLeaveClientReady(t *testing.T) {
	eng := requireEngine(t)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"missing binary", Options{Engine: Engine{SidecarBin: filepath.Join(t.TempDir(), "nope"), PackagesDir: eng.PackagesDir}}, "no executable sidecar"},
		{"dies before handshake", Options{Engine: fakeEngine(eng), Env: []string{fakeSidecarEnv + "=exit"}}, "refusing to start"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(testContext(t, 10*time.Second), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// The next start, with the real binary, works.
	s := ownSidecar(t, Options{})
	vm, err := s.CreateVM(testContext(t, 30*time.Second), VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Dispose(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeTimeoutKillsChild(t *testing.T) {
	eng := requireEngine(t)
	// The fake answers the handshake, so give it a context that is already
	// over: Start must fail and reap the child.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Start(ctx, Options{Engine: fakeEngine(eng), Env: []string{fakeSidecarEnv + "=hang"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestWatchdogFailsCallsOnSilence uses the fake: the real sidecar always
// heartbeats. The fake also takes a second to load, twice the silence
// timeout: the watchdog counts from the handshake's answer, so a slow start
// is not taken for a hang.
func TestWatchdogFailsCallsOnSilence(t *testing.T) {
	eng := requireEngine(t)
	s, err := Start(testContext(t, 10*time.Second), Options{Engine: fakeEngine(eng), Env: []string{fakeSidecarEnv + "=slowhang"}, SilenceTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	start := time.Now()
	_, err = s.CreateVM(testContext(t, 10*time.Second), VMOptions{})
	var exited *SidecarExitedError
	if !errors.As(err, &exited) || !errors.Is(err, ErrSidecarSilent) {
		t.Fatalf("err = %v, want SidecarExitedError caused by ErrSidecarSilent", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("watchdog took %v", d)
	}
	<-s.Done()
}

// TestCorruptFrameFailsConnection uses the fake: the real sidecar does not
// send corrupt frames on request.
func TestCorruptFrameFailsConnection(t *testing.T) {
	eng := requireEngine(t)
	for _, mode := range []string{"corrupt", "oversize"} {
		t.Run(mode, func(t *testing.T) {
			s, err := Start(testContext(t, 10*time.Second), Options{Engine: fakeEngine(eng), Env: []string{fakeSidecarEnv + "=" + mode}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			_, err = s.CreateVM(testContext(t, 10*time.Second), VMOptions{})
			var exited *SidecarExitedError
			if !errors.As(err, &exited) {
				t.Fatalf("err = %v, want *SidecarExitedError", err)
			}
			if mode == "corrupt" && !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

func TestCloseIsCleanAndIdempotent(t *testing.T) {
	tmp := t.TempDir()
	s := ownSidecar(t, Options{TempDir: tmp})
	pid := s.Pid()
	// Running a program makes the engine write its caches under TMPDIR.
	vm, err := s.CreateVM(testContext(t, 30*time.Second), VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Exec(testContext(t, 30*time.Second), "echo hi", ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Fatalf("temporary directories of the sidecar: %v", entries)
	}
	if err := s.Close(testContext(t, 10*time.Second)); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := s.Close(testContext(t, 10*time.Second)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if !errors.Is(s.Err(), ErrClosed) {
		t.Fatalf("Err() = %v, want ErrClosed", s.Err())
	}
	if processAlive(pid) {
		t.Fatalf("sidecar %d still running after Close", pid)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Fatalf("the sidecar left %v behind", entries)
	}
	if _, err := s.CreateVM(testContext(t, time.Second), VMOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("CreateVM after Close: %v, want ErrClosed", err)
	}
}

// TestSidecarCrashFailsEverything kills the real sidecar with SIGKILL while a
// process streams and an exec runs: both fail within a second with the exit
// status and the stderr tail, and the VMs are lost.
func TestSidecarCrashFailsEverything(t *testing.T) {
	tmp := t.TempDir()
	s := ownSidecar(t, Options{TempDir: tmp})
	ctx := testContext(t, 60*time.Second)
	vm, err := s.CreateVM(ctx, VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := vm.SpawnCommand(ctx, "sh -c 'while true; do echo tick; sleep 0.05; done'", SpawnOptions{CloseStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Next(ctx); err != nil {
		t.Fatalf("first output: %v", err)
	}
	execErr := make(chan error, 1)
	go func() {
		_, err := vm.Exec(ctx, "sleep 30", ExecOptions{})
		execErr <- err
	}()
	time.Sleep(300 * time.Millisecond)

	killed := time.Now()
	if err := syscall.Kill(s.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exited *SidecarExitedError
	select {
	case err := <-execErr:
		if !errors.As(err, &exited) {
			t.Fatalf("exec err = %v, want *SidecarExitedError", err)
		}
	case <-time.After(time.Second):
		t.Fatal("in-flight exec did not fail within a second")
	}
	if time.Since(killed) > time.Second {
		t.Fatalf("failure took %v", time.Since(killed))
	}
	if exited.Signal != "killed" || exited.StderrTail == "" {
		t.Fatalf("exit error lacks diagnostics: signal=%q stderr=%q", exited.Signal, exited.StderrTail)
	}
	if _, err := stream.Wait(ctx); !errors.As(err, &exited) {
		t.Fatalf("stream wait = %v, want the sidecar's exit error", err)
	}
	for {
		if _, err := stream.Next(ctx); err != nil {
			if !errors.As(err, &exited) {
				t.Fatalf("stream next = %v, want the sidecar's exit error", err)
			}
			break
		}
	}
	if st, _ := vm.State(); st != VMLost {
		t.Fatalf("vm state = %s, want lost", st)
	}
	if _, err := vm.Exec(ctx, "true", ExecOptions{}); !errors.As(err, &exited) {
		t.Fatalf("exec on lost vm = %v", err)
	}
	// What the engine wrote under its TMPDIR goes with it.
	<-s.Done()
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Fatalf("the killed sidecar left %v behind", entries)
	}
}

// TestOneShotProgramLeavesNoSidecar runs a real program that creates a VM,
// runs echo hi and disposes, and one that is SIGKILLed mid-way: neither may
// leave a sidecar behind.
func TestOneShotProgramLeavesNoSidecar(t *testing.T) {
	requireEngine(t)
	bin := filepath.Join(t.TempDir(), "oneshot")
	build := exec.Command("go", "build", "-o", bin, "./testdata/oneshot")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	t.Run("exits by itself", func(t *testing.T) {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "ONESHOT_MODE=run")
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("oneshot: %v\n%s", err, out)
		}
		lines := strings.Fields(string(out))
		if len(lines) < 2 || lines[1] != "hi" {
			t.Fatalf("output %q", out)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("one-shot program took %v", d)
		}
		pid, _ := strconv.Atoi(lines[0])
		waitGone(t, pid)
	})
	t.Run("killed with SIGKILL", func(t *testing.T) {
		tmp := t.TempDir()
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "ONESHOT_MODE=hold", "TMPDIR="+tmp)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := stdout.Read(buf)
		pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("pid line %q", buf[:n])
		}
		cmd.Process.Kill()
		cmd.Wait()
		waitGone(t, pid)
		// The sidecar's temporary directory outlives the killed program;
		// the next program to start a sidecar there sweeps it.
		if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
			t.Fatalf("temporary directories after the kill: %v", entries)
		}
		sweepTempDirs(tmp)
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Fatalf("left after the sweep: %v", entries)
		}
	})
}

// TestSweepTempDirs removes exactly the sidecar directories of processes
// that are gone.
func TestSweepTempDirs(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	names := map[string]bool{ // name → kept
		fmt.Sprintf("agentos-sidecar-%d-1", dead.Process.Pid): false,
		fmt.Sprintf("agentos-sidecar-%d-2", os.Getpid()):      true,
		"agentos-sidecar-1-3":                                 true, // init lives
		"agentos-sidecar-x-4":                                 true,
		"agentos-sidecar-":                                    true,
		"something-else":                                      true,
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(parent, name, "inner"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepTempDirs(parent)
	for name, kept := range names {
		_, err := os.Stat(filepath.Join(parent, name))
		if got := err == nil; got != kept {
			t.Errorf("%s: kept %v, want %v", name, got, kept)
		}
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(-pid, syscall.SIGKILL)
			t.Fatalf("sidecar %d outlived its program", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports whether pid is a live, non-zombie process.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// TestWarmIsolatesDefault: the sidecar runs with one warm V8 isolate per key
// (see spawn), unless Options.Env says otherwise.
func TestWarmIsolatesDefault(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, warmIsolatesEnv + "=1"},
		{[]string{warmIsolatesEnv + "=3"}, warmIsolatesEnv + "=3"},
	} {
		s := ownSidecar(t, Options{Env: tc.env})
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for kv := range strings.SplitSeq(string(raw), "\x00") {
			if strings.HasPrefix(kv, warmIsolatesEnv+"=") {
				got = append(got, kv)
			}
		}
		// exec keeps the last of repeated names, so the process sees one.
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("Env %v: the sidecar has %v, want %s", tc.env, got, tc.want)
		}
	}
}
