package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// maxRunsPerSchedule is how many runs a schedule keeps: the oldest go as
// new ones are recorded, so a schedule ticking every second for a month
// does not fill the database.
const maxRunsPerSchedule = 100

const scheduleColumns = `id, tenant_id, vm_id, cron, timezone, overlap, action, created_at`

const runColumns = `id, schedule_id, vm_id, started_at, ended_at, outcome, exit_code, signal,
	stdout, stderr, truncated, error`

// storedAction is a schedule's action column.
type storedAction struct {
	Exec   *storedExec   `json:"exec,omitempty"`
	Prompt *storedPrompt `json:"prompt,omitempty"`
}

type storedExec struct {
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty"`
}

type storedPrompt struct {
	Session string          `json:"session"`
	Content json.RawMessage `json:"content"`
}

func encodeAction(s gateway.Schedule) (string, error) {
	var a storedAction
	if e := s.Exec; e != nil {
		a.Exec = &storedExec{Command: e.Command, Args: e.Args, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env, TimeoutMs: e.Timeout.Milliseconds()}
	}
	if p := s.Prompt; p != nil {
		a.Prompt = &storedPrompt{Session: p.Session, Content: p.Content}
	}
	return jsonText(a)
}

func scanSchedule(row interface{ Scan(...any) error }) (gateway.Schedule, error) {
	var (
		s      gateway.Schedule
		action string
		a      storedAction
	)
	if err := row.Scan(&s.ID, &s.TenantID, &s.VMID, &s.Cron, &s.Timezone, &s.Overlap, &action, scanTime(&s.CreatedAt)); err != nil {
		return gateway.Schedule{}, err
	}
	if err := json.Unmarshal([]byte(action), &a); err != nil {
		return gateway.Schedule{}, fmt.Errorf("decode schedule action: %w", err)
	}
	if e := a.Exec; e != nil {
		s.Exec = &gateway.ScheduleExec{Command: e.Command, Args: e.Args, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env,
			Timeout: time.Duration(e.TimeoutMs) * time.Millisecond}
	}
	if p := a.Prompt; p != nil {
		s.Prompt = &gateway.SchedulePrompt{Session: p.Session, Content: p.Content}
	}
	return s, nil
}

// CreateSchedule stores a new schedule of a VM. An empty ID gets a fresh
// "sch_" one and a zero CreatedAt is now. The VM must be the tenant's
// (CodeNotFound otherwise); a VM with gateway.MaxSchedulesPerVM schedules,
// or a tenant with maxTenant (when positive), is CodeResourceExhausted with
// details.quota.
func (db *DB) CreateSchedule(ctx context.Context, s gateway.Schedule, maxTenant int) (gateway.Schedule, error) {
	if s.VMID == "" || s.TenantID == "" {
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeInvalidArgument, "schedule vm id and tenant id are required")
	}
	if s.ID == "" {
		s.ID = newID("sch_")
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = db.now()
	}
	s.CreatedAt = s.CreatedAt.UTC().Truncate(time.Microsecond)
	action, err := encodeAction(s)
	if err != nil {
		return gateway.Schedule{}, gateway.Wrap(gateway.CodeInvalidArgument, err, "schedule action cannot be stored")
	}
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := db.queryRow(ctx, tx, `SELECT 1 FROM vms WHERE id = ? AND tenant_id = ?`+db.d.forUpdate, s.VMID, s.TenantID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", s.VMID)
		}
		if err != nil {
			return dbError(err, "store: create schedule")
		}
		var perVM, perTenant int
		if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM schedules WHERE vm_id = ?`, s.VMID).Scan(&perVM); err != nil {
			return dbError(err, "store: create schedule")
		}
		if perVM >= gateway.MaxSchedulesPerVM {
			return gateway.Errorf(gateway.CodeResourceExhausted, "vm %s has %d schedules, the most a VM can have", s.VMID, gateway.MaxSchedulesPerVM).
				WithDetail("quota", "schedulesPerVm")
		}
		if maxTenant > 0 {
			if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM schedules WHERE tenant_id = ?`, s.TenantID).Scan(&perTenant); err != nil {
				return dbError(err, "store: create schedule")
			}
			if perTenant >= maxTenant {
				return gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s has %d schedules, its quota", s.TenantID, maxTenant).
					WithDetail("quota", "maxSchedules")
			}
		}
		res, err := db.exec(ctx, tx, `INSERT INTO schedules (`+scheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			s.ID, s.TenantID, s.VMID, s.Cron, s.Timezone, string(s.Overlap), action, db.d.ts(s.CreatedAt))
		if err != nil {
			return dbError(err, "store: create schedule")
		}
		if rowsAffected(res) == 0 {
			return gateway.Errorf(gateway.CodeConflict, "schedule %s already exists", s.ID)
		}
		return nil
	})
	if err != nil {
		return gateway.Schedule{}, err
	}
	return s, nil
}

// GetSchedule returns a tenant's schedule of a VM; anything else is
// CodeNotFound.
func (db *DB) GetSchedule(ctx context.Context, tenantID, vmID, id string) (gateway.Schedule, error) {
	s, err := scanSchedule(db.queryRow(ctx, db.r, `SELECT `+scheduleColumns+` FROM schedules
		WHERE id = ? AND vm_id = ? AND tenant_id = ?`, id, vmID, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Schedule{}, gateway.Errorf(gateway.CodeNotFound, "schedule %s not found", id)
	}
	if err != nil {
		return gateway.Schedule{}, dbError(err, "store: get schedule")
	}
	return s, nil
}

// ListSchedules returns a page of a tenant's schedules of one VM, oldest
// first; cursor and limit as in ListSessions.
func (db *DB) ListSchedules(ctx context.Context, tenantID, vmID, cursor string, limit int) (gateway.Page[gateway.Schedule], error) {
	return keysetPage(ctx, db, `SELECT `+scheduleColumns+` FROM schedules WHERE tenant_id = ? AND vm_id = ?`, []any{tenantID, vmID},
		"created_at", cursor, limit, scanSchedule, func(s gateway.Schedule) (time.Time, string) { return s.CreatedAt, s.ID }, "store: list schedules")
}

// SchedulesOfVM returns every schedule of a VM, of whichever tenant, oldest
// first: what the scheduler arms for a VM it runs.
func (db *DB) SchedulesOfVM(ctx context.Context, vmID string) ([]gateway.Schedule, error) {
	page, err := listRows(ctx, db, `SELECT `+scheduleColumns+` FROM schedules WHERE vm_id = ? ORDER BY created_at, id`,
		[]any{vmID}, scanSchedule, "store: list schedules of a vm")
	return page.Items, err
}

// SchedulesOfHibernatedVMs returns the schedules of the hibernated VMs that
// node ran last, which that node arms: their runs wake the VMs.
func (db *DB) SchedulesOfHibernatedVMs(ctx context.Context, node string) ([]gateway.Schedule, error) {
	page, err := listRows(ctx, db, `SELECT `+scheduleColumns+` FROM schedules
		WHERE vm_id IN (SELECT id FROM vms WHERE state = 'hibernated' AND node = ?) ORDER BY created_at, id`,
		[]any{node}, scanSchedule, "store: list schedules of hibernated vms")
	return page.Items, err
}

// DeleteSchedule removes a tenant's schedule and its runs; an absent one is
// CodeNotFound.
func (db *DB) DeleteSchedule(ctx context.Context, tenantID, vmID, id string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM schedules WHERE id = ? AND vm_id = ? AND tenant_id = ?`, id, vmID, tenantID)
	if err != nil {
		return dbError(err, "store: delete schedule")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "schedule %s not found", id)
	}
	return nil
}

// DeleteVMSchedules removes every schedule of a VM, with their runs, and
// returns how many there were: a VM's schedules end with it.
func (db *DB) DeleteVMSchedules(ctx context.Context, vmID string) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM schedules WHERE vm_id = ?`, vmID)
	if err != nil {
		return 0, dbError(err, "store: delete vm schedules")
	}
	return int(rowsAffected(res)), nil
}

// DeleteEndedVMSchedules removes the schedules of every VM in a final state
// (disposed, lost), and returns how many: at start, those of the VMs a
// restart lost.
func (db *DB) DeleteEndedVMSchedules(ctx context.Context) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM schedules WHERE vm_id IN (SELECT id FROM vms WHERE state IN `+finalStatesSQL+`)`)
	if err != nil {
		return 0, dbError(err, "store: delete ended vms' schedules")
	}
	return int(rowsAffected(res)), nil
}

// RecordRun stores a run of a schedule (a fresh "run_" ID when empty) and
// drops the schedule's oldest runs beyond the 100 it keeps. A schedule that
// is gone (deleted while the run ran) is CodeNotFound.
func (db *DB) RecordRun(ctx context.Context, r gateway.ScheduleRun) (gateway.ScheduleRun, error) {
	if r.ID == "" {
		r.ID = newID("run_")
	}
	r.StartedAt = r.StartedAt.UTC().Truncate(time.Microsecond)
	r.EndedAt = r.EndedAt.UTC().Truncate(time.Microsecond)
	var exit sql.NullInt64
	if r.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*r.ExitCode), Valid: true}
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		_, err := db.exec(ctx, tx, `INSERT INTO schedule_runs (`+runColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.ScheduleID, r.VMID, db.d.ts(r.StartedAt), db.d.ts(r.EndedAt), string(r.Outcome), exit, string(r.Signal),
			r.Stdout, r.Stderr, r.Truncated, r.Error)
		if err != nil {
			var one int
			if db.queryRow(ctx, tx, `SELECT 1 FROM schedules WHERE id = ?`, r.ScheduleID).Scan(&one) != nil {
				return gateway.Wrap(gateway.CodeNotFound, err, "schedule %s not found", r.ScheduleID)
			}
			return dbError(err, "store: record run")
		}
		_, err = db.exec(ctx, tx, `DELETE FROM schedule_runs WHERE schedule_id = ? AND id NOT IN
			(SELECT id FROM schedule_runs WHERE schedule_id = ? ORDER BY started_at DESC, id DESC LIMIT ?)`,
			r.ScheduleID, r.ScheduleID, maxRunsPerSchedule)
		if err != nil {
			return dbError(err, "store: trim runs")
		}
		return nil
	})
	if err != nil {
		return gateway.ScheduleRun{}, err
	}
	return r, nil
}

func scanRun(row interface{ Scan(...any) error }) (gateway.ScheduleRun, error) {
	var (
		r    gateway.ScheduleRun
		exit sql.NullInt64
	)
	err := row.Scan(&r.ID, &r.ScheduleID, &r.VMID, scanTime(&r.StartedAt), scanTime(&r.EndedAt), &r.Outcome, &exit,
		&r.Signal, &r.Stdout, &r.Stderr, &r.Truncated, &r.Error)
	if err != nil {
		return gateway.ScheduleRun{}, err
	}
	if exit.Valid {
		code := int(exit.Int64)
		r.ExitCode = &code
	}
	return r, nil
}

// ListRuns returns a page of a tenant's schedule's runs, oldest first; a
// schedule that is not the tenant's (or not of vmID) is CodeNotFound.
func (db *DB) ListRuns(ctx context.Context, tenantID, vmID, scheduleID, cursor string, limit int) (gateway.Page[gateway.ScheduleRun], error) {
	if _, err := db.GetSchedule(ctx, tenantID, vmID, scheduleID); err != nil {
		return gateway.Page[gateway.ScheduleRun]{}, err
	}
	return keysetPage(ctx, db, `SELECT `+runColumns+` FROM schedule_runs WHERE schedule_id = ?`, []any{scheduleID},
		"started_at", cursor, limit, scanRun, func(r gateway.ScheduleRun) (time.Time, string) { return r.StartedAt, r.ID }, "store: list runs")
}
