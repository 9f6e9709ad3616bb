package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

func TestVMCommands(t *testing.T) {
	e2e(t)
	run := uniq("run")
	// newVM checks what vm create prints; its clean-up belongs to the
	// whole test.
	id := newVM(t, "--label", "suite=cli", "--label", "run="+run, "--env", "GREETING=hi")
	step(t, "ls", func(t *testing.T) {
		var vms []client.VM
		if err := json.Unmarshal([]byte(ok(t, "vm", "ls", "-l", "run="+run)), &vms); err != nil {
			t.Fatalf("vm ls is not a JSON array when stdout is not a terminal: %v", err)
		}
		if len(vms) != 1 || vms[0].ID != id || vms[0].Labels["suite"] != "cli" {
			t.Fatalf("vm ls -l run=%s: %+v", run, vms)
		}
		if out := ok(t, "vm", "ls", "-l", "run=none-"+run, "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("vm ls of a label nobody has: %q", out)
		}
		if out := ok(t, "vm", "ls", "-l", "run:"+run, "-l", "suite!=cli"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("vm ls -l run:%s -l suite!=cli: %q", run, out)
		}
		table := ok(t, "vm", "ls", "-l", "run="+run, "-o", "table")
		if !regexp.MustCompile(`(?m)^ID\s+STATE\s+LABELS`).MatchString(table) || !strings.Contains(table, id) || !strings.Contains(table, "ready") {
			t.Fatalf("vm ls -o table:\n%s", table)
		}
	})
	step(t, "get", func(t *testing.T) {
		var vm client.VM
		if err := json.Unmarshal([]byte(ok(t, "vm", "get", id)), &vm); err != nil {
			t.Fatal(err)
		}
		if vm.ID != id || vm.State != client.VMReady || vm.Env["GREETING"] != "hi" {
			t.Fatalf("vm get: %+v", vm)
		}
		if out := ok(t, "vm", "get", id, "-o", "table"); !strings.Contains(out, "State:") || !strings.Contains(out, "run="+run) {
			t.Fatalf("vm get -o table:\n%s", out)
		}
	})
	step(t, "rm", func(t *testing.T) {
		if out := ok(t, "vm", "rm", id); out != id+"\n" {
			t.Fatalf("vm rm printed %q", out)
		}
		// The VM is disposed; its record goes with a second DELETE.
		var vm client.VM
		if err := json.Unmarshal([]byte(ok(t, "vm", "get", id)), &vm); err != nil || vm.State != client.VMDisposed {
			t.Fatalf("vm get after rm: %+v %v", vm, err)
		}
		if out := ok(t, "vm", "ls", "-l", "run="+run); strings.TrimSpace(out) != "[]" {
			t.Fatalf("vm ls lists the removed VM: %s", out)
		}
	})
}

// TestClearErrors: a bad key, an unknown VM and an unreachable gateway
// each print one sentence and exit 1.
func TestClearErrors(t *testing.T) {
	e2e(t)
	fails(t, opts{env: map[string]string{"AGENTOS_API_KEY": "agk_wrong_0123456789abcdefghijklmnop"}}, "refused the API key", "vm", "ls")
	fails(t, opts{}, "not found", "vm", "get", "vm_00000000000000000000")
	fails(t, opts{}, "not found", "exec", "vm_00000000000000000000", "--", "true")
	// A port nothing listens on: connection refused.
	fails(t, opts{env: map[string]string{"AGENTOS_URL": "http://127.0.0.1:1"}}, "cannot reach the gateway at http://127.0.0.1:1", "vm", "ls")
	// The flag wins over the environment.
	fails(t, opts{}, "cannot reach the gateway", "--url", "http://127.0.0.1:1", "vm", "ls")
	if r := agentos(t, opts{}, "exec", "vm_x"); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("a malformed command line: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestExecAndLogs(t *testing.T) {
	e2e(t)
	vm := newVM(t)
	c := adminClient(t)
	step(t, "status", func(t *testing.T) {
		r := agentos(t, opts{}, "exec", vm, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
			t.Fatalf("exec: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if r := agentos(t, opts{}, "exec", vm, "--", "echo $GREETING-line && exit 4"); r.code != 4 || r.stdout != "-line\n" {
			t.Fatalf("exec of a command line: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if out := ok(t, "exec", vm, "--", "echo", "a  b"); out != "a  b\n" {
			t.Fatalf("exec echo: %q", out)
		}
	})
	step(t, "stdin", func(t *testing.T) {
		r := agentos(t, opts{stdin: strings.NewReader("hello\nworld\n")}, "exec", "-i", vm, "--", "cat")
		if r.code != 0 || r.stdout != "hello\nworld\n" {
			t.Fatalf("exec -i cat: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	step(t, "interrupt", func(t *testing.T) {
		cmd := command(t, opts{}, "exec", vm, "--", "sleep", "30")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		eventually(t, "the sleep runs", func() bool {
			procs, err := c.VM(vm).Processes(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range procs {
				if p.Running && strings.Contains(p.Command+strings.Join(p.Args, " "), "sleep") {
					return true
				}
			}
			return false
		})
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || time.Since(start) > 20*time.Second {
			t.Fatalf("exec after Ctrl-C: exit %d after %v (want 130: the process got SIGINT), stderr %q", code, time.Since(start), stderr.String())
		}
	})
	step(t, "logs", func(t *testing.T) {
		ctx := ctxT(t)
		done, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"sh", "-c", "echo one; echo two >&2"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := done.Wait(ctx, stepTimeout); err != nil {
			t.Fatal(err)
		}
		r := agentos(t, opts{}, "logs", vm, itoa(done.Pid()))
		if r.code != 0 || r.stdout != "one\n" || r.stderr != "two\n" {
			t.Fatalf("logs of an exited process: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		// A running process: logs prints what there is and returns,
		// logs -f follows it to its end.
		running, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"sh", "-c", "echo first; sleep 30"}})
		if err != nil {
			t.Fatal(err)
		}
		_ = running.CloseStdin(ctx)
		eventually(t, "the first line", func() bool {
			return agentos(t, opts{}, "logs", vm, itoa(running.Pid())).stdout == "first\n"
		})
		follow := command(t, opts{}, "logs", "-f", vm, itoa(running.Pid()))
		var out syncBuffer
		follow.Stdout = &out
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
		eventually(t, "logs -f prints the first line", func() bool { return out.String() == "first\n" })
		if err := running.Signal(ctx, client.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// logs -f exits with the process's status, as exec does: 128+9.
		if err := follow.Wait(); follow.ProcessState.ExitCode() != 137 || out.String() != "first\n" {
			t.Fatalf("logs -f after the process's end: %v, stdout %q", err, out.String())
		}
		five, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"sh", "-c", "echo five; exit 5"}})
		if err != nil {
			t.Fatal(err)
		}
		if r := agentos(t, opts{}, "logs", "-f", vm, itoa(five.Pid())); r.code != 5 || r.stdout != "five\n" {
			t.Fatalf("logs -f of a process that exited 5: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		fails(t, opts{}, "no process 99999", "logs", vm, "99999")
	})
}

func TestCopy(t *testing.T) {
	e2e(t)
	vm := newVM(t)
	c := adminClient(t)
	local := t.TempDir()
	step(t, "file", func(t *testing.T) {
		src := filepath.Join(local, "notes.txt")
		if err := os.WriteFile(src, []byte("some notes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ok(t, "cp", src, vm+":/tmp/")
		if out := ok(t, "exec", vm, "--", "cat", "/tmp/notes.txt"); out != "some notes\n" {
			t.Fatalf("the uploaded file holds %q", out)
		}
		back := filepath.Join(local, "back.txt")
		ok(t, "cp", vm+":/tmp/notes.txt", back)
		if b, err := os.ReadFile(back); err != nil || string(b) != "some notes\n" {
			t.Fatalf("the downloaded file: %q %v", b, err)
		}
		fails(t, opts{}, "no such file", "cp", vm+":/tmp/no-such-file", local)
	})
	step(t, "tree", func(t *testing.T) {
		src := filepath.Join(local, "project")
		for name, body := range map[string]string{"README": "read me\n", "src/main.js": "console.log(1)\n", "src/lib/util.js": "// util\n"} {
			p := filepath.Join(src, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("src/main.js", filepath.Join(src, "main")); err != nil {
			t.Fatal(err)
		}
		fails(t, opts{}, "use cp -r", "cp", src, vm+":/tmp/project")
		ok(t, "cp", "-r", src, vm+":/tmp/project")
		entries, err := c.VM(vm).ListDir(ctxT(t), "/tmp/project", client.ListDirOptions{Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Path)
		}
		for _, want := range []string{"/tmp/project/README", "/tmp/project/src/main.js", "/tmp/project/src/lib/util.js", "/tmp/project/main"} {
			if !strings.Contains(strings.Join(names, " "), want) {
				t.Fatalf("the uploaded tree lacks %s: %v", want, names)
			}
		}
		// Into an existing directory: the tree keeps its name.
		dst := filepath.Join(local, "downloads")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		ok(t, "cp", "-r", vm+":/tmp/project", dst)
		for name, body := range map[string]string{"README": "read me\n", "src/main.js": "console.log(1)\n", "src/lib/util.js": "// util\n"} {
			if b, err := os.ReadFile(filepath.Join(dst, "project", filepath.FromSlash(name))); err != nil || string(b) != body {
				t.Fatalf("downloaded %s: %q %v", name, b, err)
			}
		}
		if target, err := os.Readlink(filepath.Join(dst, "project", "main")); err != nil || target != "src/main.js" {
			t.Fatalf("downloaded symlink: %q %v", target, err)
		}
	})
}

func TestTokenCreate(t *testing.T) {
	e2e(t)
	out := ok(t, "token", "create", "--scope", "vm:read", "--ttl", "5m", "--label", "cli-test")
	tok := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(tok, "agt_") || strings.ContainsAny(tok, " \n") {
		t.Fatalf("token create printed %q, want the secret alone", out)
	}
	// The token acts as its scope says.
	if r := agentos(t, opts{env: map[string]string{"AGENTOS_API_KEY": tok}}, "vm", "ls"); r.code != 0 {
		t.Fatalf("vm ls with the token: exit %d, stderr %q", r.code, r.stderr)
	}
	fails(t, opts{env: map[string]string{"AGENTOS_API_KEY": tok}}, "permission denied", "vm", "create")
	if r := agentos(t, opts{}, "token", "create"); r.code != 2 {
		t.Fatalf("token create without a scope: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestLogin(t *testing.T) {
	e2e(t)
	home := t.TempDir()
	cfg := filepath.Join(home, "xdg")
	// Empty values are left out of the environment (see command): only
	// the stored configuration tells where the gateway is.
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": cfg, "AGENTOS_URL": "", "AGENTOS_API_KEY": ""}
	bad := agentos(t, opts{env: env, stdin: strings.NewReader("agk_wrong_0123456789abcdefghijklmnop\n")}, "login", "--url", gw.url)
	if bad.code != 1 || !strings.Contains(bad.stderr, "refused the API key") {
		t.Fatalf("login with a bad key: exit %d, stderr %q", bad.code, bad.stderr)
	}
	if _, err := os.Stat(filepath.Join(cfg, "agentos", "config.json")); !os.IsNotExist(err) {
		t.Fatalf("a failed login wrote the config: %v", err)
	}
	r := agentos(t, opts{env: env, stdin: strings.NewReader(testAdminKey + "\n")}, "login", "--url", gw.url)
	if r.code != 0 {
		t.Fatalf("login: exit %d, stderr %q", r.code, r.stderr)
	}
	st, err := os.Stat(filepath.Join(cfg, "agentos", "config.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", st, err)
	}
	if dst, err := os.Stat(filepath.Join(cfg, "agentos")); err != nil || dst.Mode().Perm() != 0o700 {
		t.Fatalf("config dir: %v %v", dst, err)
	}
	var stored config
	b, _ := os.ReadFile(filepath.Join(cfg, "agentos", "config.json"))
	if err := json.Unmarshal(b, &stored); err != nil || stored.URL != gw.url || stored.Key != testAdminKey {
		t.Fatalf("stored %s: %v", b, err)
	}
	if r := agentos(t, opts{env: env}, "vm", "ls"); r.code != 0 {
		t.Fatalf("vm ls after login: exit %d, stderr %q", r.code, r.stderr)
	}
	// The environment wins over the stored key.
	env2 := map[string]string{"HOME": home, "XDG_CONFIG_HOME": cfg, "AGENTOS_URL": "", "AGENTOS_API_KEY": "agk_wrong_0123456789abcdefghijklmnop"}
	fails(t, opts{env: env2}, "refused the API key", "vm", "ls")
}

func TestShell(t *testing.T) {
	e2e(t)
	vm := newVM(t)
	sh := startShell(t, opts{}, vm)
	sh.waitScreen("$ ")
	sh.typ("echo hi-$((6*7))\r")
	sh.waitScreen("hi-42")
	// The window grows: the kernel sends SIGWINCH, the command a resize.
	if err := pty.Setsize(sh.tty, &pty.Winsize{Rows: 40, Cols: 123}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	sh.typ("echo cols=$COLUMNS\r")
	sh.waitScreen("cols=123")
	sh.typ("exit 3\r")
	if code := sh.exitCode(); code != 3 {
		t.Fatalf("shell exit status %d, want 3; the terminal shows %q", code, sh.screen.String())
	}
}

// ptyShell runs agentos shell VM in a pseudo-terminal.
type ptyShell struct {
	t      *testing.T
	cmd    *exec.Cmd
	tty    *os.File
	screen syncBuffer
	exited chan error
}

func startShell(t *testing.T, o opts, vm string) *ptyShell {
	t.Helper()
	s := &ptyShell{t: t, cmd: command(t, o, "shell", vm), exited: make(chan error, 1)}
	tty, err := pty.StartWithSize(s.cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	s.tty = tty
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&s.screen, tty)
	}()
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		select {
		case err := <-s.exited:
			s.exited <- err
		case <-time.After(10 * time.Second):
		}
		tty.Close()
		<-copied
	})
	return s
}

// waitScreen waits until the terminal shows want.
func (s *ptyShell) waitScreen(want string) {
	s.t.Helper()
	eventually(s.t, "the terminal shows "+want, func() bool { return strings.Contains(s.screen.String(), want) })
}

func (s *ptyShell) typ(keys string) {
	s.t.Helper()
	if _, err := s.tty.Write([]byte(keys)); err != nil {
		s.t.Fatal(err)
	}
}

// exitCode waits for the command's end.
func (s *ptyShell) exitCode() int {
	s.t.Helper()
	select {
	case err := <-s.exited:
		s.exited <- err
	case <-time.After(stepTimeout):
		s.t.Fatalf("the shell did not end; the terminal shows %q", s.screen.String())
	}
	return s.cmd.ProcessState.ExitCode()
}

// TestShellReconnects: the connection drops under the shell; the command
// attaches again and resumes the output, neither losing nor repeating any.
func TestShellReconnects(t *testing.T) {
	e2e(t)
	vm := newVM(t)
	p := startProxy(t)
	sh := startShell(t, opts{env: map[string]string{"AGENTOS_URL": p.url}}, vm)
	sh.waitScreen("$ ")
	sh.typ("echo one-$((1+1))\r")
	sh.waitScreen("one-2")
	p.cut()
	sh.waitScreen("reconnecting")
	sh.typ("echo two-$((2+2))\r")
	sh.waitScreen("two-4")
	sh.typ("exit 5\r")
	if code := sh.exitCode(); code != 5 {
		t.Fatalf("exit status %d, want 5; the terminal shows %q", code, sh.screen.String())
	}
	if n := strings.Count(sh.screen.String(), "one-2"); n != 1 {
		t.Fatalf("the output before the drop shows %d times: %q", n, sh.screen.String())
	}
}

func TestPortForward(t *testing.T) {
	e2e(t)
	vm := newVM(t)
	c := adminClient(t)
	const server = `require('http').createServer((q, s) => s.end('guest saw ' + q.method + ' ' + q.url)).listen(8080)`
	if _, err := c.VM(vm).Spawn(ctxT(t), client.SpawnRequest{Argv: []string{"node", "-e", server}}); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, opts{}, "port-forward", vm, "8080", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
	if err != nil || m == "" {
		t.Fatalf("port-forward printed %q (%v), stderr %q", line, err, stderr.String())
	}
	var body string
	eventually(t, "the guest server answers through the forward", func() bool {
		resp, err := http.Get(m + "/hello?x=1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if body != "guest saw GET /hello?x=1" {
		t.Fatalf("through the forward: %q", body)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("port-forward after Ctrl-C: %v, stderr %q", err, stderr.String())
	}
}

// TestSession drives a real agent (pi) against the scripted mock of the
// Anthropic API on loopback: open, prompt, and the events of the turn.
func TestSession(t *testing.T) {
	e2e(t)
	mock := mockanthropic.Start(t)
	vm := newVM(t, "--agent", "pi", "--loopback-exempt-port", strconv.Itoa(mock.Port()))
	args := []string{"session", "open", vm, "--agent", "pi"}
	for k, v := range mock.Env() {
		args = append(args, "--env", k+"="+v)
	}
	sid := strings.TrimSuffix(ok(t, args...), "\n")
	if sid == "" || strings.ContainsAny(sid, " \n") {
		t.Fatalf("session open printed %q, want the session id alone", sid)
	}
	events := command(t, opts{}, "session", "events", vm, sid)
	stdout, err := events.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.Process.Kill(); events.Wait() })
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if out := ok(t, "session", "prompt", vm, sid, "Say", "hello"); out != mockanthropic.HelloText+"\n" {
		t.Fatalf("session prompt printed %q, want %q", out, mockanthropic.HelloText)
	}
	deadline := time.After(stepTimeout)
	for seen := false; !seen; {
		select {
		case line, open := <-lines:
			if !open {
				t.Fatal("session events ended before the turn's end")
			}
			var ev struct {
				Event string
				Data  struct{ Sequence uint64 }
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("session events printed %q: %v", line, err)
			}
			seen = ev.Event == "durable" && ev.Data.Sequence > 0
		case <-deadline:
			t.Fatal("no durable event of the turn in time")
		}
	}
	if err := events.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = events.Wait()
	if code := events.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("session events after Ctrl-C: exit %d", code)
	}
}
