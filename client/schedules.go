package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// Schedule is a VM's cron schedule as the gateway answers it.
type Schedule = api.Schedule

// ScheduleRun is a recorded run of a schedule.
type ScheduleRun = api.ScheduleRun

// ScheduleAction is what a schedule runs, as the gateway answers it.
type ScheduleAction = api.ScheduleAction

// SchedulePrompt is a scheduled prompt: Session's id and Content, ACP
// content blocks (see TextPrompt).
type SchedulePrompt = api.SchedulePrompt

// OverlapPolicy says what a tick does while the previous run still runs.
type OverlapPolicy = gateway.OverlapPolicy

// Overlap policies.
const (
	OverlapSkip  = gateway.OverlapSkip
	OverlapQueue = gateway.OverlapQueue
)

// RunOutcome is how a scheduled run ended.
type RunOutcome = gateway.RunOutcome

// Run outcomes.
const (
	RunSucceeded = gateway.RunSucceeded
	RunFailed    = gateway.RunFailed
	RunSkipped   = gateway.RunSkipped
	RunTimedOut  = gateway.RunTimedOut
	RunError     = gateway.RunError
)

// ScheduleRequest creates a schedule: Cron read in Timezone (an IANA name;
// empty is UTC), and exactly one of Exec and Prompt.
type ScheduleRequest struct {
	Cron     string
	Timezone string
	// Overlap is OverlapSkip when empty.
	Overlap OverlapPolicy
	// Exec is the command to run; its Stdin, MaxOutputBytes, Stdout and
	// Stderr are not used by a schedule (a run keeps 4096 bytes of each
	// stream).
	Exec   *ExecRequest
	Prompt *SchedulePrompt
}

// MarshalJSON encodes the CreateScheduleRequest schema.
func (r ScheduleRequest) MarshalJSON() ([]byte, error) {
	w := api.CreateScheduleRequest{Cron: r.Cron, Timezone: r.Timezone, Overlap: r.Overlap}
	if e := r.Exec; e != nil {
		w.Action.Exec = &api.ScheduleExec{Invocation: api.Invocation{Command: e.Command, Args: e.Args, Argv: e.Argv, Cwd: e.Cwd, Env: e.Env},
			TimeoutMs: ceilUnit(e.Timeout, time.Millisecond)}
	}
	w.Action.Prompt = r.Prompt
	return json.Marshal(w)
}

// CreateSchedule creates a cron schedule of the VM and returns it.
func (v *VMHandle) CreateSchedule(ctx context.Context, req ScheduleRequest) (*Schedule, error) {
	out, _, err := call[Schedule](ctx, v.c, http.MethodPost, vmPath(v.id, "schedules"), req, nil)
	return out, err
}

// ListSchedules returns one page of the VM's schedules.
func (v *VMHandle) ListSchedules(ctx context.Context, opts ListOptions) (*List[Schedule], error) {
	return get[List[Schedule]](ctx, v.c, vmPath(v.id, "schedules"), opts.query())
}

// Schedules iterates over all of the VM's schedules, page by page.
func (v *VMHandle) Schedules(ctx context.Context) iter.Seq2[Schedule, error] {
	return pages(ctx, ListOptions{}, v.ListSchedules)
}

// Schedule returns the handle of one of the VM's schedules. It makes no
// call.
func (v *VMHandle) Schedule(id string) *ScheduleHandle {
	return &ScheduleHandle{c: v.c, vm: v.id, id: id}
}

// ScheduleHandle makes the calls about one schedule. It is safe for
// concurrent use.
type ScheduleHandle struct {
	c      *Client
	vm, id string
}

// ID returns the schedule's id.
func (s *ScheduleHandle) ID() string { return s.id }

func (s *ScheduleHandle) path(rest ...string) string {
	return vmPath(s.vm, append([]string{"schedules", esc(s.id)}, rest...)...)
}

// Get returns the schedule.
func (s *ScheduleHandle) Get(ctx context.Context) (*Schedule, error) {
	return get[Schedule](ctx, s.c, s.path(), nil)
}

// Delete disarms and deletes the schedule with its runs.
func (s *ScheduleHandle) Delete(ctx context.Context) error {
	_, err := s.c.do(ctx, http.MethodDelete, s.path(), nil, nil, nil, nil)
	return err
}

// ListRuns returns one page of the schedule's runs, oldest first.
func (s *ScheduleHandle) ListRuns(ctx context.Context, opts ListOptions) (*List[ScheduleRun], error) {
	return get[List[ScheduleRun]](ctx, s.c, s.path("runs"), opts.query())
}

// Runs iterates over all of the schedule's recorded runs, page by page.
func (s *ScheduleHandle) Runs(ctx context.Context) iter.Seq2[ScheduleRun, error] {
	return pages(ctx, ListOptions{}, s.ListRuns)
}
