package main

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// These tests drive real agents (pi, claude-code) in real VMs through the
// HTTP API, offline, against the scripted mock of the Anthropic Messages API
// on loopback (/work/shared/recipes/offline-agent-sessions.md). Opening an
// agent costs seconds and disposing a VM that ran one costs 5 s, so each
// test keeps one VM and one session across dependent steps; a failing step
// stops the test.

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestE2EAgentSessionPi(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e := newE2E(t)
	mock := mockanthropic.Start(t)
	c := e.admin
	vm := e.agentVM(c, mock, "pi")
	const sid = "pi-e2e"
	var feed *sessionFeed

	step(t, "Agents", func(t *testing.T, ctx context.Context) {
		agents, err := c.VM(vm.ID).Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		installed := map[string]bool{}
		for _, a := range agents {
			installed[a.ID] = a.Installed
		}
		if !installed["pi"] {
			t.Fatalf("pi not installed: %+v", agents)
		}
	})

	step(t, "OpenErrors", func(t *testing.T, ctx context.Context) {
		_, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "no-such-agent"})
		if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["reason"] != "unknown_agent" {
			t.Errorf("details %v", ce.Details)
		}
		agents, _ := c.VM(vm.ID).Agents(ctx)
		for _, a := range agents {
			if !a.Installed {
				_, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: a.ID})
				if ce := wantCode(t, err, "unprocessable", 422); ce.Details["reason"] != "agent_not_installed" {
					t.Errorf("details %v", ce.Details)
				}
				break
			}
		}
		_, err = c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", SessionID: "../x"})
		wantCode(t, err, "invalid_argument", 400)
		_, err = c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", PermissionPolicy: "sometimes"})
		wantCode(t, err, "invalid_argument", 400)
		_, err = c.VM(vm.ID).Session("no-such-session").Get(ctx)
		wantCode(t, err, "not_found", 404)
		_, err = c.VM(vm.ID).Session("no-such-session").Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hi")})
		wantCode(t, err, "not_found", 404)
		_, err = c.VM(vm.ID).Session("no-such-session").Events(ctx, client.StreamOptions{})
		wantCode(t, err, "not_found", 404)
		_, err = c.VM(vm.ID).Session("no-such-session").History(ctx, client.HistoryQuery{})
		wantCode(t, err, "not_found", 404)
		list, err := c.VM(vm.ID).ListSessions(ctx, client.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("sessions after failed opens: %+v %v", list, err)
		}
	})

	step(t, "Open", func(t *testing.T, ctx context.Context) {
		s, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi", Cwd: "/workspace", Env: mock.Env()})
		if err != nil {
			t.Fatal(err)
		}
		if s.ID != sid || s.State != client.SessionIdle || s.Agent != "pi" || s.Cwd != "/workspace" || s.LatestSequence != 0 || s.PermissionPolicy != "allow_all" {
			t.Fatalf("opened %+v", s)
		}
		_, err = c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi"})
		wantCode(t, err, "conflict", 409)
	})
	// The feed follows the session for the whole test, from before its
	// first prompt.
	feed = e.follow(t, c, vm.ID, sid, "")

	step(t, "MalformedPrompts", func(t *testing.T, ctx context.Context) {
		for _, body := range []string{
			`{"content": "hello"}`,
			`{"content": []}`,
			`{"content": [{"text": "no type"}]}`,
			`{"content": [{"type": "video", "data": "x"}]}`,
			`{"content": [{"type": "text"}]}`,
			`{"content": [{"type": "text", "text": 7}]}`,
			`{}`,
		} {
			err := e.raw("POST", "/v1/vms/"+vm.ID+"/sessions/"+sid+"/prompt", testAdminKey, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
			ce := wantCode(t, err, "invalid_argument", 400)
			if f, _ := ce.Details["field"].(string); !strings.HasPrefix(f, "content") {
				t.Errorf("%s: field %v", body, ce.Details["field"])
			}
		}
		// A prompt over the limit never reaches the shared sidecar.
		huge := `{"content":[{"type":"image","mimeType":"image/png","data":"` + strings.Repeat("A", 9<<20) + `"}]}`
		err := e.raw("POST", "/v1/vms/"+vm.ID+"/sessions/"+sid+"/prompt", testAdminKey, strings.NewReader(huge), map[string]string{"Content-Type": "application/json"})
		wantCode(t, err, "payload_too_large", 413)
	})

	stepFor(t, "Hello", turnTimeout, func(t *testing.T, ctx context.Context) {
		res, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "end_turn" || messageText(t, res.Message) != mockanthropic.HelloText {
			t.Fatalf("result %+v %s", res, res.Message)
		}
		feed.durableUntil(t, 30*time.Second, 2)
		d := feed.durable(t)
		wantSequence(t, sequences(d), 1, 2)
		if d[0].Type != "user_message_chunk" || parseUpdate(t, d[0].Update).text() != "hello" {
			t.Errorf("first event %+v", d[0])
		}
		if d[1].Type != "agent_message_chunk" || parseUpdate(t, d[1].Update).text() != mockanthropic.HelloText {
			t.Errorf("second event %+v %s", d[1], d[1].Update)
		}
		var deltas []string
		for _, ev := range feed.events() {
			if ev.Type != "ephemeral" {
				continue
			}
			eph, err := ev.EphemeralEvent()
			if err != nil {
				t.Fatal(err)
			}
			if eph.AfterSequence != 1 || eph.Type != "agent_message_chunk" || ev.ID != "1" {
				t.Errorf("ephemeral %+v id %q", eph, ev.ID)
			}
			deltas = append(deltas, parseUpdate(t, eph.Update).text())
		}
		if strings.Join(deltas, "") != mockanthropic.HelloText || len(deltas) != 5 {
			t.Errorf("deltas %q", deltas)
		}
		s, err := c.VM(vm.ID).Session(sid).Get(ctx)
		if err != nil || s.LatestSequence != 2 || s.State != client.SessionIdle {
			t.Fatalf("session %+v %v", s, err)
		}
	})

	stepFor(t, "ToolCall", turnTimeout, func(t *testing.T, ctx context.Context) {
		before := len(feed.durable(t))
		res, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: toolPrompt("bash", "echo tool-ran > /workspace/tool.txt")})
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "end_turn" {
			t.Fatalf("result %+v", res)
		}
		s, _ := c.VM(vm.ID).Session(sid).Get(ctx)
		feed.durableUntil(t, 30*time.Second, s.LatestSequence)
		var completed bool
		for _, d := range feed.durable(t)[before:] {
			if d.Type == "tool_call_update" && parseUpdate(t, d.Update).Status == "completed" {
				completed = true
			}
		}
		if !completed {
			t.Errorf("no completed tool call in %+v", feed.durable(t)[before:])
		}
		body, err := c.VM(vm.ID).ReadFile(ctx, "/workspace/tool.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(body)
		body.Close()
		if string(b) != "tool-ran\n" {
			t.Fatalf("tool.txt = %q", b)
		}
	})

	stepFor(t, "IdempotentPrompt", turnTimeout, func(t *testing.T, ctx context.Context) {
		req := client.PromptRequest{Content: client.TextPrompt("hello again"), IdempotencyKey: "turn-1"}
		first, err := c.VM(vm.ID).Session(sid).Prompt(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		calls, latest := mockRequests(mock), mustSession(t, c, vm.ID, sid).LatestSequence
		again, err := c.VM(vm.ID).Session(sid).Prompt(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Replayed || first.Replayed || again.StopReason != first.StopReason || string(again.Message) != string(first.Message) {
			t.Fatalf("first %+v, retry %+v", first, again)
		}
		async, err := c.VM(vm.ID).Session(sid).PromptAsync(ctx, req)
		if err != nil || async == nil || !async.Replayed {
			t.Fatalf("async retry of a finished turn: %+v %v", async, err)
		}
		if n := mockRequests(mock); n != calls {
			t.Fatalf("the retry called the model: %d requests, was %d", n, calls)
		}
		if s := mustSession(t, c, vm.ID, sid); s.LatestSequence != latest {
			t.Fatalf("the retry added events: %d, was %d", s.LatestSequence, latest)
		}
		_, err = c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("something else"), IdempotencyKey: "turn-1"})
		wantCode(t, err, "unprocessable", 422)
	})

	stepFor(t, "CancelSlow", turnTimeout, func(t *testing.T, ctx context.Context) {
		if res, err := c.VM(vm.ID).Session(sid).PromptAsync(ctx, client.PromptRequest{Content: client.TextPrompt("SLOW please")}); err != nil || res != nil {
			t.Fatalf("async prompt: %+v %v", res, err)
		}
		feed.until(t, turnTimeout, "a SLOW delta", func(ev event) bool {
			eph, err := ev.EphemeralEvent()
			return err == nil && strings.Contains(string(eph.Update), "slow ")
		})
		if s := mustSession(t, c, vm.ID, sid); s.State != client.SessionRunning {
			t.Errorf("state during a turn: %s", s.State)
		}
		_, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		if ce := wantCode(t, err, "conflict", 409); ce.Details["reason"] != "turn_running" {
			t.Errorf("details %v", ce.Details)
		}
		status, err := c.VM(vm.ID).Session(sid).Cancel(ctx)
		if err != nil || status != "cancelled" {
			t.Fatalf("cancel: %q %v", status, err)
		}
		eventually(t, 30*time.Second, "the cancelled turn to end", func() bool {
			return mustSession(t, c, vm.ID, sid).State == client.SessionIdle
		})
		status, err = c.VM(vm.ID).Session(sid).Cancel(ctx)
		if err != nil || status != "no_active_prompt" {
			t.Fatalf("second cancel: %q %v", status, err)
		}
	})

	stepFor(t, "ResumeMidTurn", turnTimeout, func(t *testing.T, ctx context.Context) {
		// A client drops its stream in the middle of a turn and comes back
		// with Last-Event-ID: what it saw and what it gets after make the
		// full sequence, once each.
		start := mustSession(t, c, vm.ID, sid).LatestSequence
		first := e.follow(t, c, vm.ID, sid, itoa(start))
		if res, err := c.VM(vm.ID).Session(sid).PromptAsync(ctx, client.PromptRequest{Content: toolPrompt("bash", "echo resumed > /workspace/resume.txt")}); err != nil || res != nil {
			t.Fatalf("async prompt: %v", err)
		}
		first.until(t, turnTimeout, "the turn's first event", func(ev event) bool { return ev.Type == "durable" })
		first.close()
		seen := first.durable(t)
		last := seen[len(seen)-1].Sequence
		eventually(t, turnTimeout, "the turn to end", func() bool {
			return mustSession(t, c, vm.ID, sid).State == client.SessionIdle
		})
		end := mustSession(t, c, vm.ID, sid).LatestSequence
		second := e.follow(t, c, vm.ID, sid, itoa(last))
		if last < end { // the first stream may have seen the whole turn
			second.durableUntil(t, 30*time.Second, end)
		}
		second.close()
		union := append(sequences(seen), sequences(second.durable(t))...)
		wantSequence(t, union, start+1, end)
		if end-start < 3 {
			t.Fatalf("the tool turn recorded only %d events", end-start)
		}
		// The long-lived feed saw the same, exactly once.
		feed.durableUntil(t, 30*time.Second, end)
		wantSequence(t, sequences(feed.durable(t)), 1, end)
	})

	step(t, "History", func(t *testing.T, ctx context.Context) {
		end := mustSession(t, c, vm.ID, sid).LatestSequence
		all, err := c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		wantSequence(t, sequences(all.Events), 1, end)
		if all.HasMoreBefore || all.HasMoreAfter {
			t.Errorf("whole history has more: %+v", all)
		}
		page, err := c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{After: 1, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		wantSequence(t, sequences(page.Events), 2, 3)
		if !page.HasMoreBefore || !page.HasMoreAfter {
			t.Errorf("middle page flags: %+v", page)
		}
		page, err = c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Before: end, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		wantSequence(t, sequences(page.Events), end-2, end-1)
		if !page.HasMoreBefore || !page.HasMoreAfter {
			t.Errorf("page before the end: %+v", page)
		}
		// History and stream carry the same documents.
		streamed := feed.durable(t)
		for i := range all.Events {
			a, _ := json.Marshal(all.Events[i])
			b, _ := json.Marshal(streamed[i])
			if string(a) != string(b) {
				t.Fatalf("event %d: history %s, stream %s", i+1, a, b)
			}
		}
		err = e.raw("GET", "/v1/vms/"+vm.ID+"/sessions/"+sid+"/history?after=5&before=3", testAdminKey, nil, nil)
		wantCode(t, err, "invalid_argument", 400)
		err = e.raw("GET", "/v1/vms/"+vm.ID+"/sessions/"+sid+"/events", testAdminKey, nil, map[string]string{"Last-Event-ID": itoa(end + 10)})
		wantCode(t, err, "invalid_argument", 400)
	})

	step(t, "ConfigAndInfo", func(t *testing.T, ctx context.Context) {
		cfg, err := c.VM(vm.ID).Session(sid).Config(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Options == nil {
			t.Errorf("config %+v", cfg)
		}
		_, err = c.VM(vm.ID).Session(sid).SetConfig(ctx, "model", "claude-opus-4-6")
		if ce := wantCode(t, err, "conflict", 409); ce.Details["agentCode"] == nil {
			t.Errorf("set config problem has no agentCode: %+v", ce)
		}
		caps, err := c.VM(vm.ID).Session(sid).Capabilities(ctx)
		if err != nil || !json.Valid(caps) {
			t.Fatalf("capabilities %s %v", caps, err)
		}
		if _, err := c.VM(vm.ID).Session(sid).AgentInfo(ctx); err != nil {
			t.Fatal(err)
		}
	})

	stepFor(t, "UnloadAndPromptAgain", turnTimeout, func(t *testing.T, ctx context.Context) {
		s, err := c.VM(vm.ID).Session(sid).Unload(ctx)
		if err != nil || s.State != client.SessionUnloaded {
			t.Fatalf("unload: %+v %v", s, err)
		}
		res, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello after unload")})
		if err != nil || messageText(t, res.Message) != mockanthropic.HelloText {
			t.Fatalf("prompt after unload: %+v %v", res, err)
		}
		if s := mustSession(t, c, vm.ID, sid); s.State != client.SessionIdle {
			t.Errorf("state after the prompt: %s", s.State)
		}
	})

	if n, want := e.metric("agentos_gateway_session_events_recorded_total"), float64(mustSession(t, c, vm.ID, sid).LatestSequence); n != want {
		t.Errorf("events recorded metric %v, want %v", n, want)
	}
	if n := e.metric("agentos_gateway_agent_sessions"); n != 1 {
		t.Errorf("sessions metric %v, want 1", n)
	}

	step(t, "SidecarCrash", func(t *testing.T, ctx context.Context) {
		// The sidecar dies: the session is lost, its record is whole, its
		// stream ends with the session's end, and a prompt is refused.
		end := mustSession(t, c, vm.ID, sid).LatestSequence
		feed.durableUntil(t, 30*time.Second, end)
		killSidecar(t, e.sidecarPid(vm))
		if err := feed.ended(t, 30*time.Second); !streamEnded(err) {
			t.Fatalf("stream ended with %v", err)
		}
		evs := feed.events()
		if st := endState(t, evs); st != client.SessionLost {
			t.Fatalf("end state %q", st)
		}
		wantSequence(t, sequences(feed.durable(t)), 1, end)
		s := mustSession(t, c, vm.ID, sid)
		if s.State != client.SessionLost || s.LatestSequence != end {
			t.Fatalf("session after the crash: %+v", s)
		}
		_, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		wantCode(t, err, "conflict", 409)
		perms, err := c.VM(vm.ID).Session(sid).Permissions(ctx)
		if err != nil || len(perms) != 0 {
			t.Fatalf("permissions of a lost session: %+v %v", perms, err)
		}
		// Resume after the crash: from the store, then the end.
		again := e.follow(t, c, vm.ID, sid, "2")
		if err := again.ended(t, 30*time.Second); !streamEnded(err) {
			t.Fatalf("resumed stream ended with %v", err)
		}
		wantSequence(t, sequences(again.durable(t)), 3, end)
		if st := endState(t, again.events()); st != client.SessionLost {
			t.Fatalf("resumed end state %q", st)
		}
		hist, err := c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		wantSequence(t, sequences(hist.Events), 1, end)
		list, err := c.VM(vm.ID).ListSessions(ctx, client.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].State != client.SessionLost {
			t.Fatalf("sessions: %+v %v", list, err)
		}
		// Deleting the record of a lost session works and is final.
		if err := c.VM(vm.ID).Session(sid).Delete(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = c.VM(vm.ID).Session(sid).Get(ctx)
		wantCode(t, err, "not_found", 404)
	})
}

func mustSession(t testing.TB, c *client.Client, vm, sid string) *client.Session {
	t.Helper()
	s, err := c.VM(vm).Session(sid).Get(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// killSidecar SIGKILLs a sidecar's process group and waits for it to go.
func killSidecar(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the killed sidecar to be reaped", func() bool { return !alive(pid) })
}
