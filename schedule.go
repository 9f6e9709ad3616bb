package gateway

import (
	"encoding/json"
	"time"
)

// MaxSchedulesPerVM bounds the schedules of one VM: the agentOS engine's own
// limit for its CronManager, which the gateway keeps so that a VM moved between
// the two behaves the same.
const MaxSchedulesPerVM = 1024

// OverlapPolicy says what a schedule does when it ticks while its previous run
// still runs.
type OverlapPolicy string

// Overlap policies.
const (
	// OverlapSkip records the tick as a skipped run (the default).
	OverlapSkip OverlapPolicy = "skip"
	// OverlapQueue runs the tick once the previous run ends; at most one
	// tick waits, later ones are skipped.
	OverlapQueue OverlapPolicy = "queue"
)

// Valid reports whether p is a known policy.
func (p OverlapPolicy) Valid() bool { return p == OverlapSkip || p == OverlapQueue }

// RunOutcome is how a scheduled run ended.
type RunOutcome string

// Run outcomes.
const (
	RunSucceeded RunOutcome = "succeeded" // exit code 0, or the prompt's turn ended
	RunFailed    RunOutcome = "failed"    // a non-zero exit code or a signal
	RunSkipped   RunOutcome = "skipped"   // the previous run still ran
	RunTimedOut  RunOutcome = "timed_out" // the exec's deadline passed
	RunError     RunOutcome = "error"     // it could not run (the gateway's own words in Error)
)

// ScheduleExec is a scheduled command, in the forms of an exec: a command line
// (Command alone), a program with Args, or an Argv.
type ScheduleExec struct {
	Command string
	Args    []string
	Argv    []string
	Cwd     string
	Env     map[string]string
	// Timeout is the run's deadline; 0 is the gateway's exec default.
	Timeout time.Duration
}

// SchedulePrompt is a scheduled prompt to an agent session of the VM.
type SchedulePrompt struct {
	Session string
	// Content is a JSON array of ACP content blocks.
	Content json.RawMessage
}

// Schedule is a stored cron schedule of a VM. Exactly one of Exec and Prompt
// is set.
type Schedule struct {
	ID       string
	TenantID string
	VMID     string
	// Cron is the expression: five fields, six with leading seconds, or a
	// descriptor (@hourly, @every 2s).
	Cron string
	// Timezone is the IANA zone the expression is read in.
	Timezone  string
	Overlap   OverlapPolicy
	Exec      *ScheduleExec
	Prompt    *SchedulePrompt
	CreatedAt time.Time
}

// ScheduleRun is one recorded tick of a schedule.
type ScheduleRun struct {
	ID         string
	ScheduleID string
	VMID       string
	StartedAt  time.Time
	EndedAt    time.Time
	Outcome    RunOutcome
	// ExitCode is the exec's exit code; nil for a prompt, a skipped run or
	// one that could not start.
	ExitCode *int
	Signal   Signal
	// Stdout and Stderr are the head of the exec's output, at most
	// MaxRunOutputBytes each; Truncated says whether either was cut.
	Stdout    string
	Stderr    string
	Truncated bool
	// Error says why a run could not run, in the gateway's words.
	Error string
}

// MaxRunOutputBytes is what a run keeps of each of its output streams: runs
// are kept in the store, many per schedule, so each must stay small.
const MaxRunOutputBytes = 4096
