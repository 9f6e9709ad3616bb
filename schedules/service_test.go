package schedules

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// fakeVMs stands in for the vms service: the unit tests need an exec that
// blocks until told to finish, to overlap ticks without timing; the real
// engine's runs are covered by cmd/server/e2e_schedules_test.go.
type fakeVMs struct {
	db    *store.DB // the VMs' records
	mu    sync.Mutex
	ended map[string]chan struct{}
	// elsewhere are VMs another node runs.
	elsewhere map[string]bool
	events    []gateway.VMEvent
	release   chan struct{} // when set, an exec waits for it
	started   chan string
}

func (f *fakeVMs) Usable(ctx context.Context, tenantID, id string) error { return nil }

func (f *fakeVMs) ExecTimeout(d time.Duration) (time.Duration, error) {
	if d > time.Hour {
		return 0, gateway.Errorf(gateway.CodeInvalidArgument, "too long").WithDetail("field", "timeoutMs")
	}
	return d, nil
}

func (f *fakeVMs) CheckCwd(ctx context.Context, tenantID, vmID, cwd string) error {
	if cwd == "/nowhere" {
		return gateway.Errorf(gateway.CodeInvalidArgument, "no such directory").WithDetail("field", "cwd")
	}
	return nil
}

func (f *fakeVMs) Get(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	return f.db.GetVM(ctx, tenantID, id)
}

func (f *fakeVMs) Runs(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.elsewhere[id]
}

func (f *fakeVMs) Exec(ctx context.Context, tenant gateway.Tenant, vmID string, req vms.ExecRequest, _ func(vms.Chunk)) (*vms.ExecResult, error) {
	f.started <- req.Command
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, gateway.Wrap(gateway.CodeUnavailable, ctx.Err(), "cancelled")
		}
	}
	if req.Command == "false" {
		return &vms.ExecResult{ExitCode: 1, Stderr: []byte("no\x00")}, nil
	}
	return &vms.ExecResult{Stdout: []byte(req.Command + "\n")}, nil
}

func (f *fakeVMs) Ended(id string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended[id] == nil {
		f.ended[id] = make(chan struct{})
	}
	return f.ended[id]
}

func (f *fakeVMs) Publish(vmID string, ev gateway.VMEvent) {
	f.mu.Lock()
	f.events = append(f.events, ev)
	f.mu.Unlock()
}

type fixture struct {
	db  *store.DB
	vms *fakeVMs
	svc *Service
	ten gateway.Tenant
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ten, err := db.CreateTenant(ctx, gateway.Tenant{ID: "acme", Name: "acme", Quotas: gateway.Quotas{MaxSchedules: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateVM(ctx, gateway.VM{ID: "vm_a", TenantID: "acme", State: gateway.VMReady}); err != nil {
		t.Fatal(err)
	}
	f := &fakeVMs{db: db, ended: map[string]chan struct{}{}, elsewhere: map[string]bool{}, started: make(chan string, 16)}
	svc := New(Config{}, db, f, nil)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &fixture{db: db, vms: f, svc: svc, ten: ten}
}

// never is a schedule the runner does not fire during a test: the tests
// tick it themselves.
const never = "0 0 1 1 *"

func (fx *fixture) create(t *testing.T, cron string, overlap gateway.OverlapPolicy, command string) gateway.Schedule {
	t.Helper()
	s, err := fx.svc.Create(t.Context(), fx.ten, gateway.Schedule{VMID: "vm_a", Cron: cron, Overlap: overlap, Exec: &gateway.ScheduleExec{Command: command}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (fx *fixture) tick(id string) {
	fx.svc.mu.Lock()
	a := fx.svc.armed[id]
	fx.svc.mu.Unlock()
	fx.svc.tick(a)
}

// waitRuns waits for n recorded runs of a schedule and returns them.
func (fx *fixture) waitRuns(t *testing.T, id string, n int) []gateway.ScheduleRun {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := fx.db.ListRuns(t.Context(), "acme", "vm_a", id, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) >= n {
			return page.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs of %s after 10 s, want %d", len(page.Items), id, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func outcomes(runs []gateway.ScheduleRun) map[gateway.RunOutcome]int {
	out := map[gateway.RunOutcome]int{}
	for _, r := range runs {
		out[r.Outcome]++
	}
	return out
}

func TestParse(t *testing.T) {
	cases := []struct {
		cron, zone, field string
	}{
		{"*/5 * * * *", "", ""},
		{"*/2 * * * * *", "Europe/Paris", ""},
		{"@every 2s", "America/New_York", ""},
		{"@hourly", "UTC", ""},
		{"", "UTC", "cron"},
		{"* * *", "UTC", "cron"},
		{"61 * * * *", "UTC", "cron"},
		{"@every 100ms", "UTC", "cron"},
		{"CRON_TZ=UTC * * * * *", "UTC", "cron"},
		{"* * * * *", "Mars/Olympus", "timezone"},
		{"* * * * *", "UTC extra", "timezone"},
	}
	for _, c := range cases {
		_, err := Parse(c.cron, c.zone)
		if c.field == "" {
			if err != nil {
				t.Errorf("Parse(%q, %q): %v", c.cron, c.zone, err)
			}
			continue
		}
		var ge *gateway.Error
		if gateway.ErrorCode(err) != gateway.CodeInvalidArgument || !asError(err, &ge) || ge.Details["field"] != c.field {
			t.Errorf("Parse(%q, %q) = %v, want invalid_argument on %s", c.cron, c.zone, err, c.field)
		}
	}
}

func TestCreateRefusesBadSchedules(t *testing.T) {
	fx := newFixture(t)
	cases := []struct {
		name  string
		s     gateway.Schedule
		field string
	}{
		{"no action", gateway.Schedule{VMID: "vm_a", Cron: never}, "action"},
		{"both actions", gateway.Schedule{VMID: "vm_a", Cron: never, Exec: &gateway.ScheduleExec{Command: "x"}, Prompt: &gateway.SchedulePrompt{Session: "s"}}, "action"},
		{"prompt without sessions", gateway.Schedule{VMID: "vm_a", Cron: never, Prompt: &gateway.SchedulePrompt{Session: "s"}}, "action.prompt"},
		{"bad overlap", gateway.Schedule{VMID: "vm_a", Cron: never, Overlap: "drop", Exec: &gateway.ScheduleExec{Command: "x"}}, "overlap"},
		{"long timeout", gateway.Schedule{VMID: "vm_a", Cron: never, Exec: &gateway.ScheduleExec{Command: "x", Timeout: 2 * time.Hour}}, "action.exec.timeoutMs"},
		{"bad cwd", gateway.Schedule{VMID: "vm_a", Cron: never, Exec: &gateway.ScheduleExec{Command: "x", Cwd: "/nowhere"}}, "action.exec.cwd"},
		{"bad zone", gateway.Schedule{VMID: "vm_a", Cron: never, Timezone: "Nowhere", Exec: &gateway.ScheduleExec{Command: "x"}}, "timezone"},
	}
	for _, c := range cases {
		_, err := fx.svc.Create(t.Context(), fx.ten, c.s)
		var ge *gateway.Error
		if !asError(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != c.field {
			t.Errorf("%s: %v, want invalid_argument on %s", c.name, err, c.field)
		}
	}
	for range 3 {
		fx.create(t, never, "", "true")
	}
	_, err := fx.svc.Create(t.Context(), fx.ten, gateway.Schedule{VMID: "vm_a", Cron: never, Exec: &gateway.ScheduleExec{Command: "x"}})
	if gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
		t.Errorf("a fourth schedule with maxSchedules 3: %v", err)
	}
}

func TestRunsAreRecordedAndPublished(t *testing.T) {
	fx := newFixture(t)
	// The runner itself ticks this one every second.
	ok := fx.create(t, "@every 1s", "", "echo hi")
	bad := fx.create(t, never, "", "false")
	if ok.Timezone != "UTC" || ok.Overlap != gateway.OverlapSkip {
		t.Errorf("defaults: %+v", ok)
	}
	fx.tick(bad.ID)
	runs := fx.waitRuns(t, ok.ID, 2)
	if r := runs[0]; r.Outcome != gateway.RunSucceeded || r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "echo hi\n" || r.EndedAt.Before(r.StartedAt) {
		t.Errorf("run: %+v", r)
	}
	if r := fx.waitRuns(t, bad.ID, 1)[0]; r.Outcome != gateway.RunFailed || *r.ExitCode != 1 || r.Stderr != "no\uFFFD" {
		t.Errorf("failed run: %+v", r)
	}
	fx.vms.mu.Lock()
	defer fx.vms.mu.Unlock()
	byName := map[string]int{}
	for _, ev := range fx.vms.events {
		if ev.Type != gateway.VMEventScheduleRun || ev.Detail["run"] == "" || ev.Detail["outcome"] == "" {
			t.Errorf("event %+v", ev)
		}
		byName[ev.Name]++
	}
	if byName[ok.ID] < 2 || byName[bad.ID] != 1 {
		t.Errorf("events by schedule: %v", byName)
	}
}

func TestOverlap(t *testing.T) {
	cases := []struct {
		policy gateway.OverlapPolicy
		want   map[gateway.RunOutcome]int
	}{
		// Three ticks while the first run runs: skip records two skipped;
		// queue runs one of them after the first and skips the other.
		{gateway.OverlapSkip, map[gateway.RunOutcome]int{gateway.RunSucceeded: 1, gateway.RunSkipped: 2}},
		{gateway.OverlapQueue, map[gateway.RunOutcome]int{gateway.RunSucceeded: 2, gateway.RunSkipped: 1}},
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			fx := newFixture(t)
			fx.vms.release = make(chan struct{})
			s := fx.create(t, never, c.policy, "sleep")
			fx.tick(s.ID)
			<-fx.vms.started
			fx.tick(s.ID)
			fx.tick(s.ID)
			fx.waitRuns(t, s.ID, c.want[gateway.RunSkipped])
			close(fx.vms.release)
			total := c.want[gateway.RunSkipped] + c.want[gateway.RunSucceeded]
			if got := outcomes(fx.waitRuns(t, s.ID, total)); got[gateway.RunSkipped] != c.want[gateway.RunSkipped] || got[gateway.RunSucceeded] != c.want[gateway.RunSucceeded] {
				t.Errorf("outcomes %v, want %v", got, c.want)
			}
		})
	}
}

func TestSchedulesEndWithTheirVM(t *testing.T) {
	fx := newFixture(t)
	s := fx.create(t, never, "", "true")
	if _, err := fx.db.SetVMState(t.Context(), "vm_a", gateway.VMDisposed, "", ""); err != nil {
		t.Fatal(err)
	}
	fx.vms.Ended("vm_a")
	fx.vms.mu.Lock()
	close(fx.vms.ended["vm_a"])
	fx.vms.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := fx.db.GetSchedule(t.Context(), "acme", "vm_a", s.ID)
		if gateway.ErrorCode(err) == gateway.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule outlived its VM: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fx.svc.mu.Lock()
	defer fx.svc.mu.Unlock()
	if len(fx.svc.armed) != 0 {
		t.Errorf("still armed: %v", fx.svc.armed)
	}
}

func TestArmVMAfterRestart(t *testing.T) {
	fx := newFixture(t)
	s := fx.create(t, never, "", "echo again")
	// A second service over the same store stands for the gateway started
	// again: it arms the VM's stored schedule.
	svc := New(Config{}, fx.db, fx.vms, nil)
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	if err := svc.ArmVM(t.Context(), "vm_a"); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	a := svc.armed[s.ID]
	svc.mu.Unlock()
	if a == nil {
		t.Fatal("not armed")
	}
	svc.tick(a)
	if r := fx.waitRuns(t, s.ID, 1)[0]; r.Stdout != "echo again\n" {
		t.Errorf("run after the restart: %+v", r)
	}
}

// TestSchedulesOfAHibernatedVM: a VM that hibernates keeps its schedules,
// armed on the node that ran it, which a restarted node arms again; once
// another node runs the VM (it woke it there), this node's runner drops
// them and the store keeps them.
func TestSchedulesOfAHibernatedVM(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	s := fx.create(t, never, "", "echo awake")
	if _, err := fx.db.SetVMState(ctx, "vm_a", gateway.VMHibernating, "request", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fx.db.HibernateVM(ctx, "vm_a", "image-1", 1, "", "request"); err != nil {
		t.Fatal(err)
	}
	fx.vms.Ended("vm_a")
	fx.vms.mu.Lock()
	close(fx.vms.ended["vm_a"])
	fx.vms.mu.Unlock()
	armedIn := func(svc *Service) (armed, watched bool) {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return svc.armed[s.ID] != nil, svc.watched["vm_a"]
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		armed, watched := armedIn(fx.svc)
		if !armed {
			t.Fatal("the schedule of a hibernated VM was disarmed")
		}
		if !watched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the end of the hibernated VM is still watched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := fx.db.GetSchedule(ctx, "acme", "vm_a", s.ID); err != nil {
		t.Fatalf("the schedule of a hibernated VM: %v", err)
	}

	// The node starts again (its records name it "n1"): it arms the
	// schedules of the VMs it hibernated, and no other node does.
	if err := fx.db.CreateVM(ctx, gateway.VM{ID: "vm_b", TenantID: "acme", State: gateway.VMReady, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.db.SetVMState(ctx, "vm_b", gateway.VMHibernating, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fx.db.HibernateVM(ctx, "vm_b", "image-2", 1, "", "shutdown"); err != nil {
		t.Fatal(err)
	}
	sb, err := fx.svc.Create(ctx, fx.ten, gateway.Schedule{VMID: "vm_b", Cron: never, Exec: &gateway.ScheduleExec{Command: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]bool{"n1": true, "n2": false} {
		svc := New(Config{NodeID: node}, fx.db, fx.vms, nil)
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		svc.mu.Lock()
		got := svc.armed[sb.ID] != nil
		svc.mu.Unlock()
		svc.Close(context.Background())
		if got != want {
			t.Errorf("node %s armed vm_b's schedule: %v, want %v", node, got, want)
		}
	}

	// Another node woke vm_a: after its next run here, this node drops it.
	if _, err := fx.db.ClaimWake(ctx, "acme", "vm_a", "n2", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fx.db.WokeVM(ctx, "vm_a", "sc_2", "request"); err != nil {
		t.Fatal(err)
	}
	fx.vms.mu.Lock()
	fx.vms.elsewhere["vm_a"] = true
	fx.vms.mu.Unlock()
	fx.tick(s.ID)
	deadline = time.Now().Add(10 * time.Second)
	for armed, _ := armedIn(fx.svc); armed; armed, _ = armedIn(fx.svc) {
		if time.Now().After(deadline) {
			t.Fatal("a VM another node runs is still armed here")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := fx.db.GetSchedule(ctx, "acme", "vm_a", s.ID); err != nil {
		t.Fatalf("the schedule of a VM another node runs: %v", err)
	}
}

func TestCloseCancelsRuns(t *testing.T) {
	fx := newFixture(t)
	fx.vms.release = make(chan struct{}) // never closed: only Close ends the run
	s := fx.create(t, never, "", "sleep")
	fx.tick(s.ID)
	<-fx.vms.started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fx.svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.svc.Create(t.Context(), fx.ten, gateway.Schedule{VMID: "vm_a", Cron: never, Exec: &gateway.ScheduleExec{Command: "x"}}); gateway.ErrorCode(err) != gateway.CodeUnavailable {
		t.Errorf("create after shutdown: %v", err)
	}
}

func asError(err error, target **gateway.Error) bool { return errors.As(err, target) }
