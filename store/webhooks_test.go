package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func hookEvent(typ gateway.EventType, tenant, vm string, n int) gateway.Event {
	return gateway.NewEvent(typ, tenant, vm, time.Time{}, map[string]any{"vmId": vm, "n": n})
}

// TestWebhookOutbox: events reach the subscriptions that want them, each
// numbered in its subscription's sequence; only the oldest pending
// delivery of a subscription and VM is due, so a VM's events go in order
// while other VMs' go on; attempts are recorded only by the node holding
// the lease; a failure run as long as the retry window disables the
// subscription; redelivery makes a delivery due again under its id.
func TestWebhookOutbox(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		all, err := db.CreateWebhook(ctx, gateway.Webhook{TenantID: "acme", URL: "https://a.example/all", Events: []gateway.EventType{"*"}})
		if err != nil || all.State != gateway.WebhookActive || all.ID == "" {
			t.Fatalf("CreateWebhook = %+v, %v", all, err)
		}
		exits, _ := db.CreateWebhook(ctx, gateway.Webhook{TenantID: "acme", URL: "https://a.example/exits", Events: []gateway.EventType{gateway.EventProcessExit}, VMID: "vm_1"})
		_, err = db.CreateWebhook(ctx, gateway.Webhook{TenantID: "nobody", URL: "https://x", Events: []gateway.EventType{"*"}})
		wantCode(t, err, gateway.CodeNotFound)
		if _, err := db.GetWebhook(ctx, "globex", all.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Fatalf("another tenant's webhook: %v", err)
		}

		// Publishing: the VM-bound subscription takes vm_1's exits only;
		// another tenant's events reach no one.
		for _, ev := range []gateway.Event{
			hookEvent(gateway.EventProcessExit, "acme", "vm_1", 1),
			hookEvent(gateway.EventProcessExit, "acme", "vm_1", 2),
			hookEvent(gateway.EventVMState, "acme", "vm_1", 3),
			hookEvent(gateway.EventProcessExit, "acme", "vm_2", 4),
		} {
			if _, err := db.PublishEvents(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		if written, err := db.PublishEvents(ctx, hookEvent(gateway.EventProcessExit, "globex", "vm_9", 5)); err != nil || written {
			t.Fatalf("another tenant's event: %v, %v", written, err)
		}
		list := func(id string) []gateway.Delivery {
			t.Helper()
			p, err := db.ListDeliveries(ctx, "acme", id, gateway.DeliveryFilter{})
			if err != nil {
				t.Fatal(err)
			}
			return p.Items
		}
		if l := list(all.ID); len(l) != 4 || l[0].Sequence != 1 || l[3].Sequence != 4 || l[3].VMID != "vm_2" {
			t.Fatalf("the catch-all's deliveries: %+v", l)
		}
		if l := list(exits.ID); len(l) != 2 || l[1].Sequence != 2 {
			t.Fatalf("vm_1's exits: %+v", l)
		}

		// Due: the head of each (subscription, VM) queue: the catch-all's
		// first of vm_1 and its vm_2 one, and the exits' first.
		claimed, err := db.ClaimDeliveries(ctx, "node-a", time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		heads := func(ds []gateway.Delivery) []string {
			var out []string
			for _, d := range ds {
				out = append(out, fmt.Sprintf("%s/%d", d.URL, d.Sequence))
			}
			slices.Sort(out)
			return out
		}
		if got, want := heads(claimed), []string{"https://a.example/all/1", "https://a.example/all/4", "https://a.example/exits/1"}; !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
		if again, err := db.ClaimDeliveries(ctx, "node-b", time.Minute, 10); err != nil || len(again) != 0 {
			t.Fatalf("a second node claimed %v, %v while the heads are leased", heads(again), err)
		}
		byURL := map[string]gateway.Delivery{}
		for _, d := range claimed {
			byURL[fmt.Sprintf("%s/%d", d.URL, d.Sequence)] = d
			var body gateway.WebhookBody
			b, _ := d.Body()
			if err := json.Unmarshal(b, &body); err != nil || body.DeliveryID != d.ID || body.SubscriptionID != d.SubscriptionID || body.TenantID != "acme" || body.Type == "" {
				t.Fatalf("body %s: %v", b, err)
			}
		}
		// Another node's report is ignored: the lease is node-a's.
		if _, err := db.FinishAttempt(ctx, byURL["https://a.example/all/1"].ID, "node-b", Attempt{Status: 200}); err != nil {
			t.Fatal(err)
		}
		if l := list(all.ID); l[0].Status != gateway.DeliveryPending || l[0].Attempts != 0 {
			t.Fatalf("after another node's report: %+v", l[0])
		}
		// A failed attempt to retry later keeps the queue behind it.
		if _, err := db.FinishAttempt(ctx, byURL["https://a.example/all/1"].ID, "node-a", Attempt{Status: 503, Err: "webhook answered 503", Next: time.Now().Add(time.Hour), RetryFor: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if h, _ := db.GetWebhook(ctx, "acme", all.ID); h.FailingSince.IsZero() {
			t.Fatalf("a failing subscription: %+v", h)
		}
		if _, err := db.FinishAttempt(ctx, byURL["https://a.example/all/4"].ID, "node-a", Attempt{Status: 204}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.FinishAttempt(ctx, byURL["https://a.example/exits/1"].ID, "node-a", Attempt{Status: 200}); err != nil {
			t.Fatal(err)
		}
		claimed, _ = db.ClaimDeliveries(ctx, "node-b", time.Minute, 10)
		if got, want := heads(claimed), []string{"https://a.example/exits/2"}; !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v (vm_1's catch-all queue waits for its retry)", got, want)
		}
		l := list(all.ID)
		if l[0].Attempts != 1 || l[0].LastStatus != 503 || l[0].LastError == "" || l[0].NextAttemptAt.Before(time.Now()) || l[3].Status != gateway.DeliveryDelivered || l[3].DoneAt.IsZero() {
			t.Fatalf("after the attempts: %+v", l)
		}
		if h, _ := db.GetWebhook(ctx, "acme", all.ID); !h.FailingSince.IsZero() {
			t.Fatalf("a delivery made ends the failure run: %+v", h)
		}
		if p, _ := db.ListDeliveries(ctx, "acme", all.ID, gateway.DeliveryFilter{Status: gateway.DeliveryDelivered}); len(p.Items) != 1 {
			t.Fatalf("delivered ones: %+v", p.Items)
		}

		// Redeliver: due now; then a final failure past the retry window
		// disables the subscription and fails its pending deliveries.
		d, err := db.Redeliver(ctx, "acme", all.ID, l[0].ID)
		if err != nil || d.ID != l[0].ID || d.Status != gateway.DeliveryPending {
			t.Fatalf("Redeliver = %+v, %v", d, err)
		}
		_, err = db.Redeliver(ctx, "globex", all.ID, l[0].ID)
		wantCode(t, err, gateway.CodeNotFound)
		claimed, _ = db.ClaimDeliveries(ctx, "node-a", time.Minute, 10)
		if len(claimed) != 1 || claimed[0].ID != l[0].ID {
			t.Fatalf("claimed %v after the redelivery", heads(claimed))
		}
		// A failure starts the run; the last attempt fails for good two
		// hours later, with a retry window of one.
		if _, err := db.FinishAttempt(ctx, claimed[0].ID, "node-a", Attempt{Err: "webhook unreachable", Next: time.Now(), RetryFor: time.Hour}); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(2 * time.Hour)
		db.now = func() time.Time { return later.UTC().Truncate(time.Microsecond) }
		// (vm_1's second exit, leased to node-b an hour ago and never
		// reported, is due again: its lease ended.)
		claimed, _ = db.ClaimDeliveries(ctx, "node-a", time.Minute, 10)
		if got, want := heads(claimed), []string{"https://a.example/all/1", "https://a.example/exits/2"}; !slices.Equal(got, want) {
			t.Fatalf("claimed %v for the last attempt, want %v", got, want)
		}
		disabled, err := db.FinishAttempt(ctx, l[0].ID, "node-a", Attempt{Status: 0, Err: "webhook unreachable", RetryFor: time.Hour})
		if err != nil || disabled == nil || disabled.ID != all.ID || disabled.State != gateway.WebhookDisabled {
			t.Fatalf("FinishAttempt = %+v, %v; want the subscription disabled", disabled, err)
		}
		for _, d := range list(all.ID) {
			if d.Status == gateway.DeliveryPending {
				t.Fatalf("a disabled subscription's delivery is pending: %+v", d)
			}
		}
		if written, _ := db.PublishEvents(ctx, hookEvent(gateway.EventVMState, "acme", "vm_3", 6)); written {
			t.Fatal("a disabled subscription took an event")
		}
		h, err := db.UpdateWebhook(ctx, "acme", all.ID, func(w *gateway.Webhook) error { w.State = gateway.WebhookActive; return nil })
		if err != nil || h.State != gateway.WebhookActive || h.DisabledReason != "" || !h.FailingSince.IsZero() {
			t.Fatalf("enabled again: %+v, %v", h, err)
		}
		if n, err := db.PurgeDeliveries(ctx, time.Now().Add(time.Hour)); err != nil || n == 0 {
			t.Fatalf("PurgeDeliveries = %d, %v", n, err)
		}
		wantCode(t, db.DeleteWebhook(ctx, "globex", all.ID), gateway.CodeNotFound)
		if err := db.DeleteWebhook(ctx, "acme", all.ID); err != nil {
			t.Fatal(err)
		}
		if p, err := db.ListWebhooks(ctx, "acme", "", 10); err != nil || len(p.Items) != 1 || p.Items[0].ID != exits.ID {
			t.Fatalf("ListWebhooks = %+v, %v", p, err)
		}
	})
}

// TestWebhookLateFirstAttemptDisables: a delivery that fails for good
// disables its subscription even when its first attempt came late in its
// retry window (a loaded node); the failure run starts with the window.
func TestWebhookLateFirstAttemptDisables(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		w, err := db.CreateWebhook(ctx, gateway.Webhook{TenantID: "acme", URL: "https://a.example/dead", Events: []gateway.EventType{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now().UTC().Truncate(time.Microsecond)
		db.now = func() time.Time { return t0 }
		if _, err := db.PublishEvents(ctx, hookEvent(gateway.EventVMState, "acme", "vm_1", 1)); err != nil {
			t.Fatal(err)
		}
		const window = 4 * time.Second
		attempt := func(at time.Time, next time.Time) *gateway.Webhook {
			t.Helper()
			db.now = func() time.Time { return at }
			ds, err := db.ClaimDeliveries(ctx, "node-a", time.Minute, 10)
			if err != nil || len(ds) != 1 {
				t.Fatalf("claim at %s: %v, %v", at.Sub(t0), ds, err)
			}
			disabled, err := db.FinishAttempt(ctx, ds[0].ID, "node-a", Attempt{Err: "webhook unreachable", Next: next, RetryFor: window})
			if err != nil {
				t.Fatal(err)
			}
			return disabled
		}
		// The first attempt comes three seconds late, the last at the
		// window's end.
		if d := attempt(t0.Add(3*time.Second), t0.Add(window)); d != nil {
			t.Fatalf("disabled within the window: %+v", d)
		}
		if d := attempt(t0.Add(window), time.Time{}); d == nil || d.ID != w.ID || d.State != gateway.WebhookDisabled {
			t.Fatalf("the last failure of a whole window: %+v, want the subscription disabled", d)
		}
	})
}

// TestWebhookClaimsDoNotOverlap: nodes claiming at once never take the
// same delivery (on PostgreSQL: FOR UPDATE SKIP LOCKED), and a sequence is
// never given twice to events published at once.
func TestWebhookClaimsDoNotOverlap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		h, err := db.CreateWebhook(ctx, gateway.Webhook{TenantID: "acme", URL: "https://a.example/", Events: []gateway.EventType{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		const vms, perVM = 40, 3
		var wg sync.WaitGroup
		for v := range vms {
			wg.Go(func() {
				for i := range perVM {
					if _, err := db.PublishEvents(ctx, hookEvent(gateway.EventProcessExit, "acme", fmt.Sprintf("vm_%d", v), i)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		var mu sync.Mutex
		seen := map[string]string{}
		for n := range 4 {
			node := fmt.Sprintf("node-%d", n)
			wg.Go(func() {
				for range 20 {
					ds, err := db.ClaimDeliveries(ctx, node, time.Minute, 5)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, d := range ds {
						if other, ok := seen[d.ID]; ok {
							t.Errorf("delivery %s claimed by %s and %s", d.ID, other, node)
						}
						seen[d.ID] = node
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != vms {
			t.Errorf("%d deliveries claimed, want the %d heads", len(seen), vms)
		}
		p, err := db.ListDeliveries(ctx, "acme", h.ID, gateway.DeliveryFilter{Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range p.Items {
			if d.Sequence != int64(i+1) {
				t.Fatalf("sequence %d at %d", d.Sequence, i)
			}
		}
	})
}
