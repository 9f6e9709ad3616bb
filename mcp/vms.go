package agentmcp

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// VMInfo is a VM as the tools describe it.
type VMInfo struct {
	ID                 string            `json:"id" jsonschema:"the VM's id, which the other tools take as vm"`
	State              string            `json:"state" jsonschema:"creating, ready, hibernating, hibernated, waking, disposing, disposed or lost"`
	Reason             string            `json:"reason,omitempty" jsonschema:"why the VM is in its state, when it ended"`
	Labels             map[string]string `json:"labels,omitempty"`
	Software           []string          `json:"software,omitempty"`
	IdleTimeoutSeconds int               `json:"idleTimeoutSeconds" jsonschema:"how long the VM may go unused before it hibernates or is disposed (0: never)"`
	CreatedAt          time.Time         `json:"createdAt"`
}

func vmInfo(v *client.VM) VMInfo {
	return VMInfo{ID: v.ID, State: string(v.State), Reason: v.Reason, Labels: v.Labels, Software: v.Software,
		IdleTimeoutSeconds: v.IdleTimeoutSeconds, CreatedAt: v.CreatedAt}
}

// CreateVMInput is create_vm's input.
type CreateVMInput struct {
	Labels             map[string]string `json:"labels,omitempty" jsonschema:"labels to find the VM by later"`
	Env                map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command run in the VM"`
	Software           []string          `json:"software,omitempty" jsonschema:"software packages to install, such as @agentos-software/pi"`
	IdleTimeoutSeconds int               `json:"idleTimeoutSeconds,omitempty" jsonschema:"end the VM after this many seconds without use (0: the gateway's default)"`
}

// VMInput names a VM.
type VMInput struct {
	VM string `json:"vm" jsonschema:"the VM's id"`
}

// ListVMsInput is list_vms's input.
type ListVMsInput struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only the VMs with all these labels"`
	All    bool              `json:"all,omitempty" jsonschema:"also the VMs that ended (disposed, lost)"`
}

// VMList is list_vms's output.
type VMList struct {
	VMs []VMInfo `json:"vms"`
}

// maxListedVMs bounds list_vms: a model reads the answer, and a tenant
// may have many more VMs than it can use in one.
const maxListedVMs = 200

func (t *tools) addVMTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "create_vm", Title: "Create a VM",
		Description: "Creates an agentOS VM and returns it. Its id is what the other tools take as vm.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in CreateVMInput) (VMInfo, error) {
			return answer(vmInfo)(t.c.CreateVM(ctx, client.CreateVMRequest{Labels: in.Labels, Env: in.Env, Software: in.Software,
				IdleTimeout: time.Duration(in.IdleTimeoutSeconds) * time.Second}))
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "list_vms", Title: "List VMs",
		Description: "Lists the VMs that have not ended, newest first (all: the ended ones too), at most 200.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in ListVMsInput) (VMList, error) {
			out := VMList{VMs: []VMInfo{}}
			for v, err := range t.c.VMs(ctx, client.ListVMsOptions{Labels: in.Labels, AllStates: in.All}) {
				if err != nil {
					return VMList{}, err
				}
				out.VMs = append(out.VMs, vmInfo(&v))
				if len(out.VMs) == maxListedVMs {
					break
				}
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "hibernate_vm", Title: "Hibernate a VM",
		Description: "Hibernates a VM: its files are kept and it stops using resources; its next use wakes it under the same id.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in VMInput) (VMInfo, error) {
			return answer(vmInfo)(t.c.VM(in.VM).Hibernate(ctx))
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "delete_vm", Title: "Delete a VM",
		Description: "Disposes of a VM and everything in it, for good.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in VMInput) (VMInfo, error) {
			v, err := t.c.VM(in.VM).Delete(ctx)
			if err != nil {
				return VMInfo{}, err
			}
			if v == nil {
				// The VM had ended before: the gateway removed its record
				// and has no final one to return.
				return VMInfo{ID: in.VM, State: string(client.VMDisposed), Reason: "the VM had already ended; its record is now removed"}, nil
			}
			return vmInfo(v), nil
		}))
}
