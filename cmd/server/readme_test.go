package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// walkStep is one command of the README's walk-through and what it printed.
type walkStep struct {
	command string
	output  string
}

// walkCheck recognises a step by its command and checks what it printed.
type walkCheck struct {
	name    string
	command *regexp.Regexp
	check   func(t *testing.T, out string)
}

// TestREADMEWalkthrough runs the README's curl walk-through verbatim, with
// bash, curl and jq, block after block as a reader pastes them, against the
// gateway binary started as `make run` starts it: no flags, the relative
// default data directory, the admin key it prints on first start. It checks
// what each step prints: the README cannot drift from the product. Every
// step must be recognised by exactly one check and every check must
// recognise a step, so an edited README fails here until this test is
// taught what it prints.
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make test installs it): %v", tool, err)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, string(readme))
	gw := startAsMakeRun(t)

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's output:\n%s", gw.logs.String())
		}
	})
	steps := runWalkthrough(t, blocks, gw.url, gw.adminKey)
	admin := mustClient(t, gw.url, gw.adminKey)
	vmID := regexp.MustCompile(`^vm_[0-9a-f]+$`)
	contains := func(want ...string) func(*testing.T, string) {
		return func(t *testing.T, out string) {
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		}
	}
	equals := func(want string) func(*testing.T, string) {
		return func(t *testing.T, out string) {
			if strings.TrimSpace(out) != want {
				t.Errorf("printed %q, want %q", out, want)
			}
		}
	}
	empty := equals("")
	quiet := func(*testing.T, string) {}
	readmeHead := strings.Join(strings.SplitN(string(readme), "\n", 4)[:3], "\n") + "\n"
	checks := []walkCheck{
		{"create tenant", regexp.MustCompile(`^TENANT=\$\(curl .*\$GW/v1/tenants -d `), empty},
		{"create key", regexp.MustCompile(`^TK=\$\(curl .*/v1/tenants/\$TENANT/keys \| jq -r .key\)$`), empty},
		{"me", regexp.MustCompile(`\$GW/v1/me \| jq`), equals(`{"tenant":"docs-team","admin":false}`)},
		{"create", regexp.MustCompile(`^VM=\$\(curl .* \$GW/v1/vms -d `), empty},
		{"exec", regexp.MustCompile(`/exec -d '\{"command":"echo hello; uname -a"\}'$`), func(t *testing.T, out string) {
			var res struct {
				ExitCode int    `json:"exitCode"`
				Stdout   string `json:"stdout"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello\n") {
				t.Errorf("exec printed %q (%v)", out, err)
			}
		}},
		{"streamed exec", regexp.MustCompile(`(?s)Accept: text/event-stream.*for i in 1 2 3`), func(t *testing.T, out string) {
			contains("event: stdout", `"data":"1\n"`, `"data":"2\n"`, `"data":"3\n"`, "event: exit", `"exitCode":0`)(t, out)
		}},
		{"spawn", regexp.MustCompile(`^PID=\$\(curl .*/processes`), empty},
		{"follow output", regexp.MustCompile(`/processes/\$PID/output &$`), quiet},
		{"stdin", regexp.MustCompile(`/stdin --data-binary \$'hello\\n'$`), contains(`{"written":6}`)},
		{"close stdin", regexp.MustCompile(`/stdin/close$`), quiet},
		{"wait for the process", regexp.MustCompile(`^wait +# the output stream ends with the process's exit event$`), quiet},
		{"write file", regexp.MustCompile(`-XPUT .*/files\?path=/workspace/notes/a.txt&mkdirs=true" --data-binary @README.md$`), func(t *testing.T, out string) {
			contains(`"path":"/workspace/notes/a.txt"`, fmt.Sprintf(`"size":%d`, len(readme)))(t, out)
		}},
		{"read file", regexp.MustCompile(`/files\?path=/workspace/notes/a.txt" \| head -3$`), func(t *testing.T, out string) {
			if out != readmeHead {
				t.Errorf("read back %q, want %q", out, readmeHead)
			}
		}},
		{"list directory", regexp.MustCompile(`/dirs\?path=/workspace/notes" \| jq`), equals(fmt.Sprintf(`{"name":"a.txt","size":%d,"isDirectory":false}`, len(readme)))},
		{"open shell", regexp.MustCompile(`^SH=\$\(curl .*/shells -d `), empty},
		{"follow shell", regexp.MustCompile(`/shells/\$SH/output \| grep .*&$`), quiet},
		{"type cd and export", regexp.MustCompile(`/input --data-binary \$'cd /tmp; export GREETING=hi\\r'$`), quiet},
		{"type echo", regexp.MustCompile(`/input --data-binary \$'echo "\$GREETING from \$PWD" > /workspace/shell.txt\\r'$`), quiet},
		{"resize", regexp.MustCompile(`/shells/\$SH/resize -d `), quiet},
		{"type exit", regexp.MustCompile(`/input --data-binary \$'exit 3\\r'$`), quiet},
		{"wait for the shell", regexp.MustCompile(`^wait +# prints the stream's last event`), quiet},
		{"read the shell's file", regexp.MustCompile(`/files\?path=/workspace/shell.txt"$`), equals("hi from /tmp")},
		{"shell state", regexp.MustCompile(`/shells/\$SH \| jq`), func(t *testing.T, out string) {
			var sh struct {
				State string `json:"state"`
				Exit  *struct {
					ExitCode int `json:"exitCode"`
				} `json:"exit"`
			}
			if err := json.Unmarshal([]byte(out), &sh); err != nil || sh.State != "exited" || sh.Exit == nil || sh.Exit.ExitCode != 3 {
				t.Errorf("shell printed %q (%v)", out, err)
			}
		}},
		{"create agent VM", regexp.MustCompile(`^AVM=\$\(curl .*\$GW/v1/vms -d '\{"agents":\["claude"\]\}'`), empty},
		{"agents", regexp.MustCompile(`/v1/vms/\$AVM/agents \| jq`), contains(`{"id":"claude","installed":true}`)},
		{"open session", regexp.MustCompile(`(?s)/v1/vms/\$AVM/sessions \\.*jq -n`), contains(`"id":"demo"`, `"agent":"claude"`)},
		// The test runs offline, with no ANTHROPIC_ variable: the prompt is
		// refused saying what is missing, instead of a turn that asks to log
		// in.
		{"prompt", regexp.MustCompile(`(?s)/sessions/demo/prompt \\`), func(t *testing.T, out string) {
			var p struct {
				Status  int            `json:"status"`
				Details map[string]any `json:"details"`
			}
			if err := json.Unmarshal([]byte(out), &p); err != nil || p.Status != 422 || p.Details["reason"] != "agent_credentials_missing" {
				t.Errorf("prompt printed %q (%v), want the problem agent_credentials_missing", out, err)
			}
		}},
		{"history", regexp.MustCompile(`/sessions/demo/history\?after=0&limit=50" \| jq`), func(t *testing.T, out string) {
			var types []string
			if err := json.Unmarshal([]byte(out), &types); err != nil {
				t.Errorf("history printed %q (%v)", out, err)
			}
		}},
		{"delete agent VM", regexp.MustCompile(`-XDELETE .*/v1/vms/\$AVM \| jq -r .state$`), equals("disposed")},
		{"delete", regexp.MustCompile(`-XDELETE .*/v1/vms/\$VM \| jq -r .state$`), equals("disposed")},
		{"list ended", regexp.MustCompile(`label=team=docs&state=disposed" \| jq -r '.items\[\].id'$`), func(t *testing.T, out string) {
			vm := strings.TrimSpace(out)
			if !vmID.MatchString(vm) {
				t.Fatalf("listed %q, want the one VM of the walk-through", out)
			}
			// The walk-through's last step removed its record.
			_, err := admin.VM(vm).Get(ctxT(t))
			wantCode(t, err, "not_found", 404)
		}},
		{"delete record", regexp.MustCompile(`-w '%\{http_code\}\\n' -XDELETE .*/v1/vms/\$VM$`), equals("204")},
	}

	used := map[string]bool{}
	// A stream followed in the background prints into the steps that run
	// while it follows, up to the next wait, so its check looks at all of
	// their output.
	background := map[string]*strings.Builder{}
	var following *strings.Builder
	for _, st := range steps {
		var match *walkCheck
		for i := range checks {
			if checks[i].command.MatchString(st.command) {
				if match != nil {
					t.Fatalf("step %q matches checks %s and %s", st.command, match.name, checks[i].name)
				}
				match = &checks[i]
			}
		}
		if match == nil {
			t.Errorf("no check knows the README step %q (it printed %q)", st.command, st.output)
			continue
		}
		used[match.name] = true
		if strings.HasPrefix(match.name, "follow ") {
			following = &strings.Builder{}
			background[match.name] = following
		}
		if following != nil {
			following.WriteString(st.output)
		}
		if strings.HasPrefix(match.name, "wait ") {
			following = nil
		}
		if following == nil || strings.HasPrefix(match.name, "follow ") {
			t.Run(match.name, func(t *testing.T) { match.check(t, st.output) })
		}
	}
	for _, c := range checks {
		if !used[c.name] {
			t.Errorf("the README no longer has the step %q", c.name)
		}
	}
	t.Run("process output", func(t *testing.T) {
		out := background["follow output"].String()
		contains("event: stdout", `"data":"got hello\n"`, "event: exit", `"exitCode":0`)(t, out)
		contains(`{"written":6}`)(t, out)
	})
	t.Run("shell output", func(t *testing.T) {
		out := background["follow shell"].String()
		contains("event: end", `"exitCode":3`)(t, out)
	})
	// make run's state is under ./data, and the deleted agent VM left no
	// session database behind.
	t.Run("data directory", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(gw.dir, "data", "gateway.db")); err != nil {
			t.Errorf("the store is not under the relative data directory: %v", err)
		}
		if left, _ := filepath.Glob(filepath.Join(gw.dir, "data", "sessions", "agentos-vm-*")); len(left) != 0 {
			t.Errorf("session databases left after the VMs were deleted: %v", left)
		}
	})
}

// madeRun is a gateway started as `make run` starts it.
type madeRun struct {
	url, adminKey string
	// dir is its working directory, where its data directory is.
	dir  string
	logs *syncBuffer
}

// startAsMakeRun starts the gateway binary with no flags, as `make run`
// does, in a working directory of its own (so its relative ./data is the
// test's), and reads its address and the admin key it prints on first
// start from its output, as a reader does. Only the listen port differs
// (a free one, the tests run in parallel), and the engine is named by the
// environment, since the working directory is not the checkout.
func startAsMakeRun(t *testing.T) madeRun {
	t.Helper()
	bin := buildGateway(t)
	engine, err := agentos.LocateEngine()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTOS_") {
			env = append(env, kv)
		}
	}
	// A private TMPDIR: the sidecars' temporary directories must not
	// outlive the test.
	cmd.Env = append(env, "AGENTOS_GATEWAY_ADDR=127.0.0.1:0", "TMPDIR="+t.TempDir(),
		agentos.EngineEnvBin+"="+engine.SidecarBin, agentos.EngineEnvPackages+"="+engine.PackagesDir)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("the gateway did not stop within 60 s of SIGTERM\n%s", logs.String())
		}
	})
	keyRe := regexp.MustCompile(`Authorization: Bearer (\S+)`)
	addrRe := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"message":"agentos-gateway listening"`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := logs.String()
		key, addr := keyRe.FindStringSubmatch(out), addrRe.FindStringSubmatch(out)
		if key != nil && addr != nil {
			g := madeRun{url: "http://" + addr[1], adminKey: key[1], dir: dir, logs: logs}
			waitReady(t, g.url)
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admin key and address printed within 60 s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// walkthroughBlocks returns the sh blocks of the README's "Walk-through with
// curl" section with its subsections, less the set-up block that exports
// the key and the address (the test provides both).
func walkthroughBlocks(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Walk-through with curl\n")
	if !ok {
		t.Fatal("the README has no walk-through section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		if strings.Contains(m[1], "export K=") {
			continue
		}
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatal("the walk-through has no sh block")
	}
	return blocks
}

// commands splits a block into its commands: comments and blank lines are
// dropped, and lines ending in a backslash continue on the next.
func commands(block string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(block, "\n") {
		if cur.Len() == 0 && (strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(line + "\n")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// runWalkthrough runs the blocks' commands, unchanged and in order, in one
// bash process with K and GW set, and returns what each printed. A marker
// line is printed between commands to tell their output apart; the whole
// process group is killed at the end, so no background curl outlives it.
func runWalkthrough(t *testing.T, blocks []string, gw, key string) []walkStep {
	t.Helper()
	var script strings.Builder
	var steps []walkStep
	for _, b := range blocks {
		for _, c := range commands(b) {
			fmt.Fprintf(&script, "printf '\\n@@step %d@@\\n'\n%s\n", len(steps), c)
			steps = append(steps, walkStep{command: c})
		}
	}
	script.WriteString("printf '\\n@@end@@\\n'\n")
	// The working directory is the repository's root, where the README's
	// commands are meant to be typed (`--data-binary @README.md`).
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc")
	cmd.Dir = "../.."
	// The agent step passes the reader's ANTHROPIC_ variables on; the test
	// runs it without any, offline, whatever the machine has.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTHROPIC_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "K="+key, "GW="+gw)
	cmd.Stdin = strings.NewReader(script.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("the walk-through failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	text := out.String()
	if !strings.Contains(text, "\n@@end@@\n") {
		t.Fatalf("the walk-through did not run to its end:\n%s\nstderr:\n%s", text, stderr.String())
	}
	text, _, _ = strings.Cut(text, "\n@@end@@\n")
	parts := regexp.MustCompile(`\n@@step (\d+)@@\n`).Split(text, -1)
	if len(parts) != len(steps)+1 {
		t.Fatalf("%d outputs for %d steps:\n%s", len(parts)-1, len(steps), text)
	}
	for i := range steps {
		steps[i].output = parts[i+1]
	}
	return steps
}
