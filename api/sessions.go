package api

import (
	"encoding/json"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// OpenSessionRequest is the body of POST /v1/vms/{vm}/sessions.
type OpenSessionRequest struct {
	SessionID             string            `json:"sessionId,omitempty" validate:"omitempty,max=128"`
	Agent                 string            `json:"agent" validate:"required,max=64"`
	Cwd                   string            `json:"cwd,omitempty" validate:"omitempty,startswith=/,max=4096,nonul"`
	Env                   map[string]string `json:"env,omitempty" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
	AdditionalDirectories []string          `json:"additionalDirectories,omitempty" validate:"omitempty,max=64,dive,startswith=/,max=4096,nonul"`
	// MCPServers are ACP MCP server objects, passed to the agent as they
	// are.
	MCPServers             json.RawMessage            `json:"mcpServers,omitempty"`
	PermissionPolicy       string                     `json:"permissionPolicy,omitempty" validate:"omitempty,oneof=ask allow_all reject_all"`
	PermissionDefault      *gateway.PermissionDefault `json:"permissionDefault,omitempty"`
	AdditionalInstructions string                     `json:"additionalInstructions,omitempty" validate:"max=65536,nonul"`
}

// Session is an agent session as the API shows it. Times are in UTC.
type Session struct {
	ID                    string                     `json:"id"`
	VMID                  string                     `json:"vmId"`
	Agent                 string                     `json:"agent"`
	Cwd                   string                     `json:"cwd"`
	AdditionalDirectories []string                   `json:"additionalDirectories"`
	PermissionPolicy      string                     `json:"permissionPolicy"`
	PermissionDefault     *gateway.PermissionDefault `json:"permissionDefault"`
	State                 gateway.SessionState       `json:"state"`
	PendingPermissions    []gateway.Permission       `json:"pendingPermissions"`
	LatestSequence        uint64                     `json:"latestSequence"`
	CreatedAt             time.Time                  `json:"createdAt"`
	UpdatedAt             time.Time                  `json:"updatedAt"`
}

// PromptRequest is the body of POST /v1/vms/{vm}/sessions/{session}/prompt:
// Content is an array of ACP content blocks.
type PromptRequest struct {
	Content        json.RawMessage `json:"content,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty" validate:"max=255,nonul"`
}

// PromptAccepted answers an asynchronous prompt: Status is "accepted".
type PromptAccepted struct {
	Status string `json:"status"`
}

// CancelResult answers a cancel: whether a running turn was cancelled.
type CancelResult struct {
	Status string `json:"status"`
}

// AnswerPermissionRequest is the body of POST
// /v1/vms/{vm}/sessions/{session}/permissions/{request}.
type AnswerPermissionRequest struct {
	OptionID string `json:"optionId" validate:"required,max=256,nonul"`
}

// SessionConfig is an agent's configuration: its options as ACP has them
// (null when the agent has none), at Revision.
type SessionConfig struct {
	Revision uint64          `json:"revision"`
	Options  json.RawMessage `json:"options"`
}

// SetConfigRequest is the body of PUT
// /v1/vms/{vm}/sessions/{session}/config/{config}.
type SetConfigRequest struct {
	Value json.RawMessage `json:"value,omitempty"`
}

// SessionHistory is a page of a session's durable events, each a
// SessionEvent, oldest first.
type SessionHistory struct {
	Events        []json.RawMessage `json:"events"`
	HasMoreBefore bool              `json:"hasMoreBefore"`
	HasMoreAfter  bool              `json:"hasMoreAfter"`
}
