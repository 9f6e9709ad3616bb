package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2EAgentPermissionsClaude drives claude-code's permission requests
// through the API: surfaced as events and resources, answered allow and
// reject, answered twice, dropped by a cancel, and settled by the default
// decision after its timeout. claude-code runs read-only commands without
// asking, so every command writes a file.
func TestE2EAgentPermissionsClaude(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e := newE2E(t, "--webhook-allow", "127.0.0.1")
	mock := mockanthropic.Start(t)
	c := e.admin
	vm := e.agentVM(c, mock, "claude")
	const sid = "claude-e2e"
	// A backend hears of the permission requests and of the turns' ends.
	var rc *receiver
	within(t, "subscribe", e2eTimeout, func(ctx context.Context) {
		secret, err := c.WebhookSecret(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rc = newReceiver(t, secret.Secret)
		if _, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: rc.URL, VM: vm.ID,
			Events: []string{client.EventSessionPermissionRequested, client.EventSessionTurnEnd}}); err != nil {
			t.Fatal(err)
		}
	})

	within(t, "open the session", turnTimeout, func(ctx context.Context) {
		s, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "claude", Cwd: "/workspace", PermissionPolicy: "ask", Env: mock.Env()})
		if err != nil {
			t.Fatal(err)
		}
		if s.PermissionPolicy != "ask" || s.PermissionDefault != nil {
			t.Fatalf("opened %+v", s)
		}
	})
	feed := e.follow(t, c, vm.ID, sid, "")

	// ask prompts a Bash command asynchronously and returns the permission
	// request it raised, as an event and as a resource.
	ask := func(t *testing.T, command string) client.Permission {
		t.Helper()
		if res, err := c.VM(vm.ID).Session(sid).PromptAsync(ctxT(t), client.PromptRequest{Content: toolPrompt("Bash", command)}); err != nil || res != nil {
			t.Fatalf("async prompt: %+v %v", res, err)
		}
		ev := feed.until(t, turnTimeout, "a permission request", func(ev event) bool {
			se, err := ev.SessionEvent()
			return err == nil && se.Type == "permission_request"
		})
		se, _ := ev.SessionEvent()
		var tool struct{ RawInput struct{ Command string } }
		if err := json.Unmarshal(se.ToolCall, &tool); err != nil || tool.RawInput.Command != command {
			t.Fatalf("permission request for %s (%v), want %q", se.ToolCall, err, command)
		}
		perms, err := c.VM(vm.ID).Session(sid).Permissions(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(perms) != 1 || perms[0].RequestID != se.RequestID || perms[0].Status != "pending" ||
			len(perms[0].Options) == 0 || perms[0].Decision != nil {
			t.Fatalf("pending permissions %+v, event %+v", perms, se)
		}
		got := mustSession(t, c, vm.ID, sid)
		if got.State != client.SessionWaiting || len(got.PendingPermissions) != 1 || got.PendingPermissions[0].RequestID != se.RequestID {
			t.Fatalf("session while waiting: %+v", got)
		}
		return perms[0]
	}
	// response waits for the durable response to a request.
	response := func(t *testing.T, requestID string) client.SessionEvent {
		t.Helper()
		for _, d := range feed.durable(t) {
			if d.Type == "permission_response" && d.RequestID == requestID {
				return d
			}
		}
		ev := feed.until(t, turnTimeout, "the permission response", func(ev event) bool {
			se, err := ev.SessionEvent()
			return err == nil && se.Type == "permission_response" && se.RequestID == requestID
		})
		se, _ := ev.SessionEvent()
		return se
	}
	idle := func(t *testing.T) {
		t.Helper()
		eventually(t, turnTimeout, "the turn to end", func() bool {
			return mustSession(t, c, vm.ID, sid).State == client.SessionIdle
		})
	}
	exists := func(t *testing.T, path string) bool {
		t.Helper()
		body, err := c.VM(vm.ID).ReadFile(ctxT(t), path)
		if client.IsCode(err, "not_found") {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, body)
		body.Close()
		return true
	}
	lastToolResult := func(t *testing.T) mockanthropic.Request {
		t.Helper()
		r, ok := mock.LastToolResult()
		if !ok {
			t.Fatal("the mock saw no tool result")
		}
		return r
	}

	// Each of the next four steps runs a turn of the agent.
	stepFor(t, "Allow", turnTimeout, func(t *testing.T, ctx context.Context) {
		p := ask(t, "echo allowed > /workspace/allowed.txt")
		allow := optionOf(t, p.Options, "allow_once")
		_, err := c.VM(vm.ID).Session(sid).AnswerPermission(ctx, p.RequestID, "no-such-option")
		if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["field"] != "optionId" {
			t.Errorf("details %v", ce.Details)
		}
		_, err = c.VM(vm.ID).Session(sid).AnswerPermission(ctx, "no-such-request", allow)
		wantCode(t, err, "not_found", 404)
		a, err := c.VM(vm.ID).Session(sid).AnswerPermission(ctx, p.RequestID, allow)
		if err != nil || a.Status != "accepted" {
			t.Fatalf("answer: %+v %v", a, err)
		}
		r := response(t, p.RequestID)
		if r.Status != "accepted" || r.Decision == nil || r.Decision.By != "api" || r.Decision.OptionID != allow || r.Decision.KeyID == "" {
			t.Fatalf("response event %+v decision %+v", r, r.Decision)
		}
		a, err = c.VM(vm.ID).Session(sid).AnswerPermission(ctx, p.RequestID, allow)
		if err != nil || a.Status != "not_pending" || a.Reason == "" {
			t.Fatalf("second answer: %+v %v", a, err)
		}
		idle(t)
		if !exists(t, "/workspace/allowed.txt") {
			t.Fatal("the allowed command did not run")
		}
		asked := rc.wait(t, client.EventSessionPermissionRequested, 1, func(d delivered) bool {
			return dataOf[client.SessionPermissionRequestedData](t, d).RequestID == p.RequestID
		})
		if x := dataOf[client.SessionPermissionRequestedData](t, asked[0]); x.VMID != vm.ID || x.SessionID != sid || len(x.ToolCall) == 0 {
			t.Errorf("session.permission_requested: %+v", x)
		}
		ended := rc.wait(t, client.EventSessionTurnEnd, 1, nil)
		if x := dataOf[client.SessionTurnEndData](t, ended[0]); x.VMID != vm.ID || x.SessionID != sid || x.StopReason == "" {
			t.Errorf("session.turn_end: %+v", x)
		}
		if perms, _ := c.VM(vm.ID).Session(sid).Permissions(ctx); len(perms) != 0 {
			t.Fatalf("still pending: %+v", perms)
		}
	})

	stepFor(t, "Reject", turnTimeout, func(t *testing.T, ctx context.Context) {
		p := ask(t, "echo rejected > /workspace/rejected.txt")
		a, err := c.VM(vm.ID).Session(sid).AnswerPermission(ctx, p.RequestID, optionOf(t, p.Options, "reject_once"))
		if err != nil || a.Status != "accepted" {
			t.Fatalf("answer: %+v %v", a, err)
		}
		if r := response(t, p.RequestID); r.Decision == nil || r.Decision.By != "api" || r.Decision.OptionID != optionOf(t, p.Options, "reject_once") {
			t.Fatalf("response %+v", r)
		}
		idle(t)
		if exists(t, "/workspace/rejected.txt") {
			t.Fatal("the rejected command ran")
		}
		if tr := lastToolResult(t); !tr.LastIsError {
			t.Fatalf("the model was not told of the rejection: %+v", tr)
		}
	})

	stepFor(t, "CancelWhilePending", turnTimeout, func(t *testing.T, ctx context.Context) {
		p := ask(t, "echo cancelled > /workspace/cancelled.txt")
		status, err := c.VM(vm.ID).Session(sid).Cancel(ctx)
		if err != nil || status != "cancelled" {
			t.Fatalf("cancel: %q %v", status, err)
		}
		r := response(t, p.RequestID)
		if r.Status != "not_pending" || r.Reason != "prompt_cancelled" || r.Decision == nil || r.Decision.By != "agent" {
			t.Fatalf("response after cancel %+v decision %+v", r, r.Decision)
		}
		idle(t)
		if exists(t, "/workspace/cancelled.txt") {
			t.Fatal("the command of a cancelled turn ran")
		}
		a, err := c.VM(vm.ID).Session(sid).AnswerPermission(ctx, p.RequestID, optionOf(t, p.Options, "allow_once"))
		if err != nil || a.Status != "not_pending" {
			t.Fatalf("answer after cancel: %+v %v", a, err)
		}
	})

	stepFor(t, "TimeoutDefault", turnTimeout, func(t *testing.T, ctx context.Context) {
		// The tenant's default decision: reject after 2 s unanswered.
		if _, err := e.admin.UpdateTenant(ctx, "default", client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
			PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 2},
		}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = e.admin.UpdateTenant(ctxT(t), "default", client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{ClearPermissionDefault: true}})
		})
		p := ask(t, "echo unattended > /workspace/unattended.txt")
		r := response(t, p.RequestID)
		if r.Status != "accepted" || r.Decision == nil || r.Decision.By != "timeout" || r.Decision.OptionID != optionOf(t, p.Options, "reject_once") {
			t.Fatalf("default decision %+v %+v", r, r.Decision)
		}
		if d := r.Decision.At.Sub(p.AskedAt); d < 1500*time.Millisecond {
			t.Errorf("decided %s after the request, before its timeout", d)
		}
		idle(t)
		if exists(t, "/workspace/unattended.txt") {
			t.Fatal("the unattended command ran")
		}
	})

	step(t, "DecisionsAreKept", func(t *testing.T, ctx context.Context) {
		hist, err := c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var by []string
		for _, ev := range hist.Events {
			if ev.Type == "permission_response" {
				by = append(by, ev.Decision.By)
			}
		}
		if strings.Join(by, ",") != "api,api,agent,timeout" {
			t.Fatalf("decisions in the history: %v", by)
		}
	})
	if n := e.metric("agentos_gateway_permission_default_decisions_total"); n != 1 {
		t.Errorf("default decisions metric %v, want 1", n)
	}
	if n := e.metric("agentos_gateway_agent_permissions_pending"); n != 0 {
		t.Errorf("pending permissions metric %v, want 0", n)
	}

	stepFor(t, "no model credentials", turnTimeout, func(t *testing.T, ctx context.Context) {
		// Without a key, Claude Code would answer with a successful turn
		// asking to log in; the prompt is refused, saying what is missing.
		if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: "no-key", Agent: "claude"}); err != nil {
			t.Fatal(err)
		}
		_, err := c.VM(vm.ID).Session("no-key").Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		ce := wantCode(t, err, "unprocessable", 422)
		if ce.Details["reason"] != "agent_credentials_missing" || !strings.Contains(fmt.Sprint(ce.Details["env"]), "ANTHROPIC_API_KEY") ||
			!strings.Contains(ce.Detail, "ANTHROPIC_API_KEY") {
			t.Fatalf("problem %+v", ce)
		}
		if err := c.VM(vm.ID).Session("no-key").Delete(ctx); err != nil {
			t.Fatal(err)
		}
	})

	step(t, "DeleteVM", func(t *testing.T, ctx context.Context) {
		// The VM goes; the session's record and history stay, and its
		// stream ends with the session's end after every durable event.
		end := mustSession(t, c, vm.ID, sid).LatestSequence
		if _, err := c.VM(vm.ID).Delete(ctx); err != nil {
			t.Fatal(err)
		}
		if err := feed.ended(t, 60*time.Second); !streamEnded(err) {
			t.Fatalf("stream ended with %v", err)
		}
		if st := endState(t, feed.events()); st != client.SessionClosed {
			t.Fatalf("end state %q", st)
		}
		wantSequence(t, sequences(feed.durable(t)), 1, end)
		s := mustSession(t, c, vm.ID, sid)
		if s.State != client.SessionClosed || s.LatestSequence != end {
			t.Fatalf("session after the VM's deletion: %+v", s)
		}
		hist, err := c.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		wantSequence(t, sequences(hist.Events), 1, end)
		_, err = c.VM(vm.ID).Session(sid).Cancel(ctx)
		wantCode(t, err, "conflict", 409)
	})
}
