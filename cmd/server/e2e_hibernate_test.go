package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// hibernated is a VM's content before it hibernates, to find byte for byte
// after it wakes: a small file written by a command, and a file larger than
// a create frame carries (written once the VM runs again).
type hibernated struct {
	small string
	big   []byte
}

// fill writes the files the test expects back after a wake.
func fill(t *testing.T, c *client.Client, vm string) hibernated {
	t.Helper()
	ctx := ctxT(t)
	h := hibernated{small: "kept-" + vm, big: make([]byte, 3<<20)}
	_, _ = rand.Read(h.big)
	if res, err := c.VM(vm).Exec(ctx, client.ExecRequest{Command: "mkdir -p /workspace/data && printf %s " + h.small + " > /workspace/data/small.txt"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write small file: %+v %v", res, err)
	}
	if _, err := c.VM(vm).WriteFile(ctx, "/workspace/data/big.bin", bytes.NewReader(h.big), client.WriteFileOptions{Mkdirs: true}); err != nil {
		t.Fatal(err)
	}
	return h
}

// check reads the files back through calls that need the VM running, so
// that the first of them wakes it.
func (h hibernated) check(t *testing.T, c *client.Client, vm string) {
	t.Helper()
	ctx := ctxT(t)
	res, err := c.VM(vm).Exec(ctx, client.ExecRequest{Command: "cat /workspace/data/small.txt"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != h.small {
		t.Fatalf("small file after the wake: %+v %v", res, err)
	}
	body, err := c.VM(vm).ReadFile(ctx, "/workspace/data/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	got, err := io.ReadAll(body)
	if err != nil || !bytes.Equal(got, h.big) {
		t.Fatalf("big file after the wake: %d bytes (want %d), %v", len(got), len(h.big), err)
	}
}

// mustHibernated checks a VM's record while it hibernates.
func mustHibernated(t *testing.T, c *client.Client, vm, reason string) *client.VM {
	t.Helper()
	got, err := c.VM(vm).Get(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got.State != client.VMHibernated || got.Reason != reason || got.HibernatedAt == nil || got.SidecarID != "" {
		t.Fatalf("hibernated record: %+v", got)
	}
	return got
}

// TestE2EHibernateWake is hibernation on one gateway with SQLite: a VM
// hibernates on request and when idle, keeps its files, labels and id, wakes
// on the first call that needs it (once for many concurrent calls) or on
// request, survives a graceful restart of the gateway, and is deleted with
// its image.
func TestE2EHibernateWake(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	e := newE2E(t, "--data-dir", dataDir, "--on-shutdown=hibernate")
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{Labels: map[string]string{"app": "hib"}})
	h := fill(t, c, vm.ID)

	step(t, "HibernateAndWakeOnUse", func(t *testing.T, ctx context.Context) {
		out, err := c.VM(vm.ID).Hibernate(ctx)
		if err != nil || out.State != client.VMHibernated {
			t.Fatalf("hibernate: %+v %v", out, err)
		}
		mustHibernated(t, c, vm.ID, "request")
		// Hibernating again answers the record as it is.
		if again, err := c.VM(vm.ID).Hibernate(ctx); err != nil || again.State != client.VMHibernated {
			t.Fatalf("hibernate again: %+v %v", again, err)
		}
		// Lists and selectors include it; reading them wakes nothing.
		l, err := c.ListVMs(ctx, client.ListVMsOptions{Labels: map[string]string{"app": "hib"}})
		if err != nil || len(l.Items) != 1 || l.Items[0].State != client.VMHibernated {
			t.Fatalf("list: %+v %v", l, err)
		}
		mustHibernated(t, c, vm.ID, "request")
		h.check(t, c, vm.ID)
		got, err := c.VM(vm.ID).Get(ctx)
		if err != nil || got.State != client.VMReady || got.ID != vm.ID || got.HibernatedAt != nil || got.Labels["app"] != "hib" {
			t.Fatalf("after the wake: %+v %v", got, err)
		}
	})

	step(t, "ConcurrentCallsShareOneWake", func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var failed atomic.Int32
		for i := range 4 {
			wg.Go(func() {
				res, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: fmt.Sprintf("echo call-%d", i)})
				if err != nil || strings.TrimSpace(string(res.Stdout)) != fmt.Sprintf("call-%d", i) {
					t.Errorf("exec %d during the wake: %+v %v", i, res, err)
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			return
		}
		// One wake: the VM's events since it woke start with one ready.
		evs, err := c.VM(vm.ID).Events(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first, err := evs.Next(ctx)
		evs.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ev, ok := first.(*client.VMEvent); !ok || ev.State != client.VMReady || ev.Reason != "request" {
			t.Fatalf("first event after the wake: %#v", first)
		}
		h.check(t, c, vm.ID)
	})

	step(t, "ExplicitWake", func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		woke, err := c.VM(vm.ID).Wake(ctx)
		if err != nil || woke.State != client.VMReady || woke.SidecarID == "" {
			t.Fatalf("wake: %+v %v", woke, err)
		}
		if again, err := c.VM(vm.ID).Wake(ctx); err != nil || again.State != client.VMReady {
			t.Fatalf("wake a running VM: %+v %v", again, err)
		}
		h.check(t, c, vm.ID)
	})

	// A VM of its own runs a schedule, so that its runs keep no other VM of
	// the test awake.
	var sv *client.VM
	var sched *client.Schedule
	ranSince := func(t *testing.T, c *client.Client, since time.Time) {
		t.Helper()
		// On a timeout the runs seen and the VM's record say why.
		var seen []string
		deadline := time.Now().Add(90 * time.Second)
		for {
			// Runs are listed oldest first and the last 100 kept: a page
			// of 100 holds them all (the default page of 50 stops showing
			// new runs after a minute and a half of @every 2s).
			runs, err := c.VM(sv.ID).Schedule(sched.ID).ListRuns(ctxT(t), client.ListOptions{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			seen = seen[:0]
			for _, r := range runs.Items {
				if r.StartedAt.After(since) && r.Outcome == "succeeded" && r.Stdout == "tick\n" {
					return
				}
				seen = append(seen, fmt.Sprintf("%s %s %q %s", r.StartedAt.Format(time.StampMilli), r.Outcome, r.Stdout, r.Error))
			}
			if time.Now().After(deadline) {
				got, err := c.VM(sv.ID).Get(ctxT(t))
				t.Fatalf("no run of the schedule since %s; the runs:\n%s\nthe VM: %+v %v\nthe log:\n%s",
					since.Format(time.StampMilli), strings.Join(seen, "\n"), got, err, linesWith(e.gw.logs.String(), sv.ID, "schedul"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// This step, and the next two, wait a minute or more for a background job
	// (a run, the idle reaper) besides their calls.
	stepFor(t, "SchedulesWakeIt", 2*e2eTimeout, func(t *testing.T, ctx context.Context) {
		sv = e.vm(c, client.CreateVMRequest{Labels: map[string]string{"role": "scheduled"}})
		var err error
		sched, err = c.VM(sv.ID).CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 2s", Exec: &client.ExecRequest{Command: "echo tick"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.VM(sv.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		ranSince(t, c, time.Now())
		if got, err := c.VM(sv.ID).Get(ctx); err != nil || got.State != client.VMReady {
			t.Fatalf("the VM after its schedule ran: %+v %v", got, err)
		}
	})

	stepFor(t, "PatchWithoutWaking", 2*e2eTimeout, func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		gold, dispose := "gold", "dispose"
		got, err := c.VM(vm.ID).Update(ctx, client.UpdateVMRequest{Labels: map[string]*string{"app": nil, "tier": &gold}, OnIdle: &dispose})
		if err != nil || got.State != client.VMHibernated || len(got.Labels) != 1 || got.Labels["tier"] != "gold" || got.OnIdle != "dispose" {
			t.Fatalf("patch a hibernated VM: %+v %v", got, err)
		}
		for _, tc := range []struct {
			name, value string
			want        int
		}{{"tier", "gold", 1}, {"app", "hib", 0}} {
			l, err := c.ListVMs(ctx, client.ListVMsOptions{Labels: map[string]string{tc.name: tc.value}})
			if err != nil || len(l.Items) != tc.want {
				t.Fatalf("list by %s=%s after the patch: %+v %v", tc.name, tc.value, l, err)
			}
		}
		resp, body := e.send("PATCH", "/v1/vms/"+vm.ID, testAdminKey, strings.NewReader(`{"state":"ready"}`), map[string]string{"Content-Type": "application/merge-patch+json"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "state") {
			t.Fatalf("patch an unknown field: %d %s", resp.StatusCode, body)
		}
		// A running VM takes a new idle timeout at once.
		h.check(t, c, vm.ID)
		one, hibernate := time.Second, "hibernate"
		if _, err := c.VM(vm.ID).Update(ctx, client.UpdateVMRequest{IdleTimeout: &one, OnIdle: &hibernate}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the VM to hibernate once idle", func() bool {
			got, err := c.VM(vm.ID).Get(ctxT(t))
			return err == nil && got.State == client.VMHibernated
		})
		mustHibernated(t, c, vm.ID, "idle")
		never := time.Duration(0)
		if got, err := c.VM(vm.ID).Update(ctx, client.UpdateVMRequest{IdleTimeout: &never}); err != nil || got.IdleTimeoutSeconds != 0 || got.State != client.VMHibernated {
			t.Fatalf("patch the idle timeout off: %+v %v", got, err)
		}
	})

	step(t, "IdleHibernates", func(t *testing.T, _ context.Context) {
		idle := e.vm(c, client.CreateVMRequest{IdleTimeout: 2 * time.Second})
		if idle.OnIdle != "" {
			t.Fatalf("onIdle %q, want the gateway's default", idle.OnIdle)
		}
		eventually(t, 60*time.Second, "the idle VM to hibernate", func() bool {
			got, err := c.VM(idle.ID).Get(ctxT(t))
			return err == nil && got.State == client.VMHibernated
		})
		mustHibernated(t, c, idle.ID, "idle")
		if out := e.exec(c, idle.ID, "echo awake"); out != "awake\n" {
			t.Fatalf("exec after idle hibernation: %q", out)
		}
		disposed := e.vm(c, client.CreateVMRequest{IdleTimeout: 2 * time.Second, OnIdle: "dispose"})
		eventually(t, 60*time.Second, "the idle VM to be disposed", func() bool {
			got, err := c.VM(disposed.ID).Get(ctxT(t))
			return err == nil && got.State == client.VMDisposed
		})
	})

	stepFor(t, "SurvivesRestart", 4*e2eTimeout, func(t *testing.T, ctx context.Context) {
		// Running at the stop: the stop hibernates it.
		h.check(t, c, vm.ID)
		e.gw.stop(t)
		mustClosed(t, e.gw.URL)
		// The test's, not this step's: the steps after this one use it.
		gw := startGateway(e.t, dataDir)
		e.gw = gw
		c2 := mustClient(t, gw.URL, testAdminKey, client.WithHTTPClient(e.hc))
		mustHibernated(t, c2, vm.ID, "shutdown")
		h.check(t, c2, vm.ID)
		// The schedule of the VM hibernated at the stop is armed again:
		// its runs wake it.
		ranSince(t, c2, time.Now())
		c = c2
	})

	step(t, "BadCalls", func(t *testing.T, ctx context.Context) {
		for _, tc := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/v1/vms/" + vm.ID + "/hibernate", http.StatusMethodNotAllowed},
			{"GET", "/v1/vms/" + vm.ID + "/wake", http.StatusMethodNotAllowed},
			{"POST", "/v1/vms/vm_00000000000000000000/hibernate", http.StatusNotFound},
			{"POST", "/v1/vms/vm_00000000000000000000/wake", http.StatusNotFound},
		} {
			resp, body := e.send(tc.method, tc.path, testAdminKey, nil, nil)
			if resp.StatusCode != tc.want || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s = %d %s, want %d problem+json", tc.method, tc.path, resp.StatusCode, body, tc.want)
			}
		}
		resp, body := e.send("POST", "/v1/vms", testAdminKey, strings.NewReader(`{"onIdle":"sleep"}`), map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "onIdle") {
			t.Errorf("onIdle sleep: %d %s", resp.StatusCode, body)
		}
	})

	step(t, "DeleteHibernated", func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		images := func() int {
			entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
			if err != nil {
				t.Fatal(err)
			}
			return len(entries)
		}
		before := images()
		if out, err := c.VM(vm.ID).Delete(ctx); err != nil || out != nil {
			t.Fatalf("delete a hibernated VM: %+v %v", out, err)
		}
		_, err := c.VM(vm.ID).Get(ctx)
		wantCode(t, err, "not_found", http.StatusNotFound)
		if after := images(); after != before-1 {
			t.Fatalf("images: %d before the delete, %d after", before, after)
		}
	})
}

// mustClosed checks that nothing listens at base any more.
func mustClosed(t *testing.T, base string) {
	t.Helper()
	if resp, err := http.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("%s still answers after the stop", base)
	}
}

// TestE2EHibernateCluster is hibernation on two real nodes sharing
// PostgreSQL: a VM hibernated on one node wakes through the other with its
// files; a node's SIGTERM, and its drain, hibernate its VMs, which then wake
// on the node still running: a rolling restart loses no VM and no file.
// A token revoked on one node is refused on the other at once.
func TestE2EHibernateCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs two gateway binaries")
	}
	cl := startCluster(t, 2, "--on-shutdown=hibernate")
	n1, n2 := cl.nodes[0], cl.nodes[1]

	// A token minted through n1 works through n2, and its revocation
	// through n1 is seen by n2 at once (the store is shared).
	tokVM := n1.e.vm(n1.c, client.CreateVMRequest{})
	within(t, "a token across the nodes", e2eTimeout, func(ctx context.Context) {
		tok, err := n1.c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeVMRead}, VM: tokVM.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := n2.e.client(tok.Secret).VM(tokVM.ID).Get(ctx); err != nil || got.ID != tokVM.ID {
			t.Fatalf("the token through n2: %+v %v", got, err)
		}
		if err := n1.c.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		_, err = n2.e.client(tok.Secret).VM(tokVM.ID).Get(ctx)
		wantCode(t, err, client.CodeUnauthenticated, http.StatusUnauthorized)
		if _, err := n1.c.VM(tokVM.ID).Delete(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// A VM on n1, hibernated there, wakes through n2 on n2.
	var vm *client.VM
	for tries := 0; ; tries++ {
		vm = n1.e.vm(n1.c, client.CreateVMRequest{Labels: map[string]string{"app": "roll"}})
		if vm.Node == "n1" {
			break
		}
		// Least-loaded placement put it on n2: the next goes to n1.
		if tries == 3 {
			t.Fatalf("four creates through n1 went to n2")
		}
	}
	h := fill(t, n1.c, vm.ID)
	if _, err := n2.c.VM(vm.ID).Hibernate(ctxT(t)); err != nil {
		t.Fatalf("hibernate through n2: %v", err)
	}
	mustHibernated(t, n1.c, vm.ID, "request")
	h.check(t, n2.c, vm.ID)
	if got, err := n1.c.VM(vm.ID).Get(ctxT(t)); err != nil || got.State != client.VMReady || got.Node != "n2" {
		t.Fatalf("after the wake through n2: %+v %v", got, err)
	}

	// n2 stops (SIGTERM): its VM hibernates and wakes on n1.
	if err := n2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n2.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("n2 after SIGTERM: %v\n%s", err, n2.logs.String())
	}
	mustHibernated(t, n1.c, vm.ID, "shutdown")
	h.check(t, n1.c, vm.ID)
	if got, err := n1.c.VM(vm.ID).Get(ctxT(t)); err != nil || got.State != client.VMReady || got.Node != "n1" {
		t.Fatalf("after n2 stopped: %+v %v", got, err)
	}
	// n2 comes back, and wakes the VM when asked through it.
	n2.start(t, cl.bin, cl.dsn)
	if _, err := n2.c.VM(vm.ID).Hibernate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	h.check(t, n2.c, vm.ID)
	if got, err := n1.c.VM(vm.ID).Get(ctxT(t)); err != nil || got.Node != "n2" {
		t.Fatalf("after the wake through the restarted n2: %+v %v", got, err)
	}

	// A drain of n2 hibernates its VM at once, and n2 leaves cleanly
	// without waiting for its deadline; the VM wakes on n1.
	resp, b := n1.e.send("POST", "/v1/nodes/n2/drain?deadlineSeconds=600", testAdminKey, nil, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain n2: %d %s", resp.StatusCode, b)
	}
	if err := n2.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("n2 after its drain: %v\n%s", err, n2.logs.String())
	}
	mustHibernated(t, n1.c, vm.ID, "drain")
	h.check(t, n1.c, vm.ID)
}

// TestE2EHibernatedRetention: a VM hibernated for longer than
// --hibernated-retention is deleted with its image.
func TestE2EHibernatedRetention(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	// --vm-retention sets how often the purge runs: a tenth of it.
	e := newE2E(t, "--data-dir", dataDir, "--vm-retention=10s", "--hibernated-retention=2s")
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	if _, err := c.VM(vm.ID).Hibernate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	images := func() []os.DirEntry {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "snapshots"))
		return entries
	}
	if len(images()) != 1 {
		t.Fatalf("images after the hibernation: %v", images())
	}
	eventually(t, 30*time.Second, "the hibernated VM to be deleted", func() bool {
		_, err := c.VM(vm.ID).Get(ctxT(t))
		return client.IsCode(err, client.CodeNotFound)
	})
	eventually(t, 10*time.Second, "its image to be removed", func() bool { return len(images()) == 0 })
}

// linesWith is the lines of a log that hold any of words.
func linesWith(log string, words ...string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		for _, w := range words {
			if strings.Contains(line, w) {
				b.WriteString(line)
				break
			}
		}
	}
	return b.String()
}
