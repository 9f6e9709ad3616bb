package api

import (
	"encoding/json"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// ScheduleExec is a scheduled command: what to run, in the forms of POST
// /exec, and its deadline.
type ScheduleExec struct {
	Invocation
	TimeoutMs int64 `json:"timeoutMs,omitempty" validate:"gte=0,lte=86400000"`
}

// SchedulePrompt is a scheduled prompt to an agent session of the VM:
// Content is an array of ACP content blocks, as in a prompt's body.
type SchedulePrompt struct {
	Session string          `json:"session" validate:"required,max=128,nonul"`
	Content json.RawMessage `json:"content"`
}

// ScheduleAction is what a schedule runs: exactly one of Exec and Prompt.
type ScheduleAction struct {
	Exec   *ScheduleExec   `json:"exec,omitempty"`
	Prompt *SchedulePrompt `json:"prompt,omitempty"`
}

// CreateScheduleRequest is the body of POST /v1/vms/{vm}/schedules.
type CreateScheduleRequest struct {
	Cron     string                `json:"cron" validate:"required,max=256,nonul"`
	Timezone string                `json:"timezone,omitempty" validate:"max=64,nonul"`
	Action   ScheduleAction        `json:"action"`
	Overlap  gateway.OverlapPolicy `json:"overlap,omitempty"`
}

// Schedule is a VM's cron schedule as the API shows it. CreatedAt is in
// UTC.
type Schedule struct {
	ID        string                `json:"id"`
	VMID      string                `json:"vmId"`
	Cron      string                `json:"cron"`
	Timezone  string                `json:"timezone"`
	Overlap   gateway.OverlapPolicy `json:"overlap"`
	Action    ScheduleAction        `json:"action"`
	CreatedAt time.Time             `json:"createdAt"`
}

// ScheduleRun is a recorded run of a schedule. ExitCode is null for a
// prompt, a skipped run and one that could not run; Stdout and Stderr are
// the first 4096 bytes of each stream. Times are in UTC.
type ScheduleRun struct {
	ID         string             `json:"id"`
	ScheduleID string             `json:"scheduleId"`
	StartedAt  time.Time          `json:"startedAt"`
	EndedAt    time.Time          `json:"endedAt"`
	Outcome    gateway.RunOutcome `json:"outcome"`
	ExitCode   *int               `json:"exitCode"`
	Signal     gateway.Signal     `json:"signal,omitempty"`
	Stdout     string             `json:"stdout"`
	Stderr     string             `json:"stderr"`
	Truncated  bool               `json:"truncated"`
	Error      string             `json:"error,omitempty"`
}
