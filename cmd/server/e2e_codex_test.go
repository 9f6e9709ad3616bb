package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/internal/mockmodel"
	"github.com/agentos-gateway/agentos-gateway/internal/mockopenai"
)

// Codex on agentOS 0.2.21. Its package, @agentos-software/codex-cli 0.3.4,
// ships the commands codex and codex-exec but no ACP adapter (the upstream
// adapter package, @agentos-software/codex, is not published): the engine
// lists no codex agent, so the gateway cannot open a Codex session, and
// says so. What the package does run is Codex itself: codex-exec
// --session-turn is the real Codex core running one turn, driven over
// stdin/stdout by JSON lines (the protocol the upstream adapter speaks), and
// calling the OpenAI Responses API. These tests run it as a process
// through the gateway against the offline mock, the way an adapter would:
// streamed text, a shell command that runs in the VM, approvals allowed and
// denied, and a cancel.

// codexTurnTimeout bounds one Codex turn (5-16 s seen on two shared cores,
// most of it Codex's start inside the VM).
const codexTurnTimeout = 2 * time.Minute

// codexLine is one JSON line Codex's turn engine writes.
type codexLine struct {
	Type       string `json:"type"`
	Delta      string `json:"delta"`
	ToolCallID string `json:"tool_call_id"`
	Status     string `json:"status"`
	Message    string `json:"message"`
}

// codexTurn is what one turn produced.
type codexTurn struct {
	lines []codexLine
	exit  client.Exit
}

func (ct codexTurn) text() string {
	var b strings.Builder
	for _, l := range ct.lines {
		if l.Type == "text_delta" {
			b.WriteString(l.Delta)
		}
	}
	return b.String()
}

func (ct codexTurn) types() []string {
	out := make([]string, len(ct.lines))
	for i, l := range ct.lines {
		out[i] = l.Type
	}
	return out
}

// toolStatuses returns the statuses reported for each tool call, in order.
func (ct codexTurn) toolStatuses() map[string][]string {
	out := map[string][]string{}
	for _, l := range ct.lines {
		if l.Type == "tool_call_update" {
			out[l.ToolCallID] = append(out[l.ToolCallID], l.Status)
		}
	}
	return out
}

// codexRun drives one Codex turn in vm: it spawns codex-exec
// --session-turn through the gateway, writes the start line, reads the
// JSON lines from the process's output stream (each event checked against
// the spec), and answers each permission request with decide's decision
// ("allow" or "deny") on the process's stdin. onLine, if set, sees every
// line as it comes (a permission request once answered), with the process.
func (e *e2e) codexRun(t *testing.T, c *client.Client, vm string, mock *mockopenai.Server, prompt string,
	decide func(codexLine) string, onLine func(codexLine, *client.ProcessHandle)) codexTurn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), codexTurnTimeout)
	defer cancel()
	env := mock.Env()
	// Codex needs a home for its config; HOME is not set for processes.
	env["HOME"] = "/home/agentos"
	env["CODEX_HOME"] = "/home/agentos/.codex"
	p, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Argv: []string{"codex-exec", "--session-turn"}, Cwd: "/workspace", Env: env})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Output(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start, _ := json.Marshal(map[string]any{"type": "start", "cwd": "/workspace", "model": "gpt-5", "prompt": prompt, "history": []any{}})
	if err := p.WriteStdin(ctx, append(start, '\n')); err != nil {
		t.Fatal(err)
	}
	req := e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vm, p.Pid()))
	var turn codexTurn
	var stdout, stderr bytes.Buffer
	for {
		ev, err := next(ctx, s)
		if err != nil {
			t.Fatalf("codex output ended without an exit (%v); lines %v, stderr %s", err, turn.types(), stderr.String())
		}
		apispec.ValidateEvent(t, e.doc, req, ev.Type, ev.Data)
		switch ev.Type {
		case "stderr":
			o, _ := ev.Output()
			stderr.Write(o.Data)
		case "stdout":
			o, _ := ev.Output()
			stdout.Write(o.Data)
			for {
				line, err := stdout.ReadBytes('\n')
				if err == io.EOF {
					stdout.Write(line) // an incomplete line waits for the rest
					break
				}
				var l codexLine
				if err := json.Unmarshal(line, &l); err != nil {
					t.Fatalf("codex wrote %q: %v", line, err)
				}
				turn.lines = append(turn.lines, l)
				if l.Type == "permission_request" {
					answer, _ := json.Marshal(map[string]string{"decision": decide(l)})
					if err := p.WriteStdin(ctx, append(answer, '\n')); err != nil {
						t.Fatal(err)
					}
				}
				if onLine != nil {
					onLine(l, p)
				}
			}
		}
		if ev.Final() {
			x, err := ev.Exit()
			if err != nil {
				t.Fatalf("final event %s: %v", summarize([]event{ev}), err)
			}
			turn.exit = x
			if x.ExitCode != 0 && x.Signal == "" {
				t.Logf("codex stderr: %s", stderr.String())
			}
			return turn
		}
	}
}

// lastRequest returns the mock's latest request.
func lastRequest(t *testing.T, mock *mockopenai.Server) mockopenai.Request {
	t.Helper()
	reqs := mock.Requests()
	if len(reqs) == 0 {
		t.Fatal("the mock saw no request")
	}
	return reqs[len(reqs)-1]
}

func codexCommand(cmd string, escalated bool) string {
	in := map[string]string{"cmd": cmd}
	if escalated {
		// Codex asks for approval of a command that asks to leave its
		// sandbox.
		in["sandbox_permissions"] = "require_escalated"
		in["justification"] = "May I write this file?"
	}
	b, _ := json.Marshal(in)
	return "RUN_TOOL:exec_command:" + string(b)
}

func TestE2ECodex(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e := newE2E(t)
	mock := mockopenai.Start(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{Agents: []string{"codex"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	readFile := func(t *testing.T, path string) (string, bool) {
		t.Helper()
		body, err := c.VM(vm.ID).ReadFile(ctxT(t), path)
		if client.IsCode(err, "not_found") {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), true
	}

	step(t, "NoACPSession", func(t *testing.T, ctx context.Context) {
		agents, err := c.VM(vm.ID).Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range agents {
			if a.ID == "codex" {
				t.Fatalf("the engine now lists codex (%+v): open a Codex session instead", a)
			}
		}
		_, err = c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "codex", Env: mock.Env()})
		ce := wantCode(t, err, "unprocessable", 422)
		if ce.Details["reason"] != "agent_has_no_adapter" || ce.Details["field"] != "agent" || !strings.Contains(ce.Detail, "no ACP adapter") {
			t.Fatalf("error %+v", ce)
		}
		if list, err := c.VM(vm.ID).ListSessions(ctx, client.ListOptions{}); err != nil || len(list.Items) != 0 {
			t.Fatalf("sessions after the failed open: %+v %v", list, err)
		}
		if _, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Argv: []string{"mkdir", "-p", "/home/agentos/.codex"}}); err != nil {
			t.Fatal(err)
		}
	})

	// Each of the next steps runs a turn, as long as codexRun waits for one.
	stepFor(t, "Hello", codexTurnTimeout, func(t *testing.T, ctx context.Context) {
		turn := e.codexRun(t, c, vm.ID, mock, "hello", nil, nil)
		want := []string{"start", "text_delta", "text_delta", "text_delta", "text_delta", "text_delta", "done"}
		if turn.exit.ExitCode != 0 || strings.Join(turn.types(), ",") != strings.Join(want, ",") || turn.text() != mockmodel.HelloText {
			t.Fatalf("turn %+v, exit %+v", turn.lines, turn.exit)
		}
		r := lastRequest(t, mock)
		if r.Path != "/v1/responses" || !r.Stream || r.Model != "gpt-5" || r.Prompt != "hello" || r.Reply != mockmodel.ReplyHello ||
			!strings.Contains(strings.Join(r.Tools, ","), "exec_command") {
			t.Fatalf("request %+v", r)
		}
	})

	stepFor(t, "ToolCall", codexTurnTimeout, func(t *testing.T, ctx context.Context) {
		turn := e.codexRun(t, c, vm.ID, mock, codexCommand("echo written by codex > /workspace/codex.txt", false), nil, nil)
		statuses := turn.toolStatuses()
		if turn.exit.ExitCode != 0 || len(statuses) != 1 || turn.text() != mockmodel.DoneText || turn.lines[len(turn.lines)-1].Type != "done" {
			t.Fatalf("turn %+v, exit %+v", turn.lines, turn.exit)
		}
		var id string
		for k, v := range statuses {
			id = k
			if v[len(v)-1] != "completed" {
				t.Fatalf("tool call %s went %v", k, v)
			}
		}
		if got, ok := readFile(t, "/workspace/codex.txt"); !ok || got != "written by codex\n" {
			t.Fatalf("codex.txt %q (exists %v)", got, ok)
		}
		r := lastRequest(t, mock)
		if r.LastItemType != "function_call_output" || r.CallID != id || !strings.Contains(r.LastText, "exited with code 0") {
			t.Fatalf("the model was told %+v", r)
		}
	})

	stepFor(t, "PermissionRequest", codexTurnTimeout, func(t *testing.T, ctx context.Context) {
		// A command that asks to leave Codex's sandbox needs approval: the
		// request comes out with the call's id and the command waits. The
		// 0.3.4 engine reads the reply but hands it to Codex under the
		// turn's id, which Codex rejects ("No pending approval found"), so
		// the turn waits for good (README, Known limits): the test denies,
		// as a cautious adapter would, then cancels the turn, and checks
		// that the command never ran and the model never saw its output.
		before := len(mock.Requests())
		var asked []string
		turn := e.codexRun(t, c, vm.ID, mock, codexCommand("echo escalated > /workspace/escalated.txt", true), func(l codexLine) string {
			asked = append(asked, l.ToolCallID)
			return "deny"
		}, func(l codexLine, p *client.ProcessHandle) {
			if l.Type != "permission_request" {
				return
			}
			if _, ok := readFile(t, "/workspace/escalated.txt"); ok {
				t.Error("the command ran before its approval")
			}
			if err := p.Signal(ctx, "SIGTERM"); err != nil {
				t.Error(err)
			}
		})
		if len(asked) != 1 || !strings.HasPrefix(asked[0], "call_") || turn.exit.Signal == "" && turn.exit.ExitCode == 0 {
			t.Fatalf("asked %v, turn %v, exit %+v", asked, turn.types(), turn.exit)
		}
		if _, ok := readFile(t, "/workspace/escalated.txt"); ok {
			t.Fatal("the command of a cancelled approval ran")
		}
		reqs := mock.Requests()[before:]
		if len(reqs) != 1 || reqs[0].Reply != mockmodel.ReplyToolUse {
			t.Fatalf("requests during the approval: %+v", reqs)
		}
	})

	stepFor(t, "Cancel", codexTurnTimeout, func(t *testing.T, ctx context.Context) {
		// The adapter's cancel is a SIGTERM to the turn: the SLOW stream is
		// cut after its first delta and the turn never says done.
		signalled := false
		turn := e.codexRun(t, c, vm.ID, mock, "SLOW", nil, func(l codexLine, p *client.ProcessHandle) {
			if l.Type == "text_delta" && !signalled {
				signalled = true
				if err := p.Signal(ctx, "SIGTERM"); err != nil {
					t.Error(err)
				}
			}
		})
		deltas := 0
		for _, l := range turn.lines {
			if l.Type == "done" {
				t.Fatalf("a cancelled turn finished: %v", turn.types())
			}
			if l.Type == "text_delta" {
				deltas++
			}
		}
		if !signalled || deltas >= mockmodel.SlowDeltas || (turn.exit.Signal == "" && turn.exit.ExitCode == 0) {
			t.Fatalf("%d deltas, exit %+v", deltas, turn.exit)
		}
		if r := lastRequest(t, mock); r.Reply != mockmodel.ReplySlow {
			t.Fatalf("request %+v", r)
		}
	})
}
