package agentos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

func TestExec(t *testing.T) {
	vm := newVM(t, VMOptions{Env: map[string]string{"VM_LEVEL": "from-vm"}})
	ctx := testContext(t, 120*time.Second)
	tests := []struct {
		name                 string
		command              string
		opts                 ExecOptions
		code                 int
		stdout, stderr       string
		stdoutCut, stderrCut bool
	}{
		{name: "direct", command: "echo hi", stdout: "hi\n"},
		{name: "shell syntax", command: "echo out-line; echo err-line >&2; exit 3", code: 3, stdout: "out-line\n", stderr: "err-line\n"},
		{name: "default cwd", command: "pwd", stdout: "/workspace\n"},
		{name: "cwd", command: "pwd", opts: ExecOptions{Cwd: "/tmp"}, stdout: "/tmp\n"},
		{name: "env", command: "sh -c 'echo $GREETING $VM_LEVEL'", opts: ExecOptions{Env: map[string]string{"GREETING": "hello"}}, stdout: "hello from-vm\n"},
		{name: "stdin", command: "cat", opts: ExecOptions{Stdin: []byte("via stdin\n")}, stdout: "via stdin\n"},
		{name: "empty stdin closes", command: "cat", opts: ExecOptions{Stdin: []byte{}}, stdout: ""},
		{name: "truncated", command: "printf abcdefgh", opts: ExecOptions{MaxOutputBytes: 3}, stdout: "abc", stdoutCut: true},
		{name: "shell not found", command: "sh -c nonexistent-xyz", code: 127},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := vm.Exec(ctx, tc.command, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.ExitCode != tc.code || string(r.Stdout) != tc.stdout || r.StdoutTruncated != tc.stdoutCut {
				t.Fatalf("got code=%d stdout=%q cut=%v stderr=%q", r.ExitCode, r.Stdout, r.StdoutTruncated, r.Stderr)
			}
			if tc.stderr != "" && string(r.Stderr) != tc.stderr {
				t.Fatalf("stderr = %q, want %q", r.Stderr, tc.stderr)
			}
		})
	}
}

// TestExecLaunchRejected: a command the sidecar cannot launch is a
// LaunchError, not exit code 1 or 127.
func TestExecLaunchRejected(t *testing.T) {
	vm := newVM(t, VMOptions{})
	_, err := vm.Exec(testContext(t, 30*time.Second), "no-such-command-xyz", ExecOptions{})
	var launch *LaunchError
	if !errors.As(err, &launch) || !errors.Is(err, ErrCommandNotFound) {
		t.Fatalf("err = %v, want *LaunchError for a command not found", err)
	}
	if len(vm.Processes()) != 0 {
		t.Fatalf("rejected launch left a process table entry: %+v", vm.Processes())
	}
}

// TestExecOutputBeforeExit: exec returns at the exit event, with no quiet
// window, so every byte must have come before it: processes that print on
// both streams and exit at once, output relayed through a pipeline's stages,
// and output of many chunks.
func TestExecOutputBeforeExit(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 120*time.Second)
	tests := []struct {
		cmd            string
		runs           int
		stdout, stderr string
	}{
		{cmd: "printf x; printf y >&2", runs: 15, stdout: "x", stderr: "y"},
		{cmd: "sh -c 'echo a; echo b >&2; echo c'", runs: 5, stdout: "a\nc\n", stderr: "b\n"},
		{cmd: "echo a | tr a b", runs: 5, stdout: "b\n"},
		{cmd: "head -c 300000 /dev/zero", runs: 2, stdout: string(make([]byte, 300000))},
	}
	for _, tt := range tests {
		for i := range tt.runs {
			r, err := vm.Exec(ctx, tt.cmd, ExecOptions{})
			if err != nil {
				t.Fatalf("%s: %v", tt.cmd, err)
			}
			if string(r.Stdout) != tt.stdout || string(r.Stderr) != tt.stderr {
				t.Fatalf("%s, run %d: %d bytes of stdout %.20q, stderr %q; want %d bytes %.20q, stderr %q",
					tt.cmd, i, len(r.Stdout), r.Stdout, r.Stderr, len(tt.stdout), tt.stdout, tt.stderr)
			}
		}
	}
}

// TestExecTimeoutKillsTree: the deadline kills the whole pipeline, not only
// the outer sh, and the timeout is reported only once the exit is confirmed.
func TestExecTimeoutKillsTree(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 90*time.Second)
	start := time.Now()
	r, err := vm.Exec(ctx, "yes | head -c 10", ExecOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if r == nil || r.ExitCode != 137 || r.Signal != "SIGKILL" {
		t.Fatalf("result = %+v, want exit 137 by SIGKILL", r)
	}
	procs, err := vm.GuestProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Running {
			t.Fatalf("process %s (%s) still running after the timeout kill", p.ProcessID, p.Command)
		}
	}
	t.Logf("timeout confirmed after %v", time.Since(start))
}

func TestSpawnStreamsStdinAndOutput(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	p, err := vm.SpawnCommand(ctx, "sh -c 'while read l; do echo got:$l; echo warn:$l >&2; done; echo after-eof'", SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write(ctx, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	got := map[Stream]string{}
	var lastSeq uint64
	for !strings.Contains(got[Stdout], "got:one") || !strings.Contains(got[Stderr], "warn:one") {
		o, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o.Seq != lastSeq+1 || o.Time.IsZero() {
			t.Fatalf("output %d after %d, time %v", o.Seq, lastSeq, o.Time)
		}
		lastSeq = o.Seq
		got[o.Stream] += string(o.Data)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		o, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[o.Stream] += string(o.Data)
	}
	if !strings.HasSuffix(got[Stdout], "after-eof\n") {
		t.Fatalf("stdout = %q", got[Stdout])
	}
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("wait = %+v, %v", st, err)
	}
	info := p.Info()
	if info.Running || info.Exit == nil || info.Exit.ExitCode != 0 || info.Pid == 0 {
		t.Fatalf("info = %+v", info)
	}
}

func TestSignalsAndProcessTable(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	p, err := vm.Spawn(ctx, []string{"sleep", "30"}, SpawnOptions{CloseStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, "bogus"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bogus signal: %v", err)
	}
	if err := p.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode != 143 || st.Signal != "SIGTERM" {
		t.Fatalf("wait = %+v, %v; want 143 by SIGTERM", st, err)
	}
	q, err := vm.Spawn(ctx, []string{"sleep", "30"}, SpawnOptions{CloseStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	table := vm.Processes()
	if len(table) != 2 || table[0].ProcessID != p.ID() || table[0].Running || !table[1].Running {
		t.Fatalf("process table = %+v", table)
	}
	if got, ok := vm.Process(q.ID()); !ok || got != q {
		t.Fatal("Process lookup failed")
	}
	if err := q.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Wait(ctx); err != nil || st.ExitCode != 137 {
		t.Fatalf("kill wait = %+v, %v", st, err)
	}
}

// TestDisposeFailsWaiters: a process running when its VM is disposed gets
// an error, never a made-up exit code; the sidecar and its other VMs live on.
func TestDisposeFailsWaiters(t *testing.T) {
	s := sharedSidecar(t)
	ctx := testContext(t, 60*time.Second)
	other := newVM(t, VMOptions{})
	vm, err := s.CreateVM(ctx, VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := vm.Spawn(ctx, []string{"sleep", "30"}, SpawnOptions{CloseStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, ErrVMDisposed) {
		t.Fatalf("wait after dispose = %v, want ErrVMDisposed", err)
	}
	if _, err := vm.Exec(ctx, "true", ExecOptions{}); !errors.Is(err, ErrVMDisposed) {
		t.Fatalf("exec on disposed vm = %v", err)
	}
	if r, err := other.Exec(ctx, "echo alive", ExecOptions{}); err != nil || string(r.Stdout) != "alive\n" {
		t.Fatalf("other vm: %v %v", r, err)
	}
	if s.Err() != nil {
		t.Fatalf("sidecar died: %v", s.Err())
	}
}

func TestOutputOverflowIsExplicit(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	p, err := vm.SpawnCommand(ctx, "head -c 200000 /dev/zero", SpawnOptions{CloseStdin: true, OutputBuffer: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		o, err := p.Next(ctx)
		if err != nil {
			if !errors.Is(err, ErrOutputOverflow) {
				t.Fatalf("err = %v, want ErrOutputOverflow", err)
			}
			break
		}
		n += len(o.Data)
	}
	if n > 1024 {
		t.Fatalf("buffered %d bytes past a 1024-byte bound", n)
	}
}

func TestVMEventsAndLifecycle(t *testing.T) {
	s := sharedSidecar(t)
	ctx := testContext(t, 60*time.Second)
	vm, err := s.CreateVM(ctx, VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := vm.State(); st != VMReady {
		t.Fatalf("state = %s", st)
	}
	sub := vm.Subscribe(16)
	if _, err := vm.Exec(ctx, "true", ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := vm.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for ev := range sub.C() {
		k := ev.Type
		if ev.State != "" {
			k += ":" + string(ev.State)
		}
		kinds = append(kinds, k)
	}
	want := "process_exit lifecycle:disposing lifecycle:disposed"
	if got := strings.Join(kinds, " "); !strings.Contains(got, want) {
		t.Fatalf("events %q, want to contain %q", got, want)
	}
}

func TestSoftwareMountsAndAgents(t *testing.T) {
	vm := newVM(t, VMOptions{Agents: []string{"pi"}})
	ctx := testContext(t, 60*time.Second)
	sw, err := vm.Software(ctx)
	if err != nil || len(sw) == 0 {
		t.Fatalf("software = %v, %v", sw, err)
	}
	if _, err := vm.Mounts(ctx); err != nil {
		t.Fatal(err)
	}
	agents, err := vm.ListAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range agents {
		found = found || (a.ID == "pi" && a.Installed)
	}
	if !found {
		t.Fatalf("agents = %+v", agents)
	}
	if _, err := vm.Resources(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newVMErr(ctx, VMOptions{Agents: []string{"nope"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown agent: %v", err)
	}
}

func newVMErr(ctx context.Context, o VMOptions) (*VM, error) {
	vm, err := shared.CreateVM(ctx, o)
	if err == nil {
		vm.Dispose(context.Background())
	}
	return vm, err
}

// TestVMOptionsAndConfiguration covers what a VM is created and configured
// with: HTTP into a guest listener, software linked into a running VM,
// reconfiguration, a permission policy, and mounts.
func TestVMOptionsAndConfiguration(t *testing.T) {
	s := sharedSidecar(t)
	ctx := testContext(t, 120*time.Second)
	vm := newVM(t, VMOptions{})

	srv, err := vm.Spawn(ctx, []string{"node", "-e", "require('http').createServer((q,r)=>{r.setHeader('x-guest','yes');r.end('hello '+q.url)}).listen(8080,()=>console.log('listening'))"}, SpawnOptions{CloseStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := srv.Next(ctx); err != nil || !strings.Contains(string(o.Data), "listening") {
		t.Fatalf("guest server: %q %v", o.Data, err)
	}
	resp, err := vm.Fetch(ctx, FetchRequest{Port: 8080, Path: "/x?y=1"})
	if err != nil || resp.Status != 200 || string(resp.Body) != "hello /x?y=1" || resp.Header.Get("X-Guest") != "yes" {
		t.Fatalf("fetch = %+v, %v", resp, err)
	}
	if _, err := vm.Fetch(ctx, FetchRequest{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("fetch without port: %v", err)
	}
	if err := srv.Kill(ctx); err != nil {
		t.Fatal(err)
	}

	linked, err := vm.LinkSoftware(ctx, "@agentos-software/pi")
	if err != nil || len(linked.Agents) != 1 || linked.Agents[0].ID != "pi" {
		t.Fatalf("link = %+v, %v", linked, err)
	}
	if _, err := vm.LinkSoftware(ctx, "@agentos-software/nope"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("link unknown: %v", err)
	}
	if err := vm.Configure(ctx, ConfigureOptions{LoopbackExemptPorts: []uint16{9999}}); err != nil {
		t.Fatal(err)
	}
	if r, err := vm.Exec(ctx, "echo still-works", ExecOptions{}); err != nil || string(r.Stdout) != "still-works\n" {
		t.Fatalf("exec after configure: %v %v", r, err)
	}
	if err := vm.Unmount(ctx, "/nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unmount unknown: %v", err)
	}

	deny := protocol.PermissionModeDeny
	var fsScope protocol.FsPermissionScope = deny
	locked, err := s.CreateVM(ctx, VMOptions{Permissions: &protocol.PermissionsPolicy{Fs: &fsScope}})
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Dispose(context.Background())
	err = locked.WriteFile(ctx, "/workspace/y", []byte("y"))
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Errno != "EACCES" {
		t.Fatalf("write under fs deny = %v, want EACCES", err)
	}
}

// TestStdinLimit: stdin up to MaxStdinWrite arrives whole; more is refused
// before it can wedge the process (see MaxStdinWrite).
func TestStdinLimit(t *testing.T) {
	vm := newVM(t, VMOptions{})
	ctx := testContext(t, 60*time.Second)
	r, err := vm.Exec(ctx, "wc -c", ExecOptions{Stdin: bytes.Repeat([]byte("x"), MaxStdinWrite), Timeout: 30 * time.Second})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "65536" {
		t.Fatalf("64 KiB of stdin: %+v %v", r, err)
	}
	if _, err := vm.Exec(ctx, "wc -c", ExecOptions{Stdin: make([]byte, MaxStdinWrite+1)}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("over the limit: %v", err)
	}
}

// TestSessionDatabasePath: a VM's session database works from a relative
// data directory (the engine refuses a relative path, so CreateVM resolves
// it), and a create the engine refuses leaves no database file behind.
func TestSessionDatabasePath(t *testing.T) {
	s := sharedSidecar(t)
	ctx := testContext(t, 60*time.Second)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(wd, dir)
	if err != nil || filepath.IsAbs(rel) {
		t.Fatalf("no relative path to %s from %s: %q %v", dir, wd, rel, err)
	}
	vm, err := s.CreateVM(ctx, VMOptions{Database: true, DataDir: rel})
	if err != nil {
		t.Fatalf("create with the relative data directory %q: %v", rel, err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "agentos-vm-*.db")); len(files) != 1 {
		t.Errorf("session databases while the VM runs: %q, want one", files)
	}
	if err := vm.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	// An unknown limits section: the engine refuses the create after the
	// database file was made for it.
	if vm, err := s.CreateVM(ctx, VMOptions{Database: true, DataDir: dir, Limits: map[string]any{"nosuch": map[string]any{}}}); err == nil {
		vm.Dispose(ctx)
		t.Fatal("the engine took an unknown limits section")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left in the data directory: %v", left)
	}
}
