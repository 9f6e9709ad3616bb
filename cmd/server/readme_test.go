package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
// bash, curl and jq, against a real gateway, and checks what each step
// prints: the README cannot drift from the product. Every step must be
// recognised by exactly one check and every check must recognise a step, so
// an edited README fails here until this test is taught what it prints.
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
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
	e := newE2E(t)

	steps := runWalkthrough(t, blocks, e.gw.URL, testAdminKey)
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
	empty := func(t *testing.T, out string) {
		if strings.TrimSpace(out) != "" {
			t.Errorf("printed %q, want nothing", out)
		}
	}
	readmeHead := strings.Join(strings.SplitN(string(readme), "\n", 4)[:3], "\n") + "\n"
	checks := []walkCheck{
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
		{"follow output", regexp.MustCompile(`/processes/\$PID/output &$`), func(*testing.T, string) {}},
		{"stdin", regexp.MustCompile(`/stdin --data-binary \$'hello\\n'$`), contains(`{"written":6}`)},
		{"close stdin", regexp.MustCompile(`/stdin/close$`), func(*testing.T, string) {}},
		{"wait", regexp.MustCompile(`^wait\b`), func(*testing.T, string) {}},
		{"write file", regexp.MustCompile(`-XPUT .*/files\?path=/workspace/notes/a.txt&mkdirs=true" --data-binary @README.md$`), func(t *testing.T, out string) {
			contains(`"path":"/workspace/notes/a.txt"`, fmt.Sprintf(`"size":%d`, len(readme)))(t, out)
		}},
		{"read file", regexp.MustCompile(`/files\?path=/workspace/notes/a.txt" \| head -3$`), func(t *testing.T, out string) {
			if out != readmeHead {
				t.Errorf("read back %q, want %q", out, readmeHead)
			}
		}},
		{"delete", regexp.MustCompile(`^curl -s -XDELETE .*/v1/vms/\$VM$`), contains(`"state":"disposed"`)},
		{"list ended", regexp.MustCompile(`label=team=docs&state=disposed" \| jq -r '.items\[\].id'$`), func(t *testing.T, out string) {
			vm := strings.TrimSpace(out)
			if !vmID.MatchString(vm) {
				t.Fatalf("listed %q, want the one VM of the walk-through", out)
			}
			// The walk-through's last step removed its record.
			_, err := e.admin.VM(vm).Get(ctxT(t))
			wantCode(t, err, "not_found", 404)
		}},
		{"delete record", regexp.MustCompile(`-w '%\{http_code\}\\n' -XDELETE .*/v1/vms/\$VM$`), func(t *testing.T, out string) {
			if strings.TrimSpace(out) != "204" {
				t.Errorf("second delete printed %q, want 204", out)
			}
		}},
	}

	used := map[string]bool{}
	var processOutput strings.Builder
	following := false
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
		// The background stream prints into the steps that run while it
		// follows the process, up to wait, so their checks look for their
		// own output among its events.
		if match.name == "follow output" {
			following = true
		}
		if following {
			processOutput.WriteString(st.output)
		}
		if match.name == "wait" {
			following = false
		}
		t.Run(match.name, func(t *testing.T) { match.check(t, st.output) })
	}
	for _, c := range checks {
		if !used[c.name] {
			t.Errorf("the README no longer has the step %q", c.name)
		}
	}
	t.Run("process output", func(t *testing.T) {
		contains("event: stdout", `"data":"got hello\n"`, "event: exit", `"exitCode":0`)(t, processOutput.String())
	})
}

// walkthroughBlocks returns the sh blocks of the README's "Walk-through with
// curl" section up to its first subsection, less the set-up block that
// exports the key and the address (the test provides both).
func walkthroughBlocks(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Walk-through with curl\n")
	if !ok {
		t.Fatal("the README has no walk-through section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "K="+key, "GW="+gw)
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
