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
