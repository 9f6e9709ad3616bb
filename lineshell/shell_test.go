package lineshell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testVM starts a real sidecar and VM for one test, both gone at its end.
func testVM(t *testing.T) engineVM {
	t.Helper()
	if _, err := agentos.LocateEngine(); err != nil {
		t.Skipf("agentos engine not available (run `make setup`): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := agentos.Start(ctx, agentos.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	vm, err := s.CreateVM(ctx, agentos.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return engineVM{vm}
}

// engineVM runs lines as the engine's processes, as the gateway's VMs do.
type engineVM struct{ *agentos.VM }

func (e engineVM) Spawn(ctx context.Context, argv []string, o SpawnOptions) (Process, error) {
	p, err := e.VM.Spawn(ctx, argv, agentos.SpawnOptions{Cwd: o.Cwd, Env: o.Env, CloseStdin: true,
		OnOutput: func(out agentos.Output) { o.OnOutput(out.Data) }})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// term collects a shell's output as a terminal would show it, for tests.
type term struct {
	mu   sync.Mutex
	out  bytes.Buffer
	seq  uint64
	bad  string
	wake chan struct{}
}

func newTerm() *term { return &term{wake: make(chan struct{}, 1)} }

func (tm *term) onOutput(o Output) {
	tm.mu.Lock()
	if o.Seq != tm.seq+1 && tm.bad == "" {
		tm.bad = fmt.Sprintf("output %d after %d", o.Seq, tm.seq)
	}
	tm.seq = o.Seq
	tm.out.Write(o.Data)
	tm.mu.Unlock()
	select {
	case tm.wake <- struct{}{}:
	default:
	}
}

func (tm *term) String() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// waitFor waits until the output holds want n times in all.
func (tm *term) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for strings.Count(tm.String(), want) < n {
		select {
		case <-tm.wake:
		case <-deadline:
			t.Fatalf("no %d× %q in %q", n, want, tm.String())
		}
	}
}

func startShell(t *testing.T, vm VM, o Options) (*Shell, *term) {
	t.Helper()
	tm := newTerm()
	o.OnOutput = tm.onOutput
	if o.Shell == "" {
		o.Shell = "sh"
	}
	if o.Cwd == "" {
		o.Cwd = agentos.DefaultCwd
	}
	if o.ID == "" {
		o.ID = strings.ReplaceAll(t.Name(), "/", "-")
	}
	sh, err := Start(vm, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sh.Kill(ctx)
		_, _ = sh.Wait(ctx)
		if tm.bad != "" {
			t.Errorf("output sequence: %s", tm.bad)
		}
	})
	return sh, tm
}

func typeKeys(t *testing.T, sh *Shell, keys string) {
	t.Helper()
	if _, err := sh.Write(context.Background(), []byte(keys)); err != nil {
		t.Fatalf("type %q: %v", keys, err)
	}
}

// TestShellOnTheEngine drives a line shell in a real VM: the prompt comes
// at once with no process running, lines typed ahead all run in order,
// cd and export carry over, $? is the last line's status, unset sticks,
// values with quotes and newlines survive, a line that reads stdin gets the
// keys typed while it runs, Ctrl-C interrupts a running line, and exit N
// ends the shell with N.
func TestShellOnTheEngine(t *testing.T) {
	vm := testVM(t)
	sh, tm := startShell(t, vm, Options{Cols: 100, Rows: 30})
	if got := tm.String(); got != Prompt {
		t.Fatalf("first output %q, want the prompt", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if ps, err := vm.GuestProcesses(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("processes at the idle prompt: %v %v", ps, err)
	}
	// Typed ahead, in one write: each line runs after the one before.
	typeKeys(t, sh, "cd /tmp && export FOO='a \"b\" $c\\d'\recho one\rfalse\r")
	tm.waitFor(t, Prompt, 4)
	typeKeys(t, sh, "echo status=$? pwd=$(pwd) foo=\"$FOO\" cols=$COLUMNS\r")
	tm.waitFor(t, `status=1 pwd=/tmp foo=a "b" $c\d cols=100`, 1)
	// Keys typed while a line runs are its input: wait for the prompt.
	tm.waitFor(t, Prompt, 5)
	typeKeys(t, sh, "export ML=$'x\\ny'; unset PAGER\r")
	tm.waitFor(t, Prompt, 6)
	typeKeys(t, sh, "printenv ML; echo pager=${PAGER-unset}\r")
	tm.waitFor(t, "x\r\ny\r\npager=unset", 1)
	tm.waitFor(t, Prompt, 7)
	// A line's stdin is empty, and keys typed while it runs wait for the
	// prompt.
	typeKeys(t, sh, "read v; echo read=$? v=$v\r")
	typeKeys(t, sh, "echo typed-ahead\r")
	tm.waitFor(t, "read=1 v=\r\n", 1)
	tm.waitFor(t, "$ echo typed-ahead\r\ntyped-ahead\r\n", 1)
	tm.waitFor(t, Prompt, 9)
	// Ctrl-C ends a running line and the prompt comes back.
	typeKeys(t, sh, "sleep 60\r")
	time.Sleep(time.Second)
	start := time.Now()
	typeKeys(t, sh, "\x03")
	tm.waitFor(t, "^C", 1)
	tm.waitFor(t, Prompt, 10)
	typeKeys(t, sh, "echo after-$?\r")
	tm.waitFor(t, "after-130", 1)
	tm.waitFor(t, Prompt, 11)
	if took := time.Since(start); took > 50*time.Second {
		t.Fatalf("the interrupted sleep held the shell for %s", took)
	}
	typeKeys(t, sh, "exit 3\r")
	st, err := sh.Wait(ctx)
	if err != nil || st.ExitCode != 3 || st.Signal != "" {
		t.Fatalf("exit 3: %+v %v; screen %q", st, err, tm.String())
	}
	if _, err := sh.Write(ctx, []byte("x")); err != ErrEnded {
		t.Fatalf("input after the end: %v", err)
	}
	if _, err := vm.ReadFile(ctx, sh.state); err == nil {
		t.Fatal("the state file outlived the shell")
	}
}

// TestShellEOF: Ctrl-D at an empty prompt, typed ahead too, ends the shell
// with the last line's status.
func TestShellEOF(t *testing.T) {
	vm := testVM(t)
	sh, tm := startShell(t, vm, Options{Shell: "bash"})
	typeKeys(t, sh, "(exit 4)\r\x04")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sh.Wait(ctx)
	if err != nil || st.ExitCode != 4 {
		t.Fatalf("Ctrl-D: %+v %v; screen %q", st, err, tm.String())
	}
	if got := tm.String(); got != "$ (exit 4)\r\n$ exit\r\n" {
		t.Fatalf("screen %q", got)
	}
}

// TestShellEnds: every way a shell ends releases a Wait that started
// before it, with the status it says (run with -race: Wait must not race
// the end's own goroutine).
func TestShellEnds(t *testing.T) {
	vm := testVM(t)
	gone := errors.New("the VM is gone")
	for _, c := range []struct {
		name    string
		end     func(*Shell)
		want    int
		wantErr error
	}{
		{"Ctrl-D", func(sh *Shell) { _, _ = sh.Write(context.Background(), []byte("\x04")) }, 0, nil},
		{"Kill", func(sh *Shell) { _ = sh.Kill(context.Background()) }, 137, nil},
		{"Abandon", func(sh *Shell) { sh.Abandon(gone) }, 0, gone},
	} {
		t.Run(c.name, func(t *testing.T) {
			sh, _ := startShell(t, vm, Options{})
			type result struct {
				code int
				err  error
			}
			waited := make(chan result, 1)
			go func() {
				st, err := sh.Wait(context.Background())
				waited <- result{st.ExitCode, err}
			}()
			c.end(sh)
			select {
			case r := <-waited:
				if r.code != c.want || !errors.Is(r.err, c.wantErr) {
					t.Fatalf("Wait = %d, %v; want %d, %v", r.code, r.err, c.want, c.wantErr)
				}
			case <-time.After(time.Minute):
				t.Fatal("Wait did not return")
			}
		})
	}
}
