package main

import (
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2EHibernateSessions: an agent session of a VM that hibernates keeps
// its record and history, the engine's session database travels with the
// VM's image, and a prompt after the wake works in the same session, whose
// history goes on. What the agent itself remembers is its own (README,
// *Hibernation*): the model's requests tell it.
func TestE2EHibernateSessions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs real agents")
	}
	e := newE2E(t)
	for _, agent := range []string{"pi", "claude"} {
		t.Run(agent, func(t *testing.T) {
			t.Parallel()
			mock := mockanthropic.Start(t)
			ctx := ctxFor(t, 6*time.Minute)
			c := e.admin
			vm := e.agentVM(c, mock, agent)
			sid := "hib-" + agent
			if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: agent, Env: mock.Env()}); err != nil {
				t.Fatal(err)
			}
			prompt := func(text string) {
				t.Helper()
				if _, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt(text)}); err != nil {
					t.Fatalf("prompt %q: %v", text, err)
				}
			}
			prompt("hello")
			prompt("hello twice")
			before := mustSession(t, c, vm.ID, sid)
			if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
				t.Fatal(err)
			}
			if during := mustSession(t, c, vm.ID, sid); during.LatestSequence != before.LatestSequence {
				t.Fatalf("the session while the VM hibernates: %+v", during)
			}
			prompt("hello again")
			after := mustSession(t, c, vm.ID, sid)
			if after.LatestSequence <= before.LatestSequence || after.State != client.SessionIdle {
				t.Fatalf("the session after the wake: %+v; before: %+v", after, before)
			}
			if got, err := c.VM(vm.ID).Get(ctx); err != nil || got.State != client.VMReady {
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
