package api

import gateway "github.com/agentos-gateway/agentos-gateway"

// OpenShellRequest is the body of POST /v1/vms/{vm}/shells.
type OpenShellRequest struct {
	Shell string            `json:"shell,omitempty" validate:"omitempty,oneof=sh bash"`
	Cols  uint16            `json:"cols,omitempty" validate:"omitempty,min=1,max=1000"`
	Rows  uint16            `json:"rows,omitempty" validate:"omitempty,min=1,max=1000"`
	Cwd   string            `json:"cwd,omitempty" validate:"omitempty,startswith=/,max=4096,nonul"`
	Env   map[string]string `json:"env,omitempty" validate:"omitempty,max=256,dive,keys,min=1,max=256,envkey,endkeys,nonul,max=65536"`
}

// ShellCreated answers an opened shell.
type ShellCreated struct {
	ShellID string `json:"shellId"`
}

// ResizeRequest is the body of POST /v1/vms/{vm}/shells/{shell}/resize.
type ResizeRequest struct {
	Cols uint16 `json:"cols" validate:"required,min=1,max=1000"`
	Rows uint16 `json:"rows" validate:"required,min=1,max=1000"`
}

// AttachServerFrame is a text frame from the gateway on an attach
// WebSocket: hello, gap, error or exit.
type AttachServerFrame struct {
	Type string `json:"type"`
	// Seq: hello, the sequence the next binary frame follows; exit, the
	// last sequence of the output.
	Seq      *uint64         `json:"seq,omitempty"`
	From     uint64          `json:"from,omitempty"`
	To       uint64          `json:"to,omitempty"`
	ExitCode *int            `json:"exitCode,omitempty"`
	Signal   *gateway.Signal `json:"signal,omitempty"`
	Code     gateway.Code    `json:"code,omitempty"`
	Detail   string          `json:"detail,omitempty"`
}

// AttachControlFrame is a text frame from a client on an attach WebSocket:
// resize (Cols, Rows) on a shell's, close_stdin or signal (Signal) on a
// process's.
type AttachControlFrame struct {
	Type   string `json:"type"`
	Cols   uint16 `json:"cols,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Signal string `json:"signal,omitempty"`
}
