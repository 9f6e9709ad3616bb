package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// receiver is a real webhook receiver on loopback: it records every
// delivery it gets, checks its signature, and answers what refuse says.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	secret string
	got    []delivered
	// refuse, when set, picks the deliveries answered 503.
	refuse func(d delivered) bool
}

// delivered is one request the receiver got.
type delivered struct {
	id, event string // the Agentos-Webhook-Id and -Event headers
	trace     string // the traceparent header
	sigErr    error
	body      client.WebhookEvent
	status    int // what the receiver answered
}

func newReceiver(t testing.TB, secret string) *receiver {
	rc := &receiver{secret: secret}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		d := delivered{id: r.Header.Get("Agentos-Webhook-Id"), event: r.Header.Get("Agentos-Webhook-Event"), trace: r.Header.Get("Traceparent"), status: http.StatusNoContent}
		rc.mu.Lock()
		d.sigErr = client.VerifyWebhook(rc.secret, r.Header, raw)
		if err := json.Unmarshal(raw, &d.body); err != nil {
			d.sigErr = fmt.Errorf("body %s: %w", raw, err)
		}
		if rc.refuse != nil && rc.refuse(d) {
			d.status = http.StatusServiceUnavailable
		}
		rc.got = append(rc.got, d)
		rc.mu.Unlock()
		w.WriteHeader(d.status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// deliveries returns what the receiver got of type typ (all: ""), accepted
// or not.
func (rc *receiver) deliveries(typ string) []delivered {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []delivered
	for _, d := range rc.got {
		if typ == "" || d.event == typ {
			out = append(out, d)
		}
	}
	return out
}

// wait waits for n accepted deliveries of typ matching keep.
func (rc *receiver) wait(t testing.TB, typ string, n int, keep func(delivered) bool) []delivered {
	t.Helper()
	var out []delivered
	eventually(t, e2eTimeout, fmt.Sprintf("%d %s deliveries", n, typ), func() bool {
		out = out[:0]
		for _, d := range rc.deliveries(typ) {
			if d.status < 300 && (keep == nil || keep(d)) {
				out = append(out, d)
			}
		}
		return len(out) >= n
	})
	return out
}

func dataOf[T any](t testing.TB, d delivered) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(d.body.Data, &v); err != nil {
		t.Fatalf("data of %s: %s: %v", d.event, d.body.Data, err)
	}
	return v
}

// TestE2EWebhooks: subscriptions deliver the tenant's events to a real
// receiver, signed, in order per VM, at least once: a refused attempt is
// retried under the same delivery id; an async exec's end comes as
// exec.done; deliveries are listed with their attempts and can be sent
// again; a dead receiver's deliveries fail after the retry window and its
// subscription is disabled, which the others hear of.
func TestE2EWebhooks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs real VMs")
	}
	e := newE2E(t, "--webhook-allow", "127.0.0.1", "--webhook-retry-for", "4s")
	_, key := e.tenantWithKey(e.uniq("hooks"), nil)
	c := e.client(key)
	secret, err := c.WebhookSecret(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, secret.Secret)
	// The receiver refuses the first attempt at the exit with code 3.
	refused := map[string]bool{}
	rc.refuse = func(d delivered) bool {
		if d.event != client.EventProcessExit || refused[d.id] {
			return false
		}
		var x client.ProcessExitData
		if json.Unmarshal(d.body.Data, &x) == nil && x.ExitCode == 3 {
			refused[d.id] = true
			return true
		}
		return false
	}
	hook, err := c.CreateWebhook(ctxT(t), client.WebhookRequest{URL: rc.URL + "/hooks", Events: []string{client.EventAll}, Description: "all"})
	if err != nil {
		t.Fatal(err)
	}
	vm := e.vm(c, client.CreateVMRequest{})

	step(t, "Signed, in order per VM, retried", func(t *testing.T, ctx context.Context) {
		// Every change of the VM's state, from its creation on.
		states := rc.wait(t, client.EventVMState, 2, func(d delivered) bool {
			return dataOf[client.VMStateData](t, d).VMID == vm.ID
		})
		if a, b := dataOf[client.VMStateData](t, states[0]), dataOf[client.VMStateData](t, states[1]); a.State != "creating" || b.State != "ready" ||
			states[0].body.Sequence >= states[1].body.Sequence {
			t.Errorf("the VM's first states: %+v, %+v", a, b)
		}
		for code := 1; code <= 5; code++ {
			within(t, fmt.Sprintf("exit %d", code), e2eTimeout, func(ctx context.Context) {
				p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: fmt.Sprintf("exit %d", code)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Wait(ctx, 30*time.Second); err != nil {
					t.Fatal(err)
				}
			})
		}
		exits := rc.wait(t, client.EventProcessExit, 5, nil)
		var codes []int
		var last int64
		for _, d := range exits {
			x := dataOf[client.ProcessExitData](t, d)
			codes = append(codes, x.ExitCode)
			if d.sigErr != nil || d.id != d.body.DeliveryID || d.body.SubscriptionID != hook.ID || string(d.body.Type) != client.EventProcessExit ||
				x.VMID != vm.ID || !strings.HasPrefix(x.Command, "exit ") || d.body.Sequence <= last {
				t.Errorf("delivery %+v (%v): data %+v", d, d.sigErr, x)
			}
			last = d.body.Sequence
		}
		if !slices.Equal(codes, []int{1, 2, 3, 4, 5}) {
			t.Errorf("exit codes in the order received: %v, want 1..5 (the 4th waits for the 3rd's retry)", codes)
		}
		// The refused attempt and its retry carry one delivery id.
		var three []delivered
		for _, d := range rc.deliveries(client.EventProcessExit) {
			if dataOf[client.ProcessExitData](t, d).ExitCode == 3 {
				three = append(three, d)
			}
		}
		if len(three) != 2 || three[0].status != 503 || three[1].status >= 300 || three[0].id != three[1].id {
			t.Fatalf("the exit with code 3 was received as %+v", three)
		}
		l, err := c.Deliveries(ctxT(t), hook.ID, client.DeliveryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range l.Items {
			if d.ID == three[0].id && (d.Attempts != 2 || d.Status != "delivered" || d.LastStatus != 204 || d.DoneAt == nil) {
				t.Errorf("the retried delivery is listed as %+v", d)
			}
		}
	})

	step(t, "Async exec and exec.done", func(t *testing.T, ctx context.Context) {
		acc, res, err := c.VM(vm.ID).ExecAsync(ctx, "async-1", client.ExecRequest{Command: "sleep 1; echo done-$((40+2))"})
		if err != nil || acc == nil || res != nil || acc.Status != "running" {
			t.Fatalf("ExecAsync = %+v, %+v, %v", acc, res, err)
		}
		if acc, _, err := c.VM(vm.ID).ExecOutcome(ctx, "async-1"); err != nil || acc == nil {
			t.Errorf("outcome while it runs: %+v, %v", acc, err)
		}
		done := rc.wait(t, client.EventExecDone, 1, func(d delivered) bool { return dataOf[client.ExecDoneData](t, d).IdempotencyKey == "async-1" })
		x := dataOf[client.ExecDoneData](t, done[0])
		var r struct{ Stdout string }
		_ = json.Unmarshal(x.Result, &r)
		if x.IdempotencyKey != "async-1" || x.VMID != vm.ID || x.ExitCode == nil || *x.ExitCode != 0 || r.Stdout != "done-42\n" {
			t.Fatalf("exec.done: %+v (%s)", x, x.Result)
		}
		_, res, err = c.VM(vm.ID).ExecOutcome(ctx, "async-1")
		if err != nil || res == nil || string(res.Stdout) != "done-42\n" || !res.Replayed {
			t.Fatalf("outcome: %+v, %v", res, err)
		}
		_, _, err = c.VM(vm.ID).ExecOutcome(ctx, "never-used")
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		_, err = e.client(key).VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"}, client.WithIdempotencyKey("sync-1"))
		if err != nil {
			t.Fatal(err)
		}
		rc.wait(t, client.EventExecDone, 1, func(d delivered) bool { return dataOf[client.ExecDoneData](t, d).IdempotencyKey == "sync-1" })
		// The change's trace goes on to its delivery: the exec.done of an
		// exec made with a traceparent carries that trace.
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		resp, body := e.send("POST", "/v1/vms/"+vm.ID+"/exec", key, strings.NewReader(`{"command":"true"}`),
			map[string]string{"Idempotency-Key": "traced-1", "Traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("traced exec: %d %s", resp.StatusCode, body)
		}
		traced := rc.wait(t, client.EventExecDone, 1, func(d delivered) bool { return dataOf[client.ExecDoneData](t, d).IdempotencyKey == "traced-1" })
		if !strings.HasPrefix(traced[0].trace, "00-"+traceID+"-") {
			t.Errorf("the traced exec's exec.done came with traceparent %q, want trace %s", traced[0].trace, traceID)
		}
		resp, body = e.send("POST", "/v1/vms/"+vm.ID+"/exec", key, strings.NewReader(`{"command":"true"}`), map[string]string{"Prefer": "respond-async"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Idempotency-Key") {
			t.Errorf("respond-async without a key: %d %s", resp.StatusCode, body)
		}
	})

	step(t, "Snapshots and schedules", func(t *testing.T, ctx context.Context) {
		snap, err := c.VM(vm.ID).CreateSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ready := rc.wait(t, client.EventSnapshotReady, 1, nil)
		if x := dataOf[client.SnapshotReadyData](t, ready[0]); x.SnapshotID != snap.ID || x.VMID != vm.ID || x.Bytes != snap.Bytes {
			t.Errorf("snapshot.ready: %+v, snapshot %+v", x, snap)
		}
		sc, err := c.VM(vm.ID).CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 1s", Exec: &client.ExecRequest{Command: "exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		// The run that ran: on a loaded machine a run takes over a second,
		// and the ticks meanwhile record skipped runs (overlap policy skip),
		// whose events may come first.
		ran := func(d delivered) bool {
			x := dataOf[client.ScheduleRunData](t, d)
			return x.ScheduleID == sc.ID && x.Outcome != string(client.RunSkipped)
		}
		run := rc.wait(t, client.EventScheduleRun, 1, ran)
		if err := c.VM(vm.ID).Schedule(sc.ID).Delete(ctx); err != nil {
			t.Fatal(err)
		}
		if x := dataOf[client.ScheduleRunData](t, run[0]); x.VMID != vm.ID || x.RunID == "" || x.Outcome != string(client.RunFailed) || x.ExitCode == nil || *x.ExitCode != 7 {
			t.Errorf("schedule.run: %+v", x)
		}
		// Whichever came first, each run is told of once, whole.
		runs := map[string]bool{}
		for _, d := range rc.wait(t, client.EventScheduleRun, 1, nil) {
			x := dataOf[client.ScheduleRunData](t, d)
			if x.ScheduleID != sc.ID || x.VMID != vm.ID || x.RunID == "" || runs[x.RunID] ||
				(x.Outcome == string(client.RunSkipped)) != (x.ExitCode == nil) {
				t.Errorf("schedule.run: %+v", x)
			}
			runs[x.RunID] = true
		}
	})

	step(t, "Redeliver", func(t *testing.T, ctx context.Context) {
		// So far each delivery was accepted once.
		accepted := map[string]int{}
		for _, d := range rc.deliveries("") {
			if d.status < 300 {
				accepted[d.id]++
				if accepted[d.id] > 1 {
					t.Errorf("delivery %s (%s) accepted %d times", d.id, d.event, accepted[d.id])
				}
			}
		}
		first := rc.wait(t, client.EventVMState, 1, nil)[0]
		d, err := c.Redeliver(ctx, hook.ID, first.id)
		if err != nil || d.Status != "pending" {
			t.Fatalf("Redeliver = %+v, %v", d, err)
		}
		rc.wait(t, client.EventVMState, 1, func(got delivered) bool {
			return got.id == first.id && got.body.Sequence == first.body.Sequence && len(rc.deliveriesWithID(first.id)) == 2
		})
	})

	step(t, "A dead receiver's subscription is disabled", func(t *testing.T, ctx context.Context) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String() + "/gone"
		ln.Close()
		gone, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: dead, Events: []string{client.EventProcessExit}, VM: vm.ID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "true"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		off := rc.wait(t, client.EventWebhookDisabled, 1, nil)
		if x := dataOf[client.WebhookDisabledData](t, off[0]); x.WebhookID != gone.ID || x.URL != dead || x.Reason == "" {
			t.Errorf("webhook.disabled: %+v", x)
		}
		h, err := c.Webhook(ctx, gone.ID)
		if err != nil || h.State != "disabled" || h.DisabledReason == "" {
			t.Fatalf("the dead receiver's subscription: %+v, %v", h, err)
		}
		l, err := c.Deliveries(ctx, gone.ID, client.DeliveryOptions{Status: "failed"})
		if err != nil || len(l.Items) != 1 || l.Items[0].Attempts < 2 || !strings.Contains(l.Items[0].LastError, "unreachable") {
			t.Fatalf("failed deliveries: %+v, %v", l, err)
		}
		h, err = c.UpdateWebhook(ctx, gone.ID, client.WebhookUpdate{Enabled: client.Ptr(true)})
		if err != nil || h.State != "active" || h.DisabledReason != "" {
			t.Fatalf("enabled again: %+v, %v", h, err)
		}
	})

	step(t, "Bad input", func(t *testing.T, ctx context.Context) {
		for _, tc := range []struct {
			name  string
			req   client.WebhookRequest
			field string
		}{
			{"unknown event", client.WebhookRequest{URL: rc.URL, Events: []string{"vm.exploded"}}, "events[0]"},
			{"star and more", client.WebhookRequest{URL: rc.URL, Events: []string{"*", client.EventVMState}}, "events[0]"},
			{"twice", client.WebhookRequest{URL: rc.URL, Events: []string{client.EventVMState, client.EventVMState}}, "events[1]"},
			{"target refused", client.WebhookRequest{URL: "https://example.com/hook", Events: []string{"*"}}, "url"},
			{"not http", client.WebhookRequest{URL: "ftp://127.0.0.1/x", Events: []string{"*"}}, "url"},
			{"another tenant's VM", client.WebhookRequest{URL: rc.URL, Events: []string{"*"}, VM: "vm_nope"}, "vm"},
		} {
			_, err := c.CreateWebhook(ctx, tc.req)
			if ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest); ce.Details["field"] != tc.field {
				t.Errorf("%s: details %v, want field %s", tc.name, ce.Details, tc.field)
			}
		}
		_, otherKey := e.tenantWithKey(e.uniq("other"), nil)
		_, err := e.client(otherKey).Webhook(ctx, hook.ID)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		if err := c.DeleteWebhook(ctx, hook.ID); err != nil {
			t.Fatal(err)
		}
		_, err = c.Webhook(ctx, hook.ID)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})
}

// deliveriesWithID returns every request that carried delivery id.
func (rc *receiver) deliveriesWithID(id string) []delivered {
	var out []delivered
	for _, d := range rc.deliveries("") {
		if d.id == id {
			out = append(out, d)
		}
	}
	return out
}

// TestE2EWebhookSurvivesSIGKILL: a delivery pending when the gateway is
// SIGKILLed (its receiver refused it so far) is delivered, under its id,
// by the gateway started again on the same store.
func TestE2EWebhookSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildGateway(t)
	dataDir := t.TempDir()
	env := []string{"AGENTOS_GATEWAY_WEBHOOK_ALLOW=127.0.0.1", "AGENTOS_GATEWAY_WEBHOOK_SECRET=a-webhook-secret-for-the-test"}
	cmd, base, _ := startBinary(t, bin, dataDir, env...)
	c, err := client.New(base, testAdminKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	secret, err := c.WebhookSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, secret.Secret)
	var mu sync.Mutex
	accept := false
	rc.refuse = func(delivered) bool {
		mu.Lock()
		defer mu.Unlock()
		return !accept
	}
	if _, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: rc.URL, Events: []string{client.EventVMState}}); err != nil {
		t.Fatal(err)
	}
	vm, err := c.CreateVM(ctxT(t), client.CreateVMRequest{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "a refused attempt", func() bool { return len(rc.deliveries(client.EventVMState)) > 0 })
	pending := rc.deliveries(client.EventVMState)[0]
	killGateway(t, cmd, c)

	mu.Lock()
	accept = true
	mu.Unlock()
	startBinary(t, bin, dataDir, env...)
	got := rc.wait(t, client.EventVMState, 1, func(d delivered) bool { return d.id == pending.id })
	if x := dataOf[client.VMStateData](t, got[0]); x.VMID != vm.ID || x.State != "creating" || got[0].sigErr != nil {
		t.Fatalf("delivered after the restart: %+v %+v", x, got[0])
	}
}

// TestE2EWebhooksCluster: two nodes on one PostgreSQL deliver one tenant's
// events together, each delivery exactly once while both run (their
// dispatchers claim with FOR UPDATE SKIP LOCKED and a lease), each VM's in
// order.
func TestE2EWebhooksCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs two gateway binaries")
	}
	cl := startCluster(t, 2, "--webhook-allow", "127.0.0.1")
	n1, n2 := cl.nodes[0], cl.nodes[1]
	var c1, c2 *client.Client
	var rc *receiver
	within(t, "tenant and subscription", e2eTimeout, func(ctx context.Context) {
		tn, err := n1.c.CreateTenant(ctx, client.TenantCreate{Name: "hooks-cluster"})
		if err != nil {
			t.Fatal(err)
		}
		key, err := n1.c.CreateKey(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		c1 = mustClient(t, n1.url(), key.Key, client.WithHTTPClient(cl.hc))
		c2 = mustClient(t, n2.url(), key.Key, client.WithHTTPClient(cl.hc))
		secret, err := c1.WebhookSecret(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rc = newReceiver(t, secret.Secret)
		if _, err := c2.CreateWebhook(ctx, client.WebhookRequest{URL: rc.URL, Events: []string{client.EventProcessExit}}); err != nil {
			t.Fatal(err)
		}
	})
	const vms, perVM = 3, 8
	var wg sync.WaitGroup
	for i := range vms {
		c := []*client.Client{c1, c2}[i%2]
		vm, err := c.CreateVM(ctxT(t), client.CreateVMRequest{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for code := range perVM {
				ok := false
				within(t, fmt.Sprintf("%s: exit %d", vm.ID, code), e2eTimeout, func(ctx context.Context) {
					p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: fmt.Sprintf("exit %d", code)})
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := p.Wait(ctx, 30*time.Second); err != nil {
						t.Error(err)
						return
					}
					ok = true
				})
				if !ok {
					return
				}
			}
		})
	}
	wg.Wait()
	got := rc.wait(t, client.EventProcessExit, vms*perVM, nil)
	time.Sleep(2 * time.Second) // a duplicate would come within a poll or two
	got = rc.deliveries(client.EventProcessExit)
	seen := map[string]bool{}
	codes := map[string][]int{}
	for _, d := range got {
		if seen[d.id] {
			t.Errorf("delivery %s sent twice", d.id)
		}
		seen[d.id] = true
		if d.sigErr != nil {
			t.Errorf("delivery %s: %v", d.id, d.sigErr)
		}
		x := dataOf[client.ProcessExitData](t, d)
		codes[x.VMID] = append(codes[x.VMID], x.ExitCode)
	}
	if len(seen) != vms*perVM || len(codes) != vms {
		t.Fatalf("%d deliveries of %d VMs, want %d of %d", len(seen), len(codes), vms*perVM, vms)
	}
	for vm, cs := range codes {
		if !slices.IsSorted(cs) {
			t.Errorf("VM %s's exits arrived as %v", vm, cs)
		}
	}
}
