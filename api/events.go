package api

import gateway "github.com/agentos-gateway/agentos-gateway"

// GapEvent is the data of a gap event: the sequence numbers From..To
// (inclusive) were dropped from a bounded buffer before the client read
// them.
type GapEvent struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// ErrorEvent is the data of a stream's final error event: why the stream
// ended.
type ErrorEvent struct {
	Code   gateway.Code `json:"code"`
	Detail string       `json:"detail"`
}

// LostEvent is the data of the final lost event of a stream that one node
// proxied from the node running the VM, when that node died: the VM is
// lost.
type LostEvent struct {
	Code   gateway.Code    `json:"code"`
	Detail string          `json:"detail"`
	Node   string          `json:"node"`
	State  gateway.VMState `json:"state"`
}
