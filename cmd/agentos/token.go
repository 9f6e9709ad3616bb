package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint short-lived tokens for browsers and end users",
	}
	cmd.AddCommand(a.tokenCreateCommand())
	return cmd
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var req client.TokenRequest
	cmd := &cobra.Command{
		Use:   "create --scope SCOPE... [--vm VM] [--ttl DURATION]",
		Short: "Mint a token and print its secret",
		Long: `create mints a token with the tenant key and prints its secret alone (its JSON
record, secret included, with -o json). The secret is shown this once.

Scopes: ` + strings.Join([]string{client.ScopeVMRead, client.ScopeVMWrite, client.ScopeExec, client.ScopeShells,
			client.ScopeFilesRead, client.ScopeFilesWrite, client.ScopeSessions, client.ScopePreviews}, ", ") + `.`,
		Example: `  agentos token create --scope vm:read,shells --vm vm_123 --ttl 10m`,
		Args:    args(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(req.Scopes) == 0 {
				return usageError{msg: "token create needs at least one --scope"}
			}
			if req.TTL < 0 {
				return usageError{msg: "--ttl must be positive"}
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			tok, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create a token: %w", err)
			}
			if a.outputSet && a.output == "json" {
				return a.printJSON(tok)
			}
			_, err = fmt.Fprintln(a.stdout, tok.Secret)
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&req.Scopes, "scope", nil, "a scope the token carries (repeatable, or comma-separated)")
	f.StringVar(&req.VM, "vm", "", "the one VM the token may act on (default: any)")
	f.StringVar(&req.Session, "session", "", "the one agent session of --vm the token may act on")
	f.DurationVar(&req.TTL, "ttl", 0, "the token's life, such as 10m (default: the gateway's, 15m)")
	f.StringSliceVar(&req.Origins, "origin", nil, "a browser origin the token may be used from (repeatable; default: any)")
	f.StringVar(&req.Label, "label", "", "a label shown in the token's listing")
	return cmd
}
