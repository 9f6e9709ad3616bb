package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// format is the output format: -o, else a table for a terminal and JSON
// for a program.
func (a *app) format() string {
	if a.output != "" {
		return a.output
	}
	if isTerminal(a.stdout) {
		return "table"
	}
	return "json"
}

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// keyValues parses repeated k=v flag values.
func keyValues(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(vals))
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{msg: fmt.Sprintf("--%s %q: want KEY=VALUE", flag, kv)}
		}
		m[k] = v
	}
	return m, nil
}

// labelSelector parses ls's -l values: KEY=VALUE or KEY:VALUE must match,
// KEY!=VALUE must not.
func labelSelector(vals []string) (match, notMatch map[string]string, err error) {
	for _, sel := range vals {
		m := &match
		i := strings.IndexAny(sel, "=:")
		if i < 1 {
			return nil, nil, usageError{msg: fmt.Sprintf("--label %q: want KEY=VALUE, KEY:VALUE or KEY!=VALUE", sel)}
		}
		k, v := sel[:i], sel[i+1:]
		if sel[i] == '=' && strings.HasSuffix(k, "!") {
			k, m = k[:len(k)-1], &notMatch
		}
		if k == "" {
			return nil, nil, usageError{msg: fmt.Sprintf("--label %q: want KEY=VALUE, KEY:VALUE or KEY!=VALUE", sel)}
		}
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	return match, notMatch, nil
}

func labelsText(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// printVMs writes VMs as a table or a JSON array.
func (a *app) printVMs(vms []client.VM) error {
	if a.format() == "json" {
		if vms == nil {
			vms = []client.VM{}
		}
		return a.printJSON(vms)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tLABELS\tCREATED")
	for _, v := range vms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, v.State, labelsText(v.Labels), v.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// printVM writes one VM as its JSON record or as lines of key and value.
func (a *app) printVM(v *client.VM) error {
	if a.format() == "json" {
		return a.printJSON(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("ID", v.ID)
	row("State", v.State)
	if v.Reason != "" {
		row("Reason", v.Reason)
	}
	row("Labels", labelsText(v.Labels))
	if len(v.Agents) > 0 {
		row("Agents", strings.Join(v.Agents, ","))
	}
	if len(v.Software) > 0 {
		row("Software", strings.Join(v.Software, ","))
	}
	if v.Node != "" {
		row("Node", v.Node)
	}
	if v.IdleTimeoutSeconds > 0 {
		row("Idle timeout", v.IdleTimeout().String()+" ("+v.OnIdle+")")
	}
	if v.HibernatedAt != nil {
		row("Hibernated", v.HibernatedAt.Local().Format(time.DateTime))
	}
	row("Created", v.CreatedAt.Local().Format(time.DateTime))
	return tw.Flush()
}

func (a *app) vmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Create, list, inspect, hibernate, wake and remove VMs",
		Long: `Create, list, inspect, hibernate, wake and remove VMs.

ls, get, hibernate and wake print a table when stdout is a terminal and JSON
otherwise; -o json or -o table chooses. create prints the new VM's id alone
(its JSON record with -o json).`,
	}
	cmd.AddCommand(a.vmCreateCommand(), a.vmListCommand(), a.vmGetCommand(), a.vmRemoveCommand(),
		a.vmActionCommand("hibernate", "Hibernate a VM: store its files and stop it until its next use",
			func(h *client.VMHandle) vmAction { return h.Hibernate }),
		a.vmActionCommand("wake", "Wake a hibernated VM (or restore a lost one from its checkpoint)",
			func(h *client.VMHandle) vmAction { return h.Wake }))
	return cmd
}

func (a *app) vmCreateCommand() *cobra.Command {
	var labels, env, agents, software []string
	var exemptPorts []int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a VM and print its id",
		Args:  args(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := client.CreateVMRequest{Agents: agents, Software: software}
			for _, p := range exemptPorts {
				if p < 1 || p > 65535 {
					return usageError{msg: fmt.Sprintf("--loopback-exempt-port %d is not a port number", p)}
				}
				req.LoopbackExemptPorts = append(req.LoopbackExemptPorts, uint16(p))
			}
			var err error
			if req.Labels, err = keyValues("label", labels); err != nil {
				return err
			}
			if req.Env, err = keyValues("env", env); err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			vm, err := c.CreateVM(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create a VM: %w", err)
			}
			if a.outputSet && a.output == "json" {
				return a.printJSON(vm)
			}
			_, err = fmt.Fprintln(a.stdout, vm.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&labels, "label", "l", nil, "a label, KEY=VALUE (repeatable)")
	f.StringArrayVarP(&env, "env", "e", nil, "an environment variable of the VM, KEY=VALUE (repeatable)")
	f.StringArrayVar(&agents, "agent", nil, "an agent the VM can run: pi, claude, codex, opencode (repeatable)")
	f.StringArrayVar(&software, "software", nil, "a software package to install, such as @agentos-software/pi (repeatable)")
	f.IntSliceVar(&exemptPorts, "loopback-exempt-port", nil, "a host loopback port the guest may reach (repeatable)")
	return cmd
}

func (a *app) vmListCommand() *cobra.Command {
	var labels []string
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List VMs, optionally those whose labels match",
		Args:    args(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, notSel, err := labelSelector(labels)
			if err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			var vms []client.VM
			for vm, err := range c.VMs(cmd.Context(), client.ListVMsOptions{Labels: sel, NotLabels: notSel, AllStates: all}) {
				if err != nil {
					return fmt.Errorf("list VMs: %w", err)
				}
				vms = append(vms, vm)
			}
			return a.printVMs(vms)
		},
	}
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "list only VMs with this label, KEY=VALUE or KEY:VALUE, or without it, KEY!=VALUE (repeatable: all must match)")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "list ended VMs too")
	return cmd
}

func (a *app) vmGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get VM",
		Short: "Show a VM",
		Args:  args(1, "one VM id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			vm, err := c.VM(argv[0]).Get(cmd.Context())
			if err != nil {
				return fmt.Errorf("get VM %s: %w", argv[0], err)
			}
			return a.printVM(vm)
		},
	}
}

func (a *app) vmRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm VM...",
		Aliases: []string{"delete"},
		Short:   "Remove VMs (dispose of them) and print their ids",
		Args: func(cmd *cobra.Command, argv []string) error {
			if len(argv) == 0 {
				return usageError{msg: cmd.CommandPath() + " takes one or more VM ids"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			for _, id := range argv {
				if _, err := c.VM(id).Delete(cmd.Context()); err != nil {
					return fmt.Errorf("remove VM %s: %w", id, err)
				}
				fmt.Fprintln(a.stdout, id)
			}
			return nil
		},
	}
}

// vmAction is a call on a VM that answers its record.
type vmAction = func(context.Context) (*client.VM, error)

func (a *app) vmActionCommand(name, short string, action func(*client.VMHandle) vmAction) *cobra.Command {
	return &cobra.Command{
		Use:   name + " VM",
		Short: short,
		Args:  args(1, "one VM id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			vm, err := action(c.VM(argv[0]))(cmd.Context())
			if err != nil {
				return fmt.Errorf("%s VM %s: %w", name, argv[0], err)
			}
			return a.printVM(vm)
		},
	}
}
