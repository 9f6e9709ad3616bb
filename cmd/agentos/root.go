package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentos",
		Short: "The command line of agentos-gateway",
		Long: `agentos drives an agentos-gateway: VMs, commands, shells, files, process
output, agent sessions, tokens and guest ports.

The gateway and the API key come from --url and --key, else from the
AGENTOS_URL and AGENTOS_API_KEY environment variables, else from what
"agentos login" stored in the user's config directory
(~/.config/agentos/config.json on Linux). The URL defaults to ` + defaultURL + `,
the gateway's default listen address.

Errors print one line on stderr and exit 1 (2 for a malformed command line);
exec and shell exit with the remote command's status.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.outputSet = cmd.Flags().Changed("output")
			switch a.output {
			case "", "json", "table":
				return nil
			}
			return usageError{msg: fmt.Sprintf("--output %q: want json or table", a.output)}
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.flagURL, "url", "", "gateway URL (env "+envURL+"; default "+defaultURL+")")
	pf.StringVar(&a.flagKey, "key", "", "API key or token (env "+envKey+")")
	pf.StringVarP(&a.output, "output", "o", "", "output format, json or table (default: table when stdout is a terminal, json otherwise)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{msg: err.Error()} })
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.AddCommand(a.loginCommand(), a.vmCommand(), a.execCommand(), a.shellCommand(), a.cpCommand(),
		a.logsCommand(), a.sessionCommand(), a.tokenCommand(), a.portForwardCommand(), a.mcpCommand())
	return root
}

// args checks a command's positional arguments, as a usage error.
func args(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{msg: fmt.Sprintf("%s takes %s", cmd.CommandPath(), names)}
		}
		return nil
	}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

func (a *app) loginCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "login",
		Short: "Check a gateway URL and API key and store them for the next commands",
		Long: `login stores the gateway URL and API key in the user's config directory
(<config dir>/agentos/config.json, readable by the user alone), after checking
them with GET /v1/me.

The URL comes from --url or AGENTOS_URL, else it is asked for on a terminal
(default: the stored one, else ` + defaultURL + `). The key comes from --key or
AGENTOS_API_KEY, else it is asked for on a terminal without echo, else it is
read as the first line of standard input (echo "$KEY" | agentos login).`,
		Args: args(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			stored, err := loadConfig()
			if err != nil {
				return err
			}
			interactive := isTerminal(a.stdin)
			in := bufio.NewReader(a.stdin)
			u := a.flagURL
			if u == "" {
				u = a.envVar(envURL)
			}
			if u == "" {
				u = stored.URL
				if u == "" {
					u = defaultURL
				}
				if interactive {
					fmt.Fprintf(a.stderr, "Gateway URL [%s]: ", u)
					line, err := readLine(in)
					if err != nil {
						return fmt.Errorf("read the gateway URL: %w", err)
					}
					if line = strings.TrimSpace(line); line != "" {
						u = line
					}
				}
			}
			u = strings.TrimRight(u, "/")
			key := a.flagKey
			if key == "" {
				key = a.envVar(envKey)
			}
			if key == "" {
				if interactive {
					fmt.Fprint(a.stderr, "API key: ")
					b, err := term.ReadPassword(int(a.stdin.(*os.File).Fd()))
					fmt.Fprintln(a.stderr)
					if err != nil {
						return fmt.Errorf("read the API key: %w", err)
					}
					key = string(b)
				} else if line, err := readLine(in); err == nil {
					key = line
				}
			}
			if key = strings.TrimSpace(key); key == "" {
				return usageError{msg: "no API key given: pass --key, set " + envKey + ", or type it when asked"}
			}
			c, err := a.newClient(u, key)
			if err != nil {
				return err
			}
			me, err := c.Me(cmd.Context())
			if err != nil {
				return fmt.Errorf("check the key: %w", err)
			}
			p, err := saveConfig(config{URL: u, Key: key})
			if err != nil {
				return err
			}
			who := "tenant " + me.Tenant.ID
			switch {
			case me.Admin:
				who = "the admin key"
			case me.Token != nil:
				who = "a token of tenant " + me.Tenant.ID
			}
			fmt.Fprintf(a.stderr, "Logged in to %s as %s; saved in %s\n", u, who, p)
			return nil
		},
	}
}
