package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2EHibernateSessions: an agent session of a VM that hibernates keeps
// its record and history, the engine's session database travels with the
// VM's image, and a prompt after the wake works in the same session, whose
// history goes on, for the agents that take up a session again (pi,
// claude). What the agent itself remembers is its own (README,
// *Hibernation*): the model's requests tell it. OpenCode refuses a prompt
// to a session it has to start again, after a wake as after an unload
// (409, the engine's invalid_state); its history stays readable.
func TestE2EHibernateSessions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs real agents")
	}
	e := newE2E(t)
	for _, agent := range []string{"pi", "claude", "opencode"} {
		resumes := agent != "opencode"
		t.Run(agent, func(t *testing.T) {
			t.Parallel()
			mock := mockanthropic.Start(t)
			// Each step has a bound of its own, so that a step that stalls
			// is named, not the test's whole budget spent on it.
			step := func() context.Context { return ctxFor(t, 3*time.Minute) }
			c := e.admin
			vm := e.agentVM(c, mock, agent)
			sid := "hib-" + agent
			env := mock.Env()
			if agent == "opencode" {
				// OpenCode takes its model's address from its own
				// configuration (as in TestE2EAgentSessionOpenCode).
				cfg, _ := json.Marshal(map[string]any{
					"provider": map[string]any{"anthropic": map[string]any{"options": map[string]any{"baseURL": mock.URL() + "/v1", "apiKey": "sk-test"}}},
					"share":    "disabled", "autoupdate": false,
				})
				env = map[string]string{"OPENCODE_CONFIG_CONTENT": string(cfg), "OPENCODE_DISABLE_MODELS_FETCH": "1"}
			}
			if _, err := c.VM(vm.ID).OpenSession(step(), client.OpenSessionRequest{SessionID: sid, Agent: agent, Cwd: "/workspace", Env: env}); err != nil {
				t.Fatal(err)
			}
			prompt := func(text string) {
				t.Helper()
				if _, err := c.VM(vm.ID).Session(sid).Prompt(step(), client.PromptRequest{Content: client.TextPrompt(text)}); err != nil {
					// Say where the turn stopped: what the model was asked.
					t.Fatalf("prompt %q: %v (the model had %d requests)", text, err, len(mock.Requests()))
				}
			}
			prompt("hello")
			prompt("hello twice")
			before := mustSession(t, c, vm.ID, sid)
			if _, err := c.VM(vm.ID).Hibernate(step()); err != nil {
				t.Fatal(err)
			}
			// Nothing recorded is lost (an agent's late update may still
			// have come in after the turn answered).
			if during := mustSession(t, c, vm.ID, sid); during.LatestSequence < before.LatestSequence {
				t.Fatalf("the session while the VM hibernates: %+v", during)
			}
			if !resumes {
				_, err := c.VM(vm.ID).Session(sid).Prompt(step(), client.PromptRequest{Content: client.TextPrompt("hello again")})
				wantCode(t, err, client.CodeConflict, http.StatusConflict)
				h, err := c.VM(vm.ID).Session(sid).History(step(), client.HistoryQuery{})
				if err != nil || len(h.Events) == 0 {
					t.Fatalf("the history after the wake: %+v %v", h, err)
				}
				return
			}
			prompt("hello again")
			after := mustSession(t, c, vm.ID, sid)
			if after.LatestSequence <= before.LatestSequence || after.State != client.SessionIdle {
				t.Fatalf("the session after the wake: %+v; before: %+v", after, before)
			}
			if got, err := c.VM(vm.ID).Get(step()); err != nil || got.State != client.VMReady {
				t.Fatalf("the VM after the prompt: %+v %v", got, err)
			}
			messages := map[string]int{}
			for _, r := range mock.Requests() {
				if r.Prompt != "" {
					messages[r.Prompt] = max(messages[r.Prompt], r.Messages)
				}
			}
			t.Logf("%s: messages sent to the model for the second prompt %d, and after the wake %d", agent, messages["hello twice"], messages["hello again"])
			if messages["hello again"] == 0 {
				t.Fatal("the model was not asked after the wake")
			}
		})
	}
}
