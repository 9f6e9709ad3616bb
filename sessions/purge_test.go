package sessions

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// noVMs is a VMs whose VMs have all ended.
type noVMs struct{}

func (noVMs) AgentHost(context.Context, string, string) (vms.AgentHost, func(), error) {
	return vms.AgentHost{}, nil, gateway.Wrap(gateway.CodeConflict, vms.ErrVMEnded, "the VM is disposed")
}

func (noVMs) Ended(string) <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

// TestPurgeFollowsTenantRetention runs the service's purger over a real
// store: the record of a session whose VM ended is deleted once it is older
// than its tenant's retention, and kept for a tenant that keeps everything.
func TestPurgeFollowsTenantRetention(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tn := range []gateway.Tenant{
		{ID: "brief", Name: "brief", Sessions: gateway.SessionSettings{RetentionDays: 1}},
		{ID: "forever", Name: "forever"},
	} {
		if _, err := db.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		vm := gateway.VM{ID: "vm-" + tn.ID, TenantID: tn.ID, State: gateway.VMReady}
		if err := db.CreateVM(ctx, vm); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SetVMState(ctx, vm.ID, gateway.VMDisposed, "", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateSession(ctx, gateway.Session{ID: "s", TenantID: tn.ID, VMID: vm.ID, Agent: "pi", Cwd: "/"}); err != nil {
			t.Fatal(err)
		}
	}
	// Two days from now, the brief tenant's session is past its retention.
	later := func() time.Time { return time.Now().Add(48 * time.Hour) }
	s := New(Config{PurgeInterval: 10 * time.Millisecond, Now: later}, db, noVMs{})
	defer s.Close(ctx)
	waitFor(t, "the purge", func() bool {
		_, err := s.Get(ctx, "brief", "vm-brief", "s")
		return gateway.ErrorCode(err) == gateway.CodeNotFound
	})
	got, err := s.Get(ctx, "forever", "vm-forever", "s")
	if err != nil || got.State != gateway.SessionClosed {
		t.Fatalf("the session of a tenant without retention: %+v %v", got, err)
	}
}
