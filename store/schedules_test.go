package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestSchedulesCreateListDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		twoTenants(t, db)

		exec := gateway.Schedule{TenantID: "acme", VMID: "vm_a", Cron: "@every 2s", Timezone: "Europe/Paris", Overlap: gateway.OverlapSkip,
			Exec: &gateway.ScheduleExec{Command: "sh", Args: []string{"-c", "echo hi"}, Cwd: "/tmp", Env: map[string]string{"A": "1"}, Timeout: 1500 * time.Millisecond}}
		a, err := db.CreateSchedule(ctx, exec, 0)
		if err != nil {
			t.Fatalf("CreateSchedule: %v", err)
		}
		prompt := gateway.Schedule{TenantID: "acme", VMID: "vm_a", Cron: "0 * * * *", Timezone: "UTC", Overlap: gateway.OverlapQueue,
			Prompt: &gateway.SchedulePrompt{Session: "s1", Content: json.RawMessage(`[{"type":"text","text":"hi"}]`)}}
		b, err := db.CreateSchedule(ctx, prompt, 0)
		if err != nil {
			t.Fatalf("CreateSchedule: %v", err)
		}
		got, err := db.GetSchedule(ctx, "acme", "vm_a", a.ID)
		if err != nil || got.Exec == nil || got.Exec.Timeout != 1500*time.Millisecond || got.Exec.Args[1] != "echo hi" ||
			got.Exec.Env["A"] != "1" || got.Timezone != "Europe/Paris" || !got.CreatedAt.Equal(a.CreatedAt) {
			t.Fatalf("GetSchedule: %+v %v", got, err)
		}
		got, err = db.GetSchedule(ctx, "acme", "vm_a", b.ID)
		if err != nil || got.Prompt == nil || got.Prompt.Session != "s1" || string(got.Prompt.Content) != `[{"type":"text","text":"hi"}]` {
			t.Fatalf("GetSchedule(prompt): %+v %v", got, err)
		}
		for _, c := range []struct{ tenant, vm string }{{"globex", "vm_a"}, {"acme", "vm_g"}} {
			if _, err := db.GetSchedule(ctx, c.tenant, c.vm, a.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
				t.Errorf("GetSchedule as %s/%s: %v", c.tenant, c.vm, err)
			}
		}
		if _, err := db.CreateSchedule(ctx, gateway.Schedule{TenantID: "globex", VMID: "vm_a", Cron: "@hourly", Timezone: "UTC", Overlap: gateway.OverlapSkip, Exec: &gateway.ScheduleExec{Command: "true"}}, 0); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("CreateSchedule on another tenant's VM: %v", err)
		}
		if _, err := db.CreateSchedule(ctx, exec, 2); gateway.ErrorCode(err) != gateway.CodeResourceExhausted {
			t.Errorf("CreateSchedule over the tenant quota: %v", err)
		}

		first, err := db.ListSchedules(ctx, "acme", "vm_a", "", 1)
		if err != nil || len(first.Items) != 1 || first.Items[0].ID != a.ID || first.NextCursor == "" {
			t.Fatalf("ListSchedules page 1: %+v %v", first, err)
		}
		second, err := db.ListSchedules(ctx, "acme", "vm_a", first.NextCursor, 1)
		if err != nil || len(second.Items) != 1 || second.Items[0].ID != b.ID || second.NextCursor != "" {
			t.Fatalf("ListSchedules page 2: %+v %v", second, err)
		}
		if l, err := db.ListSchedules(ctx, "globex", "vm_a", "", 0); err != nil || len(l.Items) != 0 {
			t.Errorf("ListSchedules of another tenant: %+v %v", l, err)
		}

		if err := db.DeleteSchedule(ctx, "globex", "vm_a", a.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("DeleteSchedule by another tenant: %v", err)
		}
		if err := db.DeleteSchedule(ctx, "acme", "vm_a", a.ID); err != nil {
			t.Fatalf("DeleteSchedule: %v", err)
		}
		if err := db.DeleteSchedule(ctx, "acme", "vm_a", a.ID); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("DeleteSchedule twice: %v", err)
		}
		all, err := db.SchedulesOfVM(ctx, "vm_a")
		if err != nil || len(all) != 1 || all[0].ID != b.ID {
			t.Fatalf("SchedulesOfVM: %+v %v", all, err)
		}
		if _, err := db.SetVMState(ctx, "vm_a", gateway.VMLost, "test", ""); err != nil {
			t.Fatal(err)
		}
		if n, err := db.DeleteEndedVMSchedules(ctx); err != nil || n != 1 {
			t.Fatalf("DeleteEndedVMSchedules: %d %v", n, err)
		}
	})
}

func TestScheduleRunsRecordedAndTrimmed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		s, err := db.CreateSchedule(ctx, gateway.Schedule{TenantID: "acme", VMID: "vm_a", Cron: "@every 1s", Timezone: "UTC",
			Overlap: gateway.OverlapSkip, Exec: &gateway.ScheduleExec{Command: "echo hi"}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		zero, seven := 0, 7
		for i := range maxRunsPerSchedule + 5 {
			r := gateway.ScheduleRun{ScheduleID: s.ID, VMID: "vm_a", StartedAt: start.Add(time.Duration(i) * time.Second),
				EndedAt: start.Add(time.Duration(i)*time.Second + time.Millisecond), Outcome: gateway.RunSucceeded, ExitCode: &zero, Stdout: fmt.Sprint(i)}
			if i%2 == 1 {
				r.Outcome, r.ExitCode, r.Stderr, r.Truncated = gateway.RunFailed, &seven, "bad", true
			}
			if i == 4 {
				r.Outcome, r.ExitCode, r.Stdout = gateway.RunSkipped, nil, ""
			}
			if _, err := db.RecordRun(ctx, r); err != nil {
				t.Fatalf("RecordRun %d: %v", i, err)
			}
		}
		page, err := db.ListRuns(ctx, "acme", "vm_a", s.ID, "", 500)
		if err != nil || len(page.Items) != maxRunsPerSchedule {
			t.Fatalf("ListRuns: %d runs, %v", len(page.Items), err)
		}
		if r := page.Items[0]; r.Stdout != "5" || r.Outcome != gateway.RunFailed || *r.ExitCode != 7 || !r.Truncated || r.Stderr != "bad" ||
			!r.StartedAt.Equal(start.Add(5*time.Second)) {
			t.Errorf("oldest kept run: %+v", r)
		}
		p1, err := db.ListRuns(ctx, "acme", "vm_a", s.ID, "", 60)
		if err != nil || len(p1.Items) != 60 || p1.NextCursor == "" {
			t.Fatalf("ListRuns page 1: %d %v", len(p1.Items), err)
		}
		p2, err := db.ListRuns(ctx, "acme", "vm_a", s.ID, p1.NextCursor, 60)
		if err != nil || len(p2.Items) != 40 || p2.NextCursor != "" || p2.Items[0].Stdout != "65" {
			t.Fatalf("ListRuns page 2: %d %v", len(p2.Items), err)
		}
		if _, err := db.ListRuns(ctx, "other", "vm_a", s.ID, "", 0); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("ListRuns of another tenant: %v", err)
		}
		if _, err := db.DeleteVM(ctx, "acme", "vm_a"); err == nil {
			t.Fatal("DeleteVM of a ready VM succeeded")
		}
		if n, err := db.DeleteVMSchedules(ctx, "vm_a"); err != nil || n != 1 {
			t.Fatalf("DeleteVMSchedules: %d %v", n, err)
		}
		if _, err := db.RecordRun(ctx, gateway.ScheduleRun{ScheduleID: s.ID, VMID: "vm_a", Outcome: gateway.RunSkipped, StartedAt: start, EndedAt: start}); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("RecordRun of a deleted schedule: %v", err)
		}
	})
}
