package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	agentmcp "github.com/agentos-gateway/agentos-gateway/mcp"
)

func (a *app) mcpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the gateway's tools to an MCP client over stdio",
		Long: `mcp is a Model Context Protocol server on standard input and output, for the
clients that start their servers as processes (Claude Desktop, Claude Code and
the like). Its tools call the gateway that --url, AGENTOS_URL or "agentos login"
names, with that key or token, and it ends when its input does.

The tools: create_vm, list_vms, hibernate_vm, delete_vm, exec (its output also
comes as progress notifications when the client sends a progress token),
read_file, write_file, list_files, delete_file, spawn_process,
read_process_log and open_preview. The gateway serves the same tools itself
over Streamable HTTP at /mcp. See docs/mcp.md.`,
		Args: args(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			t := &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}}
			err = agentmcp.NewServer(c, "").Run(cmd.Context(), t)
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				// The client closed our input, or a signal ended us: both
				// are how a stdio server is asked to stop.
				return nil
			}
			return fmt.Errorf("mcp: %w", err)
		},
	}
}

// nopWriteCloser is stdout for the transport, which closes its writer when
// the session ends: the process's stdout stays the process's.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
