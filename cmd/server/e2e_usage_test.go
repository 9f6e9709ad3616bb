package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestE2EUsage reads a VM's usage on the real engine: its filesystem bytes
// move when the guest writes a file, its memory when a guest process holds
// a large buffer, its CPU time when the guest computes; the same figures
// reach /metrics by tenant; a token needs vm:read; a hibernated VM is
// answered without waking it.
func TestE2EUsage(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	tn, key := e.tenantWithKey(e.uniq("usage"), nil)
	c := e.client(key)
	vm := e.vm(c, client.CreateVMRequest{})
	h := c.VM(vm.ID)

	// usageWhen reads the usage until cond holds: figures are cached for
	// 2 s, and the engine counts files at a write.
	usageWhen := func(t *testing.T, what string, cond func(u *client.VMUsage) bool) *client.VMUsage {
		t.Helper()
		var last *client.VMUsage
		deadline := time.Now().Add(e2eTimeout)
		for {
			u, err := h.Usage(ctxT(t))
			if err != nil {
				t.Fatalf("usage: %v (the last read: %s)", err, usageText(last))
			}
			last = u
			if cond(u) {
				return u
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; the last read: %s", what, usageText(last))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	var base *client.VMUsage
	step(t, "Baseline", func(t *testing.T, ctx context.Context) {
		u, err := h.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Tenant affinity puts the tenant's VM on a sidecar with no other
		// tenant's: its memory and CPU time are its own.
		if u.VMID != vm.ID || u.State != client.VMReady || u.CollectedAt.IsZero() || !u.OwnSidecar || u.MemoryBytes == nil || *u.MemoryBytes <= 0 {
			t.Fatalf("usage of a new VM: %+v", u)
		}
		if u.Processes == nil || u.Handles == nil || u.Limits == nil || u.Limits.Processes == 0 || u.Limits.FilesystemBytes == 0 || u.ImageBytes != nil {
			t.Fatalf("engine figures of a new VM: %+v", u)
		}
		base = u
		t.Logf("baseline: memory %d B, filesystem bytes %s, limits %+v", *u.MemoryBytes, ptrText(u.FilesystemBytes), *u.Limits)
	})

	step(t, "WritesFiles", func(t *testing.T, ctx context.Context) {
		e.exec(c, vm.ID, `node -e "require('fs').writeFileSync('/workspace/big.bin', Buffer.alloc(5 << 20, 1))"`)
		var before uint64
		if base.FilesystemBytes != nil {
			before = *base.FilesystemBytes
		}
		u := usageWhen(t, "the filesystem bytes to grow by the 5 MiB file", func(u *client.VMUsage) bool {
			return u.FilesystemBytes != nil && *u.FilesystemBytes >= before+5<<20 && u.Inodes != nil && *u.Inodes > 0
		})
		t.Logf("after a 5 MiB write: filesystem %d B (was %d), %d inodes", *u.FilesystemBytes, before, *u.Inodes)
	})

	step(t, "AllocatesMemory", func(t *testing.T, ctx context.Context) {
		p, err := h.Spawn(ctx, client.SpawnRequest{Argv: []string{"node", "-e",
			"const b = Buffer.alloc(256 << 20, 1); console.log('held'); setInterval(() => { b[0]++; }, 1000)"}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Signal(ctxT(t), "SIGKILL") }() // even once ctx ran out
		u := usageWhen(t, "the memory to grow by the 256 MiB buffer and the process to run", func(u *client.VMUsage) bool {
			return u.MemoryBytes != nil && *u.MemoryBytes >= *base.MemoryBytes+200<<20 && u.Processes.Running >= 1
		})
		t.Logf("holding 256 MiB: memory %d B (was %d), %d running", *u.MemoryBytes, *base.MemoryBytes, u.Processes.Running)
	})

	step(t, "ComputesCPU", func(t *testing.T, ctx context.Context) {
		// The CPU time is the sidecar's while the VM had it to itself,
		// sampled at each collection: a counter, which never goes back. How
		// much a busy loop adds depends on the machine's load (the suite
		// runs tests side by side), so the growth is logged, not asserted.
		u, err := h.Usage(ctx)
		if err != nil || u.CPUSeconds == nil {
			t.Fatalf("CPU time of a VM with its own sidecar: %+v, %v", u, err)
		}
		before := *u.CPUSeconds
		e.exec(c, vm.ID, `node -e "const end = Date.now() + 3000; while (Date.now() < end);"`)
		time.Sleep(2500 * time.Millisecond) // past the cache
		u, err = h.Usage(ctx)
		if err != nil || u.CPUSeconds == nil || *u.CPUSeconds < before {
			t.Fatalf("CPU time after a busy loop: %s, %v; it was %.2f s", usageText(u), err, before)
		}
		t.Logf("after 3 s of busy loop: CPU %.2f s (was %.2f)", *u.CPUSeconds, before)
	})

	step(t, "Metrics", func(t *testing.T, ctx context.Context) {
		// The metrics pass runs every 10 s; a scrape reads its last result.
		tenant := fmt.Sprintf("tenant=%q", tn.ID)
		eventually(t, e2eTimeout, "the tenant's usage in /metrics", func() bool {
			return e.metric("agentos_gateway_tenant_filesystem_bytes", tenant) >= 5<<20 &&
				e.metric("agentos_gateway_tenant_memory_bytes", tenant) > 0 && e.metric("agentos_gateway_tenant_vms", tenant) == 1
		})
		if n := e.metric("agentos_gateway_usage_pass_seconds"); n <= 0 {
			t.Errorf("usage pass took %v s", n)
		}
	})

	step(t, "Tokens", func(t *testing.T, ctx context.Context) {
		read, err := c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeVMRead}, VM: vm.ID})
		if err != nil {
			t.Fatal(err)
		}
		if u, err := e.client(read.Secret).VM(vm.ID).Usage(ctx); err != nil || u.VMID != vm.ID {
			t.Fatalf("usage with vm:read: %+v, %v", u, err)
		}
		exec, err := c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeExec}, VM: vm.ID})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.client(exec.Secret).VM(vm.ID).Usage(ctx)
		if ce := wantCode(t, err, client.CodePermissionDenied, http.StatusForbidden); ce.Details["scope"] != client.ScopeVMRead {
			t.Errorf("refusal details %v", ce.Details)
		}
	})

	step(t, "UnknownVM", func(t *testing.T, ctx context.Context) {
		_, err := c.VM("vm_nope").Usage(ctx)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
		// Another tenant's VM is not found either.
		_, other := e.tenant(e.uniq("usage-other"), nil)
		_, err = other.VM(vm.ID).Usage(ctx)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})

	step(t, "Hibernated", func(t *testing.T, ctx context.Context) {
		if _, err := h.Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		u, err := h.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if u.State != client.VMHibernated || u.ImageBytes == nil || *u.ImageBytes < 5<<20 || u.MemoryBytes != nil || u.Processes != nil || u.OwnSidecar {
			t.Fatalf("usage of a hibernated VM: %+v", u)
		}
		// Reading it did not wake it.
		time.Sleep(200 * time.Millisecond)
		if got, err := h.Get(ctx); err != nil || got.State != client.VMHibernated {
			t.Fatalf("after reading its usage the VM is %+v, %v", got, err)
		}
		// Nor does an ended VM have a usage.
		if _, err := h.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = h.Usage(ctx)
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})
}

func ptrText[T any](p *T) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

// usageText is a usage read as JSON, for failure messages.
func usageText(u *client.VMUsage) string {
	b, _ := json.Marshal(u)
	return string(b)
}
