package vms_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// TestWriteKeepsMode: a file written over through the files API keeps its
// permission bits, as a write in place would; a new file gets 0644. The
// write goes to a temporary file moved over the old one, which once gave
// every file written over 0644 (the durability run's seed
// 1796639897351578195: a file of mode 0600 from an archive, written over,
// read back 0644).
func TestWriteKeepsMode(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{}, tenant)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := e.svc.Exec(ctx, tenant, vm.ID, vms.ExecRequest{Command: "sh -c 'echo old > /workspace/secret && chmod 600 /workspace/secret'"}, nil); err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	f, err := e.svc.Files(ctx, tenant.ID, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	for _, tc := range []struct {
		path string
		want fs.FileMode
	}{{"/workspace/secret", 0o600}, {"/workspace/new", 0o644}} {
		if _, err := f.WriteFrom(ctx, tc.path, strings.NewReader("new bytes"), false); err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat(ctx, tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fs.FileMode(st.RawMode).Perm(); got != tc.want {
			t.Errorf("%s: mode %v after a write, want %v", tc.path, got, tc.want)
		}
	}
}
