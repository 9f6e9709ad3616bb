package gateway

import (
	"encoding/json"
	"time"
)

// Agent is an agent a VM knows, and whether its software is installed.
type Agent struct {
	ID        string `json:"id"`
	Installed bool   `json:"installed"`
}

// PromptResult is the end of a prompt turn: ACP's stop reason and the
// agent's last message (null when it sent none).
type PromptResult struct {
	StopReason string          `json:"stopReason"`
	Message    json.RawMessage `json:"message"`
}

// PermissionAnswer is the outcome of answering a permission request: Status
// is accepted or not_pending, Reason says why it was not pending.
type PermissionAnswer struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// SessionEventData is a durable session event as the store keeps it (the
// Data of a SessionEvent) and the API serves it. Type is the ACP
// sessionUpdate kind of a session update (with Update), or
// permission_request (RequestID, Options, ToolCall) or permission_response
// (RequestID, Status, Reason, Response, Decision).
type SessionEventData struct {
	Sequence  uint64          `json:"sequence"`
	Timestamp time.Time       `json:"timestamp"`
	Type      string          `json:"type"`
	Update    json.RawMessage `json:"update,omitempty"`
	RequestID string          `json:"requestId,omitempty"`
	Options   json.RawMessage `json:"options,omitempty"`
	ToolCall  json.RawMessage `json:"toolCall,omitempty"`
	Status    string          `json:"status,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Response  json.RawMessage `json:"response,omitempty"`
	// Decision says who settled a permission request, how and when.
	Decision *PermissionDecision `json:"decision,omitempty"`
}

// EphemeralEvent is the data of a session stream's ephemeral event: a
// streamed delta, not stored. Update is the ACP session/update payload,
// Type its sessionUpdate kind.
type EphemeralEvent struct {
	AfterSequence uint64          `json:"afterSequence"`
	Type          string          `json:"type"`
	Update        json.RawMessage `json:"update"`
}

// AgentStderrEvent is the data of a session stream's agent_stderr event:
// output of the agent process.
type AgentStderrEvent struct {
	AgentType string `json:"agentType"`
	ProcessID string `json:"processId"`
	Text      string `json:"text"`
}

// AgentExitEvent is the data of a session stream's agent_exit event: the
// agent process ended. ExitCode is nil when it is not known (killed by a
// signal); Restart is what the engine does about it. The fields are in the
// order the gateway has always sent them.
type AgentExitEvent struct {
	AgentType string `json:"agentType"`
	ExitCode  *int32 `json:"exitCode"`
	ProcessID string `json:"processId"`
	Restart   string `json:"restart"`
}

// OverflowEvent is the data of a session stream's overflow event: the
// follower fell behind and streamed deltas were dropped.
type OverflowEvent struct {
	Reason string `json:"reason"`
}

// SessionEndEvent is the data of a session stream's final end event: the
// session's state then (closed, lost, or deleted when the session was).
type SessionEndEvent struct {
	State SessionState `json:"state"`
}
