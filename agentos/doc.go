// Package agentos is the gateway's client of the agentOS engine: it starts
// and supervises agentos-sidecar processes, speaks their wire protocol
// (package protocol) over request lanes, and offers the engine's VMs,
// processes, shells, files, port fetches and ACP agent sessions as Go calls,
// hosting the callbacks the engine makes in return. One package holds the
// engine's protocol and its quirks, and the gateway's services reach it
// through vms only.
package agentos
