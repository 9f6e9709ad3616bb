package vms_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// TestHibernationKeepsFiles is issue 33's sequence through the service: a
// file written through the files API, then hibernate and a waking call,
// ten times over, with each kind of call that wakes the VM. The guest's ls
// was the call that lost it: the engine hid every file of a directory that
// a guest command copied up from the snapshot the VM woke from, and the
// next capture left it out. The engine's own base files (/usr/bin/env,
// which a stat of /usr/bin hid) must come through as well.
func TestHibernationKeepsFiles(t *testing.T) {
	tenant := gateway.Tenant{ID: "t1", Name: "t1"}
	e := newEnv(t, vms.Config{Images: images.DirBlobs{Dir: t.TempDir()}}, tenant)
	exec := func(ctx context.Context, t *testing.T, vmID, cmd string) string {
		t.Helper()
		r, err := e.svc.Exec(ctx, tenant, vmID, vms.ExecRequest{Command: cmd}, nil)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", cmd, r, err)
		}
		return string(r.Stdout)
	}
	read := func(ctx context.Context, t *testing.T, vmID, p string) (string, error) {
		t.Helper()
		f, err := e.svc.Files(ctx, tenant.ID, vmID)
		if err != nil {
			return "", err
		}
		defer f.Release()
		var b bytes.Buffer
		_, err = f.ReadTo(ctx, p, &b)
		return b.String(), err
	}
	wakes := []struct {
		name string
		wake func(ctx context.Context, t *testing.T, vmID string)
	}{
		{"ls of the directory", func(ctx context.Context, t *testing.T, vmID string) {
			if got := exec(ctx, t, vmID, "ls /workspace"); !strings.Contains(got, "keep.txt") {
				t.Fatalf("ls /workspace: %q", got)
			}
		}},
		{"stat of the directories", func(ctx context.Context, t *testing.T, vmID string) {
			exec(ctx, t, vmID, "stat /workspace /usr/bin /etc")
		}},
		{"files API read", func(ctx context.Context, t *testing.T, vmID string) {
			if _, err := read(ctx, t, vmID, "/workspace/keep.txt"); err != nil {
				t.Fatal(err)
			}
		}},
		{"explicit wake", func(ctx context.Context, t *testing.T, vmID string) {
			if _, err := e.svc.Wake(ctx, tenant.ID, vmID, vms.ReasonRequest); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, w := range wakes {
		t.Run(w.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			vm, err := e.svc.Create(ctx, tenant, gateway.VMSpec{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := e.svc.Files(ctx, tenant.ID, vm.ID)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteFrom(ctx, "/workspace/keep.txt", strings.NewReader("survives"), false)
			f.Release()
			if err != nil {
				t.Fatal(err)
			}
			// The base's own entries keep their kind and mode: a symlink
			// (/var/lock), a setgid directory (the home), a sticky one.
			const special = "ls -ld /var/lock /var/run /home/agentos /tmp /var/tmp"
			fresh := exec(ctx, t, vm.ID, special)
			// Nothing but the waking call between two hibernations: a
			// check of the files between them (a read through the files
			// API) hid the loss on the old engine path.
			for cycle := 1; cycle <= 10; cycle++ {
				if _, err := e.svc.Hibernate(ctx, tenant.ID, vm.ID, vms.ReasonRequest); err != nil {
					t.Fatalf("cycle %d: hibernate: %v", cycle, err)
				}
				w.wake(ctx, t, vm.ID)
			}
			if _, err := e.svc.Hibernate(ctx, tenant.ID, vm.ID, vms.ReasonRequest); err != nil {
				t.Fatal(err)
			}
			if got, err := read(ctx, t, vm.ID, "/workspace/keep.txt"); err != nil || got != "survives" {
				t.Fatalf("after 10 cycles /workspace/keep.txt reads %q, %v", got, err)
			}
			if got := exec(ctx, t, vm.ID, "ls /workspace /usr/bin"); !strings.Contains(got, "keep.txt") || !strings.Contains(got, "env") {
				t.Fatalf("after 10 cycles the guest lists %q", got)
			}
			if got := exec(ctx, t, vm.ID, special); stripTimes(got) != stripTimes(fresh) {
				t.Errorf("after 10 cycles:\n%s\nfresh:\n%s", got, fresh)
			}
			if _, _, err := e.svc.Delete(ctx, tenant.ID, vm.ID); err != nil {
				t.Error(fmt.Errorf("delete: %w", err))
			}
		})
	}
}

// stripTimes keeps an ls -l line's mode, links, owner, size and name.
func stripTimes(ls string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(ls), "\n") {
		f := strings.Fields(l)
		if len(f) > 8 {
			f = append(f[:5], f[8:]...)
		}
		out = append(out, strings.Join(f, " "))
	}
	return strings.Join(out, "\n")
}
