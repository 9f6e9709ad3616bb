package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2EAgentSessionOpenCode runs OpenCode, whose permission options have
// ids of their own (once, always, reject): a hello turn, then a tool call
// nobody answers, settled by the session's default decision, which picks the
// option by its kind.
func TestE2EAgentSessionOpenCode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e := newE2E(t)
	mock := mockanthropic.Start(t)
	c := e.admin
	vm := e.agentVM(c, mock, "opencode")
	const sid = "opencode-e2e"
	cfg, _ := json.Marshal(map[string]any{
		"provider":   map[string]any{"anthropic": map[string]any{"options": map[string]any{"baseURL": mock.URL() + "/v1", "apiKey": "sk-test"}}},
		"permission": map[string]string{"bash": "ask", "edit": "ask"},
		"share":      "disabled", "autoupdate": false,
	})
	within(t, "open the session", turnTimeout, func(ctx context.Context) {
		_, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{
			SessionID: sid, Agent: "opencode", Cwd: "/workspace", PermissionPolicy: "ask",
			PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 2},
			Env:               map[string]string{"OPENCODE_CONFIG_CONTENT": string(cfg), "OPENCODE_DISABLE_MODELS_FETCH": "1"},
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	feed := e.follow(t, c, vm.ID, sid, "")

	// Each step runs a turn.
	stepFor(t, "Hello", turnTimeout, func(t *testing.T, ctx context.Context) {
		res, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "end_turn" || !strings.Contains(messageText(t, res.Message), mockanthropic.HelloText) {
			t.Fatalf("result %+v %s", res, res.Message)
		}
	})

	stepFor(t, "DefaultDecisionByKind", turnTimeout, func(t *testing.T, ctx context.Context) {
		if res, err := c.VM(vm.ID).Session(sid).PromptAsync(ctx, client.PromptRequest{Content: toolPrompt("bash", "echo unattended > /workspace/oc.txt")}); err != nil || res != nil {
			t.Fatalf("async prompt: %+v %v", res, err)
		}
		ev := feed.until(t, turnTimeout, "a permission request", func(ev event) bool {
			se, err := ev.SessionEvent()
			return err == nil && se.Type == "permission_request"
		})
		req, _ := ev.SessionEvent()
		reject := optionOf(t, req.Options, "reject_once")
		if reject == "" {
			t.Fatalf("no reject_once option in %+v", req.Options)
		}
		ev = feed.until(t, turnTimeout, "the default decision", func(ev event) bool {
			se, err := ev.SessionEvent()
			return err == nil && se.Type == "permission_response" && se.RequestID == req.RequestID
		})
		resp, _ := ev.SessionEvent()
		if resp.Decision == nil || resp.Decision.By != "timeout" || resp.Decision.OptionID != reject || resp.Status != "accepted" {
			t.Fatalf("decision %+v of %+v", resp.Decision, resp)
		}
		eventually(t, turnTimeout, "the turn to end", func() bool {
			return mustSession(t, c, vm.ID, sid).State == client.SessionIdle
		})
		if _, err := c.VM(vm.ID).Stat(ctx, "/workspace/oc.txt"); !client.IsCode(err, "not_found") {
			t.Fatalf("the rejected command ran: %v", err)
		}
	})
}
