package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func (a *app) sessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Open agent sessions, prompt them and follow their events",
	}
	cmd.AddCommand(a.sessionOpenCommand(), a.sessionPromptCommand(), a.sessionEventsCommand())
	return cmd
}

func (a *app) sessionOpenCommand() *cobra.Command {
	var req client.OpenSessionRequest
	var env []string
	cmd := &cobra.Command{
		Use:   "open VM --agent NAME",
		Short: "Start an agent in a VM, open a session with it and print its id",
		Long: `open starts an agent (pi, claude, codex, opencode: the VM must have been created
with it, vm create --agent NAME) and prints the new session's id alone (its
JSON record with -o json).`,
		Args: args(1, "one VM id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if req.Agent == "" {
				return usageError{msg: "session open needs --agent NAME"}
			}
			var err error
			if req.Env, err = keyValues("env", env); err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.VM(argv[0]).OpenSession(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("open a %s session in VM %s: %w", req.Agent, argv[0], err)
			}
			if a.outputSet && a.output == "json" {
				return a.printJSON(s)
			}
			_, err = fmt.Fprintln(a.stdout, s.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Agent, "agent", "", "the agent: pi, claude, codex, opencode")
	f.StringVar(&req.SessionID, "id", "", "the session's id (default: one the gateway picks)")
	f.StringVar(&req.Cwd, "cwd", "", "the agent's working directory")
	f.StringArrayVarP(&env, "env", "e", nil, "an environment variable of the agent, KEY=VALUE (repeatable)")
	f.StringVar(&req.PermissionPolicy, "policy", "", "what the agent's permission requests get: ask, allow_all or reject_all")
	return cmd
}

func (a *app) sessionPromptCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "prompt VM SESSION [TEXT...]",
		Short: "Prompt a session and print the agent's answer",
		Long: `prompt sends TEXT (the words joined by spaces; stdin when there is none or it is
-) to the session, waits for the end of the turn and prints the text of the
agent's answer. With -o json it prints the turn's result as it came,
{stopReason, message}.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			if len(argv) < 2 {
				return usageError{msg: "session prompt takes a VM id, a session id and the text"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			text := strings.Join(argv[2:], " ")
			if text == "" || text == "-" {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("read the prompt from stdin: %w", err)
				}
				text = string(b)
			}
			if strings.TrimSpace(text) == "" {
				return usageError{msg: "the prompt is empty"}
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.VM(argv[0]).Session(argv[1]).Prompt(cmd.Context(), client.PromptRequest{Content: client.TextPrompt(text)})
			if err != nil {
				return fmt.Errorf("prompt session %s: %w", argv[1], err)
			}
			if a.outputSet && a.output == "json" {
				return a.printJSON(res.PromptResult)
			}
			answer := messageText(res.Message)
			if answer != "" && !strings.HasSuffix(answer, "\n") {
				answer += "\n"
			}
			if _, err := fmt.Fprint(a.stdout, answer); err != nil {
				return err
			}
			if res.StopReason != "end_turn" {
				fmt.Fprintf(a.stderr, "agentos: the turn stopped: %s\n", res.StopReason)
			}
			return nil
		},
	}
}

// messageText is the text of an agent's message: its text blocks, or the
// message itself when it is a string.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(m.Content, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

func (a *app) sessionEventsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "events VM SESSION",
		Short: "Follow a session's events, one JSON object a line",
		Long: `events prints the session's events from its first, one JSON object a line,
{"event": type, "data": ...}, and goes on following them until the session
ends (its VM ended or it was deleted) or Ctrl-C. A dropped connection is
resumed without losing or repeating a durable event.`,
		Args: args(2, "a VM id and a session id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(a.stdout)
			for ev, err := range c.VM(argv[0]).Session(argv[1]).Follow(cmd.Context()) {
				if err != nil {
					return fmt.Errorf("follow session %s: %w", argv[1], err)
				}
				if err := enc.Encode(map[string]any{"event": eventName(ev), "data": ev}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// eventName names an event of a session's stream as the gateway does.
func eventName(ev client.Event) string {
	switch ev := ev.(type) {
	case *client.SessionEvent:
		return "durable"
	case *client.EphemeralEvent:
		return "ephemeral"
	case *client.AgentStderr:
		return "agent_stderr"
	case *client.AgentExit:
		return "agent_exit"
	case *client.Overflow:
		return "overflow"
	case *client.SessionEnd:
		return "end"
	case *client.Gap:
		return "gap"
	case *client.Lost:
		return "lost"
	case *client.UnknownEvent:
		return ev.Type
	}
	return fmt.Sprintf("%T", ev)
}
