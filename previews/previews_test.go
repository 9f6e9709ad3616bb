package previews_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/previews"
	"github.com/agentos-gateway/agentos-gateway/store"
)

// recordVMs answers for VMs from their store records, as the vms service
// does for the VMs it does not run: the service itself needs a sidecar,
// and these tests are about what previews make of a VM's state.
type recordVMs struct{ db *store.DB }

func (v recordVMs) Get(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	return v.db.GetVM(ctx, tenantID, id)
}

func (v recordVMs) Usable(ctx context.Context, tenantID, id string) error {
	vm, err := v.db.GetVM(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if vm.State != gateway.VMReady {
		return gateway.Errorf(gateway.CodeConflict, "the VM is %s", vm.State)
	}
	return nil
}

func TestService(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.CreateTenant(ctx, gateway.Tenant{ID: "acme", Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"vm_a", "vm_b"} {
		if err := db.CreateVM(ctx, gateway.VM{ID: id, TenantID: "acme", State: gateway.VMReady}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	svc := previews.New(previews.Config{MaxPerVM: 2, Now: func() time.Time { return now }}, db, recordVMs{db})

	for _, c := range []struct {
		port  int
		ttl   time.Duration
		field string
	}{{0, 0, "port"}, {65536, 0, "port"}, {80, -time.Second, "ttlSeconds"}, {80, gateway.MaxPreviewTTL + time.Second, "ttlSeconds"}} {
		_, _, err := svc.Create(ctx, "acme", "vm_a", c.port, c.ttl)
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != c.field {
			t.Errorf("Create(port %d, ttl %v): %v, want invalid %s", c.port, c.ttl, err, c.field)
		}
	}

	p, token, err := svc.Create(ctx, "acme", "vm_a", 8080, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := svc.Resolve(ctx, token); err != nil || got.ID != p.ID || got.Port != 8080 {
		t.Fatalf("Resolve: %+v %v", got, err)
	}
	if _, _, err := svc.Create(ctx, "acme", "vm_a", 8081, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Create(ctx, "acme", "vm_a", 8082, 0); gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
		t.Errorf("Create over the bound: %v", err)
	}

	// At its expiry the token opens nothing, as an unknown one.
	now = p.ExpiresAt
	if _, err := svc.Resolve(ctx, token); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Errorf("Resolve at expiry: %v", err)
	}
	if _, err := svc.Get(ctx, "acme", "vm_a", p.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Errorf("Get at expiry: %v", err)
	}

	// A VM that ended takes its previews with it.
	q, tokenB, err := svc.Create(ctx, "acme", "vm_b", 3000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetVMState(ctx, "vm_b", gateway.VMDisposed, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Resolve(ctx, tokenB); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Errorf("Resolve after the VM ended: %v", err)
	}
	if list, err := svc.List(ctx, "acme", "vm_b"); err != nil || len(list) != 0 {
		t.Errorf("List after the VM ended: %+v %v (preview %s)", list, err, q.ID)
	}
	if _, _, err := svc.Create(ctx, "acme", "vm_b", 3000, 0); gateway.ErrorCode(err) != gateway.CodeConflict {
		t.Errorf("Create on an ended VM: %v", err)
	}
	if _, _, err := svc.Create(ctx, "globex", "vm_a", 3000, 0); gateway.ErrorCode(err) != gateway.CodeNotFound {
		t.Errorf("Create on another tenant's VM: %v", err)
	}
}
