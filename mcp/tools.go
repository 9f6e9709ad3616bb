// Package agentmcp serves the gateway's API as Model Context Protocol
// tools: create, list, hibernate and delete VMs, run commands (with their
// output as progress notifications), read, write, list and delete files,
// spawn processes and read their output, and open preview URLs.
//
// There is one tool set, built over the Go client (package client), and
// two ways to reach it. NewServer serves it for one client, which is what
// `agentos mcp` runs over stdio against a gateway. NewHandler serves it
// over Streamable HTTP at the gateway's /mcp, with a client per request
// that carries the caller's own credential into the gateway's router in
// process (package inproc): a tool call is a REST call, so authentication,
// token scopes, quotas, rate limits and audit apply to it as they do to
// any, and there is no second permission model to keep in step.
//
// A refusal of the gateway is a tool error (a result with isError set)
// whose text is the gateway's sentence, the problem's detail, so that the
// model reads why; a protocol error is kept for a malformed call.
package agentmcp

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// Name is the implementation name the server announces.
const Name = "agentos-gateway"

// schemas is shared by every server: NewHandler builds one per request,
// and inferring the tools' schemas once is what keeps that cheap.
var schemas = mcp.NewSchemaCache()

// NewServer returns an MCP server whose tools call the gateway through c.
// version is announced in the server's implementation info (empty: the
// module version the binary was built from).
func NewServer(c *client.Client, version string) *mcp.Server {
	if version == "" {
		version = buildVersion()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "agentOS gateway", Version: version}, &mcp.ServerOptions{
		Instructions: "Tools of an agentOS gateway: create a VM (create_vm), then run commands in it (exec), " +
			"read and write its files, spawn long-running processes and read their output, and open preview URLs of its ports. " +
			"Every tool but create_vm and list_vms takes the VM's id as vm.",
		SchemaCache: schemas,
	})
	t := &tools{c: c}
	t.addVMTools(s)
	t.addExecTools(s)
	t.addFileTools(s)
	t.addPreviewTools(s)
	return s
}

// tools are the tool handlers over one client.
type tools struct{ c *client.Client }

// GatewayError is a tool's error when the gateway refused the call: its
// text is the gateway's own sentence (the problem's detail), which is what
// the model should read; the whole problem is in Problem.
type GatewayError struct{ Problem *client.Error }

func (e *GatewayError) Error() string {
	if e.Problem.Detail != "" {
		return e.Problem.Detail
	}
	if e.Problem.Title != "" {
		return e.Problem.Title
	}
	return e.Problem.Error()
}

func (e *GatewayError) Unwrap() error { return e.Problem }

// toolError is err as a tool reports it: a gateway problem as its
// sentence, anything else (a transport failure, a bad argument) as it is.
func toolError(err error) error {
	if p, ok := errors.AsType[*client.Error](err); ok {
		return &GatewayError{Problem: p}
	}
	return err
}

// handle adapts a tool function to the SDK's typed handler, turning its
// error into the tool error.
func handle[In, Out any](f func(ctx context.Context, req *mcp.CallToolRequest, in In) (Out, error)) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := f(ctx, req, in)
		if err != nil {
			var zero Out
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	}
}

// answer is the shape of a tool that makes one call of the gateway: what
// the call returns, through conv, or its error as it is (handle makes it
// the tool error), as in answer(vmInfo)(t.c.VM(in.VM).Hibernate(ctx)).
func answer[T, Out any](conv func(T) Out) func(T, error) (Out, error) {
	return func(v T, err error) (Out, error) {
		if err != nil {
			var zero Out
			return zero, err
		}
		return conv(v), nil
	}
}

// buildVersion is the main module's version, "(devel)" in a build from a
// checkout.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func ptr[T any](v T) *T { return &v }
