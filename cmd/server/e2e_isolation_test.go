package main

// Tenant isolation and quotas, end to end.

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2ETenantIsolation: tenant B gets not_found for tenant A's VM on every
// VM route, B's list does not show it, and A's VM is untouched by B's
// attempts.
func TestE2ETenantIsolation(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	_, ca := e.tenant("tenant-a", nil)
	_, cb := e.tenant("tenant-b", nil)
	vm := e.vm(ca, client.CreateVMRequest{Labels: map[string]string{"owner": "a"}, Agents: []string{"pi"}})
	bVM := e.vm(cb, client.CreateVMRequest{Labels: map[string]string{"owner": "b"}})
	var p *client.ProcessHandle
	var shell *client.ShellHandle
	within(t, "A's process and shell", e2eTimeout, func(ctx context.Context) {
		var err error
		p, err = ca.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"})
		if err != nil {
			t.Fatal(err)
		}
		shell, err = ca.VM(vm.ID).OpenShell(ctx, client.ShellRequest{Shell: "bash"})
		if err != nil {
			t.Fatal(err)
		}
		// The shell ends at once but stays listed, which is all B's requests
		// need: on 0.2.21 a shell waiting at its prompt slows the whole sidecar
		// to a crawl (see the README's known limits), and the rest of this test
		// opens an agent session in the VM.
		// (A shell the engine ended by itself is a conflict here, and as good.)
		if err := shell.Input(ctx, []byte("exit\r")); err != nil && !client.IsCode(err, client.CodeConflict) {
			t.Fatal(err)
		}
	})
	eventually(t, e2eTimeout, "A's shell to end", func() bool {
		sh, err := shell.Get(ctxT(t))
		return err == nil && sh.State == client.ShellExited
	})
	// A session of A's: opening one needs no model, prompting would.
	const sid = "a-session"
	within(t, "A's file and session", e2eTimeout, func(ctx context.Context) {
		if _, err := ca.VM(vm.ID).WriteFile(ctx, "/workspace/secret.txt", strings.NewReader("a's secret"), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := ca.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi"}); err != nil {
			t.Fatal(err)
		}
	})
	stream := func(s *client.Stream, err error) error {
		if s != nil {
			s.Close()
		}
		return err
	}
	routes := []struct {
		route string
		do    func(ctx context.Context) error
	}{
		{"GET /v1/vms/{vm}", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Get(ctx); return err }},
		{"DELETE /v1/vms/{vm}", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Delete(ctx); return err }},
		{"GET /v1/vms/{vm}/events", func(ctx context.Context) error { return stream(cb.VM(vm.ID).Events(ctx, client.StreamOptions{})) }},
		{"POST /v1/vms/{vm}/exec", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "cat /workspace/secret.txt"})
			return err
		}},
		{"POST /v1/vms/{vm}/exec (stream)", func(ctx context.Context) error {
			return stream(cb.VM(vm.ID).ExecStream(ctx, client.ExecRequest{Command: "cat /workspace/secret.txt"}))
		}},
		{"POST /v1/vms/{vm}/exec (Idempotency-Key)", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"}, client.WithIdempotencyKey("b-key"))
			return err
		}},
		{"POST /v1/vms/{vm}/processes", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "true"})
			return err
		}},
		{"GET /v1/vms/{vm}/processes", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Processes(ctx); return err }},
		{"GET /v1/vms/{vm}/processes/{pid}", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Process(p.Pid()).Get(ctx); return err }},
		{"GET /v1/vms/{vm}/processes/{pid}/output", func(ctx context.Context) error {
			return stream(cb.VM(vm.ID).Process(p.Pid()).Output(ctx, client.StreamOptions{}))
		}},
		{"POST /v1/vms/{vm}/processes/{pid}/stdin", func(ctx context.Context) error { return cb.VM(vm.ID).Process(p.Pid()).WriteStdin(ctx, []byte("x")) }},
		{"POST /v1/vms/{vm}/processes/{pid}/stdin/close", func(ctx context.Context) error { return cb.VM(vm.ID).Process(p.Pid()).CloseStdin(ctx) }},
		{"POST /v1/vms/{vm}/processes/{pid}/signal", func(ctx context.Context) error { return cb.VM(vm.ID).Process(p.Pid()).Signal(ctx, "SIGKILL") }},
		{"GET /v1/vms/{vm}/processes/{pid}/wait", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Process(p.Pid()).Wait(ctx, time.Millisecond)
			return err
		}},
		{"POST /v1/vms/{vm}/shells", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).OpenShell(ctx, client.ShellRequest{})
			return err
		}},
		{"POST /v1/vms/{vm}/shells/{shell}/input", func(ctx context.Context) error { return cb.VM(vm.ID).Shell(shell.ID()).Input(ctx, []byte("exit\n")) }},
		{"POST /v1/vms/{vm}/shells/{shell}/resize", func(ctx context.Context) error { return cb.VM(vm.ID).Shell(shell.ID()).Resize(ctx, 10, 10) }},
		{"GET /v1/vms/{vm}/shells/{shell}/output", func(ctx context.Context) error {
			return stream(cb.VM(vm.ID).Shell(shell.ID()).Output(ctx, client.StreamOptions{}))
		}},
		{"DELETE /v1/vms/{vm}/shells/{shell}", func(ctx context.Context) error { return cb.VM(vm.ID).Shell(shell.ID()).Close(ctx) }},
		{"GET /v1/vms/{vm}/files", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).ReadFile(ctx, "/workspace/secret.txt")
			return err
		}},
		{"HEAD /v1/vms/{vm}/files", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).HeadFile(ctx, "/workspace/secret.txt")
			return err
		}},
		{"PUT /v1/vms/{vm}/files", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).WriteFile(ctx, "/workspace/secret.txt", strings.NewReader("b was here"), client.WriteFileOptions{})
			return err
		}},
		{"DELETE /v1/vms/{vm}/files", func(ctx context.Context) error {
			return cb.VM(vm.ID).DeleteFile(ctx, "/workspace/secret.txt", client.DeleteFileOptions{Recursive: false})
		}},
		{"GET /v1/vms/{vm}/dirs", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).ListDir(ctx, "/workspace", client.ListDirOptions{Recursive: true, MaxDepth: 0})
			return err
		}},
		{"POST /v1/vms/{vm}/dirs", func(ctx context.Context) error { return cb.VM(vm.ID).Mkdir(ctx, "/workspace/b") }},
		{"POST /v1/vms/{vm}/fs/move", func(ctx context.Context) error {
			return cb.VM(vm.ID).Move(ctx, "/workspace/secret.txt", "/workspace/stolen.txt")
		}},
		{"GET /v1/vms/{vm}/fs/stat", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Stat(ctx, "/workspace/secret.txt"); return err }},
		{"GET /v1/vms/{vm}/agents", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Agents(ctx); return err }},
		{"POST /v1/vms/{vm}/sessions", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi"})
			return err
		}},
		{"GET /v1/vms/{vm}/sessions", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).ListSessions(ctx, client.ListOptions{})
			return err
		}},
		{"GET /v1/vms/{vm}/sessions/{session}", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Get(ctx); return err }},
		{"DELETE /v1/vms/{vm}/sessions/{session}", func(ctx context.Context) error { return cb.VM(vm.ID).Session(sid).Delete(ctx) }},
		{"POST /v1/vms/{vm}/sessions/{session}/unload", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Unload(ctx); return err }},
		{"POST /v1/vms/{vm}/sessions/{session}/prompt", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hi")})
			return err
		}},
		{"POST /v1/vms/{vm}/sessions/{session}/prompt (idempotencyKey)", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Session(sid).PromptAsync(ctx, client.PromptRequest{Content: client.TextPrompt("hi"), IdempotencyKey: "b-key"})
			return err
		}},
		{"POST /v1/vms/{vm}/sessions/{session}/cancel", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Cancel(ctx); return err }},
		{"GET /v1/vms/{vm}/sessions/{session}/permissions", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Permissions(ctx); return err }},
		{"POST /v1/vms/{vm}/sessions/{session}/permissions/{request}", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Session(sid).AnswerPermission(ctx, "r1", "allow_once")
			return err
		}},
		{"GET /v1/vms/{vm}/sessions/{session}/config", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Config(ctx); return err }},
		{"PUT /v1/vms/{vm}/sessions/{session}/config/{config}", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Session(sid).SetConfig(ctx, "model", "x")
			return err
		}},
		{"GET /v1/vms/{vm}/sessions/{session}/capabilities", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).Capabilities(ctx); return err }},
		{"GET /v1/vms/{vm}/sessions/{session}/agent-info", func(ctx context.Context) error { _, err := cb.VM(vm.ID).Session(sid).AgentInfo(ctx); return err }},
		{"GET /v1/vms/{vm}/sessions/{session}/history", func(ctx context.Context) error {
			_, err := cb.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{})
			return err
		}},
		{"GET /v1/vms/{vm}/sessions/{session}/events", func(ctx context.Context) error {
			return stream(cb.VM(vm.ID).Session(sid).Events(ctx, client.StreamOptions{}))
		}},
	}
	for _, r := range routes {
		t.Run(r.route, func(t *testing.T) {
			within(t, r.route, e2eTimeout, func(ctx context.Context) {
				ce := wantCode(t, r.do(ctx), client.CodeNotFound, http.StatusNotFound)
				// The problem does not leak that the VM exists.
				if ce.Details["state"] != nil || strings.Contains(ce.Detail, "tenant-a") {
					t.Fatalf("the problem leaks something: %+v", ce)
				}
			})
		})
	}

	t.Run("lists", func(t *testing.T) {
		e := e.sub(t)
		within(t, "lists", e2eTimeout, func(ctx context.Context) {
			lb, err := cb.ListVMs(ctx, client.ListVMsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ids := vmIDs(lb.Items); !sameSet(ids, []string{bVM.ID}) {
				t.Fatalf("B lists %v", ids)
			}
			lb, err = cb.ListVMs(ctx, client.ListVMsOptions{Labels: map[string]string{"owner": "a"}})
			if err != nil || len(lb.Items) != 0 {
				t.Fatalf("B finds A's VM by label: %+v %v", lb, err)
			}
			la, err := ca.ListVMs(ctx, client.ListVMsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ids := vmIDs(la.Items); !sameSet(ids, []string{vm.ID}) {
				t.Fatalf("A lists %v", ids)
			}
			// The admin key is the default tenant: it sees neither.
			ld, err := e.admin.ListVMs(ctx, client.ListVMsOptions{})
			if err != nil || slices.Contains(vmIDs(ld.Items), vm.ID) || slices.Contains(vmIDs(ld.Items), bVM.ID) {
				t.Fatalf("default tenant lists %+v %v", ld, err)
			}
		})
	})

	t.Run("A's VM untouched", func(t *testing.T) {
		within(t, "A's VM untouched", e2eTimeout, func(ctx context.Context) {
			got, err := ca.VM(vm.ID).Get(ctx)
			if err != nil || got.State != client.VMReady {
				t.Fatalf("%+v %v", got, err)
			}
			sessions, err := ca.VM(vm.ID).ListSessions(ctx, client.ListOptions{})
			if err != nil || len(sessions.Items) != 1 || sessions.Items[0].ID != sid || sessions.Items[0].State != client.SessionIdle {
				t.Fatalf("A's sessions: %+v %v", sessions, err)
			}
			pr, err := ca.VM(vm.ID).Process(p.Pid()).Get(ctx)
			if err != nil || !pr.Running {
				t.Fatalf("A's process: %+v %v", pr, err)
			}
			r, err := ca.VM(vm.ID).ReadFile(ctx, "/workspace/secret.txt")
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			b.ReadFrom(r)
			r.Close()
			if b.String() != "a's secret" {
				t.Fatalf("A's file: %q", b.String())
			}
			l, err := ca.VM(vm.ID).ListDir(ctx, "/workspace", client.ListDirOptions{Recursive: false, MaxDepth: 0})
			if err != nil || len(l) != 1 {
				t.Fatalf("A's /workspace: %+v %v", l, err)
			}
			ps, err := ca.VM(vm.ID).Processes(ctx)
			if err != nil || len(ps) != 1 || ps[0].Pid != p.Pid() { // shells are not listed
				t.Fatalf("A's processes: %+v %v", ps, err)
			}
			// B's refused exec with an Idempotency-Key recorded nothing: B can
			// use the key on its own VM.
			if _, err := cb.VM(bVM.ID).Exec(ctx, client.ExecRequest{Command: "true"}, client.WithIdempotencyKey("b-key")); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestE2EQuotas: maxVms, maxProcesses and requestsPerSecond, each refused
// with resource_exhausted (429) and the quota named, and lifted when the
// resource is given back or the quota raised.
func TestE2EQuotas(t *testing.T) {
	t.Parallel()
	e := newE2E(t)

	t.Run("maxVms", func(t *testing.T) {
		// One context per call: the VMs created between them take a while.
		e := e.sub(t)
		tn, c := e.tenant("vms-2", &client.Quotas{MaxVMs: 2})
		v1 := e.vm(c, client.CreateVMRequest{})
		e.vm(c, client.CreateVMRequest{})
		_, err := c.CreateVM(ctxT(t), client.CreateVMRequest{})
		quotaIs("maxVms")(t, wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests))
		if _, err := c.VM(v1.ID).Delete(ctxT(t)); err != nil {
			t.Fatalf("delete %s: %v", v1.ID, err)
		}
		e.vm(c, client.CreateVMRequest{})
		// Raising the quota takes effect at once.
		if _, err := e.admin.UpdateTenant(ctxT(t), tn.ID, client.TenantUpdate{Quotas: &client.QuotasUpdate{MaxVMs: client.Ptr(3)}}); err != nil {
			t.Fatalf("raise the quota: %v", err)
		}
		e.vm(c, client.CreateVMRequest{})
		_, err = c.CreateVM(ctxT(t), client.CreateVMRequest{})
		wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
	})

	t.Run("maxVms under concurrency", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		_, c := e.tenant("vms-1", &client.Quotas{MaxVMs: 1})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var created, refused int
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.CreateVM(ctx, client.CreateVMRequest{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case client.IsCode(err, client.CodeResourceExhausted):
					refused++
				default:
					t.Errorf("create: %v", err)
				}
			}()
		}
		wg.Wait()
		if created != 1 || refused != 3 {
			t.Fatalf("%d created, %d refused; want 1 and 3", created, refused)
		}
	})

	t.Run("maxProcesses", func(t *testing.T) {
		e := e.sub(t)
		_, c := e.tenant("procs-2", &client.Quotas{MaxProcesses: 2})
		vm := e.vm(c, client.CreateVMRequest{})
		var pids []uint32
		within(t, "two processes, the third refused", e2eTimeout, func(ctx context.Context) {
			for range 2 {
				p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"})
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, p.Pid())
			}
			_, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"})
			quotaIs("maxProcesses")(t, wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests))
			// An exec and a shell are processes too.
			_, err = c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"})
			quotaIs("maxProcesses")(t, wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests))
			_, err = c.VM(vm.ID).OpenShell(ctx, client.ShellRequest{})
			wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
		})
		within(t, "a process ends", e2eTimeout, func(ctx context.Context) {
			// A process that ends gives its slot back.
			if err := c.VM(vm.ID).Process(pids[0]).Signal(ctx, "SIGKILL"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.VM(vm.ID).Process(pids[0]).Wait(ctx, 30*time.Second); err != nil {
				t.Fatal(err)
			}
		})
		eventually(t, 10*time.Second, "the process slot to be given back", func() bool {
			_, err := c.VM(vm.ID).Exec(ctxT(t), client.ExecRequest{Command: "true"})
			return err == nil
		})
		// The quota counts the tenant's processes, not the VM's: another VM
		// of the same tenant is refused too.
		vm2 := e.vm(c, client.CreateVMRequest{})
		within(t, "the other VM's processes", e2eTimeout, func(ctx context.Context) {
			if _, err := c.VM(vm2.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"}); err != nil {
				t.Fatal(err)
			}
			_, err := c.VM(vm2.ID).Spawn(ctx, client.SpawnRequest{Command: "true"})
			wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
		})
	})

	t.Run("requestsPerSecond", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		tn, key := e.tenantWithKey("rps-2", &client.Quotas{RequestsPerSecond: 2})
		// No retries: each 429 is to be seen, not waited out.
		c := e.client(key, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
		_, other := e.tenant("rps-free", nil)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ok, limited int
		const burst = 20
		for range burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.ListVMs(ctx, client.ListVMsOptions{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case client.IsCode(err, client.CodeResourceExhausted):
					limited++
					ce := err.(*client.Error)
					if ce.Status != 429 || ce.RetryAfter != time.Second || ce.Details["quota"] != "requestsPerSecond" {
						t.Errorf("rate limited: %+v", ce)
					}
				default:
					t.Errorf("list: %v", err)
				}
			}()
		}
		wg.Wait()
		// A burst of 2, then 2 per second: a few more refill while the
		// burst is served on a slow machine.
		t.Logf("burst of %d: %d served, %d limited", burst, ok, limited)
		if ok < 2 || limited < burst/2 || ok+limited != burst {
			t.Fatalf("%d served, %d limited", ok, limited)
		}
		// Another tenant is not limited meanwhile.
		for range 10 {
			if _, err := other.ListVMs(ctx, client.ListVMsOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The bucket refills.
		eventually(t, 10*time.Second, "the rate limit to let requests through again", func() bool {
			_, err := c.ListVMs(ctx, client.ListVMsOptions{})
			return err == nil
		})
		// Lifting the quota (0: unlimited) takes effect at once.
		if _, err := e.admin.UpdateTenant(ctx, tn.ID, client.TenantUpdate{Quotas: &client.QuotasUpdate{RequestsPerSecond: client.Ptr(0.0)}}); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if _, err := c.ListVMs(ctx, client.ListVMsOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
