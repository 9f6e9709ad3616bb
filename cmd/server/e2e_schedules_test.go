package main

// Cron schedules, end to end: real gateway, real sidecar.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// runsOf returns the recorded runs of a schedule.
func runsOf(t *testing.T, s *client.ScheduleHandle) []client.ScheduleRun {
	t.Helper()
	var out []client.ScheduleRun
	for r, err := range s.Runs(ctxT(t)) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestE2ESchedules: a schedule every 2 s runs echo and its runs are listed
// with exit codes and output; a sleep longer than its period is skipped on
// overlap; another tenant gets 404 on every schedule route; bad input is
// 400 naming the field; deleting the VM deletes its schedules.
func TestE2ESchedules(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	_, keyA := e.tenantWithKey("sched-a", nil)
	ca := e.client(keyA)
	_, keyB := e.tenantWithKey("sched-b", nil)
	cb := e.client(keyB)
	vm := e.vm(ca, client.CreateVMRequest{})
	h := ca.VM(vm.ID)

	echo, err := h.CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 2s", Exec: &client.ExecRequest{Command: "echo tick"}})
	if err != nil {
		t.Fatal(err)
	}
	if echo.Timezone != "UTC" || echo.Overlap != client.OverlapSkip || echo.Action.Exec == nil || echo.Action.Exec.Command != "echo tick" {
		t.Errorf("created %+v", echo)
	}
	sleepy, err := h.CreateSchedule(ctx, client.ScheduleRequest{Cron: "* * * * * *", Timezone: "Europe/Paris",
		Exec: &client.ExecRequest{Command: "sleep", Args: []string{"5"}}})
	if err != nil {
		t.Fatal(err)
	}

	// A tick that comes while the last run still runs is skipped (the
	// default overlap policy): on a loaded machine an echo can take over
	// the 2 s between ticks, so a skipped run is no failure; every run that
	// ran must have succeeded.
	succeeded := func(rs []client.ScheduleRun) (n int) {
		for _, r := range rs {
			if r.Outcome == client.RunSucceeded {
				n++
			}
		}
		return n
	}
	eventually(t, e2eTimeout, "two runs of echo", func() bool { return succeeded(runsOf(t, h.Schedule(echo.ID))) >= 2 })
	for _, r := range runsOf(t, h.Schedule(echo.ID)) {
		if r.Outcome == client.RunSkipped && r.ExitCode == nil && r.EndedAt.Equal(r.StartedAt) {
			continue
		}
		if r.Outcome != client.RunSucceeded || r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "tick\n" || r.EndedAt.Before(r.StartedAt) {
			t.Errorf("echo run %+v", r)
		}
	}
	eventually(t, e2eTimeout, "a skipped run of sleep", func() bool {
		for _, r := range runsOf(t, h.Schedule(sleepy.ID)) {
			if r.Outcome == client.RunSkipped && r.ExitCode == nil {
				return true
			}
		}
		return false
	})
	// Each run is also a schedule_run event on the VM's stream (each event
	// checked against the spec by the e2e transport).
	events, cancelEvents := context.WithTimeout(ctx, e2eTimeout)
	for ev, err := range h.FollowEvents(events) {
		if err != nil {
			t.Fatalf("vm events: %v", err)
		}
		if v, ok := ev.(*client.VMEvent); ok && v.Type == client.VMEventScheduleRun && v.Name == echo.ID && v.Detail["outcome"] != string(client.RunSkipped) {
			if v.Detail["outcome"] != string(client.RunSucceeded) || v.Detail["exitCode"] != "0" || v.Detail["run"] == "" {
				t.Errorf("schedule_run event %+v", v)
			}
			break
		}
	}
	cancelEvents()
	list, err := h.ListSchedules(ctx, client.ListOptions{})
	if err != nil || len(list.Items) != 2 || list.Items[0].ID != echo.ID {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Another tenant: 404 on every route, and nothing changes.
	other := cb.VM(vm.ID)
	_, err = other.CreateSchedule(ctx, client.ScheduleRequest{Cron: "@hourly", Exec: &client.ExecRequest{Command: "true"}})
	wantCode(t, err, client.CodeNotFound, 404)
	_, err = other.ListSchedules(ctx, client.ListOptions{})
	wantCode(t, err, client.CodeNotFound, 404)
	_, err = other.Schedule(echo.ID).Get(ctx)
	wantCode(t, err, client.CodeNotFound, 404)
	_, err = other.Schedule(echo.ID).ListRuns(ctx, client.ListOptions{})
	wantCode(t, err, client.CodeNotFound, 404)
	wantCode(t, other.Schedule(echo.ID).Delete(ctx), client.CodeNotFound, 404)
	if _, err := h.Schedule(echo.ID).Get(ctx); err != nil {
		t.Fatalf("A's schedule after B's attempts: %v", err)
	}

	// Bad input: 400 naming the field.
	path := "/v1/vms/" + vm.ID + "/schedules"
	for _, c := range []struct{ body, field string }{
		{`{"cron":"61 * * * *","action":{"exec":{"command":"true"}}}`, "cron"},
		{`{"cron":"@every 100ms","action":{"exec":{"command":"true"}}}`, "cron"},
		{`{"cron":"@hourly","timezone":"Mars/Olympus","action":{"exec":{"command":"true"}}}`, "timezone"},
		{`{"cron":"@hourly","action":{}}`, "action"},
		{`{"cron":"@hourly","overlap":"drop","action":{"exec":{"command":"true"}}}`, "overlap"},
		{`{"cron":"@hourly","action":{"exec":{"args":["x"]}}}`, "action.exec.args"},
		{`{"cron":"@hourly","action":{"exec":{"command":"true","cwd":"/nowhere"}}}`, "action.exec.cwd"},
		{`{"cron":"@hourly","action":{"exec":{"command":"true","timeoutMs":86400000}}}`, "action.exec.timeoutMs"},
	} {
		err := e.raw(http.MethodPost, path, keyB, strings.NewReader(c.body), nil)
		wantCode(t, err, client.CodeNotFound, 404) // another tenant's VM is not found before the body matters
		ce := wantCode(t, e.raw(http.MethodPost, path, keyA, strings.NewReader(c.body), nil), client.CodeInvalidArgument, 400)
		if ce.Details["field"] != c.field {
			t.Errorf("%s: field %v, want %s", c.body, ce.Details["field"], c.field)
		}
	}

	// Deleting a schedule stops it; deleting the VM deletes the others.
	if err := h.Schedule(sleepy.ID).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = h.Schedule(sleepy.ID).Get(ctx)
	wantCode(t, err, client.CodeNotFound, 404)
	if _, err := h.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "the VM's schedules to be deleted", func() bool {
		_, err := h.Schedule(echo.ID).Get(ctx)
		return client.IsCode(err, client.CodeNotFound)
	})
	list, err = h.ListSchedules(ctx, client.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("schedules of the deleted VM: %+v %v", list, err)
	}
	_, err = h.CreateSchedule(ctx, client.ScheduleRequest{Cron: "@hourly", Exec: &client.ExecRequest{Command: "true"}})
	wantCode(t, err, client.CodeConflict, 409)
}

// TestE2ESchedulesAcrossRestart kills the real gateway binary while a
// schedule runs and starts it again on the same data directory. A VM lives
// in its sidecar, a child of the gateway, so a restart loses it (the
// gateway marks it lost); its schedules end with it, and the gateway
// removes them at start. Schedules of VMs created after the restart run.
func TestE2ESchedulesAcrossRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildGateway(t)
	dataDir := t.TempDir()
	ctx := ctxFor(t, 3*time.Minute)

	cmd, base, logs := startBinary(t, bin, dataDir)
	c := mustClient(t, base, testAdminKey)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.VM(vm.ID).CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 1s", Exec: &client.ExecRequest{Command: "echo before"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, logs.String())
	}
	eventually(t, e2eTimeout, "a run before the restart", func() bool { return len(runsOf(t, c.VM(vm.ID).Schedule(s.ID))) >= 1 })
	killGateway(t, cmd, c)

	_, base2, logs2 := startBinary(t, bin, dataDir)
	c2 := mustClient(t, base2, testAdminKey)
	if got, err := c2.VM(vm.ID).Get(ctx); err != nil || got.State != client.VMLost {
		t.Fatalf("the VM after the restart: %+v %v", got, err)
	}
	_, err = c2.VM(vm.ID).Schedule(s.ID).Get(ctx)
	wantCode(t, err, client.CodeNotFound, 404)
	vm2, err := c2.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c2.VM(vm2.ID).CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 1s", Exec: &client.ExecRequest{Command: "echo after"}})
	if err != nil {
		t.Fatalf("create after the restart: %v\n%s", err, logs2.String())
	}
	eventually(t, e2eTimeout, "a run after the restart", func() bool {
		runs := runsOf(t, c2.VM(vm2.ID).Schedule(s2.ID))
		return len(runs) >= 1 && runs[0].Stdout == "after\n"
	})
}
