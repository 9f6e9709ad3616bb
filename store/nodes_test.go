package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// TestNodeLifeCycle registers nodes, heartbeats them, drains one, lets one
// miss its heartbeats and reaps it: its VMs, and only its, become lost.
func TestNodeLifeCycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		var clock atomic.Int64
		db.now = func() time.Time { return t0.Add(time.Duration(clock.Load())) }
		advance := func(d time.Duration) { clock.Add(int64(d)) }
		const timeout = 10 * time.Second

		for _, id := range []string{"n1", "n2", "n3"} {
			if _, err := db.RegisterNode(ctx, gateway.Node{ID: id, AdvertiseAddr: "http://" + id, SecretCheck: "c"}, timeout); err != nil {
				t.Fatalf("RegisterNode(%s): %v", id, err)
			}
		}
		for _, tc := range []struct {
			name string
			node gateway.Node
			want error
		}{
			{"same id as a live node", gateway.Node{ID: "n1", SecretCheck: "c"}, ErrNodeIDInUse},
			{"another secret", gateway.Node{ID: "n3", SecretCheck: "other"}, ErrClusterSecretMismatch},
			{"no secret", gateway.Node{ID: "n3"}, ErrClusterSecretMismatch},
		} {
			_, err := db.RegisterNode(ctx, tc.node, timeout)
			if db.Dialect() == dialectSQLite {
				// One gateway owns a SQLite store: a restart after a crash
				// finds its own heartbeat fresh and is not refused.
				if err != nil {
					t.Errorf("%s: RegisterNode on SQLite = %v; want nil", tc.name, err)
				}
				continue
			}
			if !errors.Is(err, tc.want) || gateway.ErrorCode(err) != gateway.CodeConflict {
				t.Errorf("%s: RegisterNode = %v; want %v (conflict)", tc.name, err, tc.want)
			}
		}

		mustTenant(t, db, "acme")
		for i, node := range []string{"n1", "n2", "n2", ""} {
			vm := gateway.VM{ID: fmt.Sprintf("vm%d", i), TenantID: "acme", State: gateway.VMReady, Node: node}
			if err := db.CreateVM(ctx, vm); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := db.GetVM(ctx, "acme", "vm1"); err != nil || got.Node != "n2" {
			t.Fatalf("GetVM = %+v, %v; want node n2", got, err)
		}
		byNode, err := db.LiveVMsByNode(ctx)
		if err != nil || byNode["n1"] != 1 || byNode["n2"] != 2 || byNode[""] != 1 {
			t.Fatalf("LiveVMsByNode = %v, %v", byNode, err)
		}

		advance(6 * time.Second)
		for _, id := range []string{"n1", "n3"} {
			n, err := db.Heartbeat(ctx, id, NodeLoad{VMs: 1, Capacity: 64, Sidecars: 1, RSS: 1 << 20})
			if err != nil || n.VMs != 1 || n.RSS != 1<<20 || !n.HeartbeatAt.Equal(t0.Add(6*time.Second)) {
				t.Fatalf("Heartbeat(%s) = %+v, %v", id, n, err)
			}
		}
		drained, err := db.DrainNode(ctx, "n3", t0.Add(time.Minute))
		if err != nil || drained.State != gateway.NodeDraining {
			t.Fatalf("DrainNode = %+v, %v", drained, err)
		}
		if again, err := db.DrainNode(ctx, "n3", t0.Add(time.Hour)); err != nil || !again.DrainDeadline.Equal(t0.Add(time.Minute)) {
			t.Fatalf("DrainNode again = %+v, %v; want the first deadline kept", again, err)
		}
		if _, err := db.DrainNode(ctx, "nope", t0); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Fatalf("DrainNode(missing) = %v; want not_found", err)
		}

		// n2 last heartbeat 11 s ago: dead; the others are alive.
		advance(5 * time.Second)
		if reaped, err := db.ReapDeadNodes(ctx, "n2", timeout); err != nil || len(reaped) != 0 {
			t.Fatalf("ReapDeadNodes by n2 itself = %+v, %v; want nothing", reaped, err)
		}
		reaped, err := db.ReapDeadNodes(ctx, "n1", timeout)
		if err != nil || len(reaped) != 1 || reaped[0].Node != "n2" || !slices.Equal(sorted(reaped[0].VMs), []string{"vm1", "vm2"}) {
			t.Fatalf("ReapDeadNodes = %+v, %v; want n2 with vm1, vm2", reaped, err)
		}
		if again, err := db.ReapDeadNodes(ctx, "n3", timeout); err != nil || len(again) != 0 {
			t.Fatalf("ReapDeadNodes again = %+v, %v; want nothing", again, err)
		}
		lost, _ := db.GetVM(ctx, "acme", "vm1")
		if lost.State != gateway.VMLost || lost.Reason == "" {
			t.Errorf("vm1 = %s %q; want lost with a reason", lost.State, lost.Reason)
		}
		if kept, _ := db.GetVM(ctx, "acme", "vm0"); kept.State != gateway.VMReady {
			t.Errorf("vm0 (n1) = %s; want ready", kept.State)
		}
		if _, err := db.Heartbeat(ctx, "n2", NodeLoad{}); !errors.Is(err, ErrNodeDead) {
			t.Errorf("Heartbeat(dead n2) = %v; want ErrNodeDead", err)
		}
		nodes, err := db.ListNodes(ctx)
		if err != nil || len(nodes) < 3 || nodes[0].ID != "n1" || nodes[1].State != gateway.NodeDead || nodes[2].State != gateway.NodeDraining {
			t.Fatalf("ListNodes = %+v, %v", nodes, err)
		}

		// n2 comes back: it marks its own VMs (and the ones without a node)
		// lost, nobody else's.
		if _, err := db.RegisterNode(ctx, gateway.Node{ID: "n2", AdvertiseAddr: "http://n2", SecretCheck: "c"}, timeout); err != nil {
			t.Fatalf("RegisterNode(n2 again): %v", err)
		}
		ids, err := db.MarkNodeVMsLost(ctx, "n2", "restarted")
		if err != nil || !slices.Equal(ids, []string{"vm3"}) {
			t.Fatalf("MarkNodeVMsLost = %v, %v; want [vm3] (no node)", ids, err)
		}
		if err := db.LeaveNode(ctx, "n1", "drained"); err != nil {
			t.Fatal(err)
		}
		if n, _ := db.GetNode(ctx, "n1"); n.State != gateway.NodeDead || n.Reason != "drained" {
			t.Errorf("n1 after LeaveNode = %+v", n)
		}
		if vm, _ := db.GetVM(ctx, "acme", "vm0"); vm.State != gateway.VMLost {
			t.Errorf("vm0 after its node left = %s; want lost", vm.State)
		}
	})
}

// TestCreateVMWithinQuotaConcurrent runs creates from several connections
// at once at a tenant's quota: exactly the quota is admitted.
func TestCreateVMWithinQuotaConcurrent(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		// Three openers stand for three gateways sharing the database.
		dbs := []*DB{openTest(t, dsn), openTest(t, dsn), openTest(t, dsn)}
		mustTenant(t, dbs[0], "acme")
		const quota, tries = 3, 12
		var (
			wg        sync.WaitGroup
			admitted  atomic.Int32
			exhausted atomic.Int32
		)
		for i := range tries {
			wg.Go(func() {
				err := dbs[i%len(dbs)].CreateVMWithinQuota(ctx, gateway.VM{ID: fmt.Sprintf("vm%d", i), TenantID: "acme"}, quota)
				switch gateway.ErrorCode(err) {
				case "":
					admitted.Add(1)
				case gateway.CodeResourceExhausted:
					exhausted.Add(1)
				default:
					t.Errorf("CreateVMWithinQuota: %v", err)
				}
			})
		}
		wg.Wait()
		if admitted.Load() != quota || exhausted.Load() != tries-quota {
			t.Fatalf("admitted %d, refused %d; want %d and %d", admitted.Load(), exhausted.Load(), quota, tries-quota)
		}
		if n, _ := dbs[0].CountLiveVMs(ctx, "acme"); n != quota {
			t.Fatalf("CountLiveVMs = %d; want %d", n, quota)
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
