package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// maxStdinWrite is the most one stdin write may carry (the engine's limit
// for one write).
const maxStdinWrite = 64 << 10

func (a *app) execCommand() *cobra.Command {
	var interactive bool
	cmd := &cobra.Command{
		Use:   "exec [-i] VM -- CMD [ARGS...]",
		Short: "Run a command in a VM, streaming its output, and exit with its status",
		Long: `exec runs a command in a VM as a process and streams its stdout and stderr to
this command's stdout and stderr as they arrive. It exits with the command's
exit code (128+N when a signal N ended it).

One word after -- is a command line, run directly when it is a simple command
and through sh -c otherwise ("exit 3", "cd /tmp && ls"); several words are the
program and its arguments, with no shell.

Without -i the command's stdin is closed at once; with -i this command's stdin
is passed to it, then closed at its end. Ctrl-C (SIGINT), SIGTERM and SIGHUP
are sent on to the process; a third Ctrl-C gives up waiting for it.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			if at := cmd.ArgsLenAtDash(); at > 1 {
				return usageError{msg: "exec takes one VM id before --"}
			}
			if len(commandArgs(argv)) == 0 {
				return usageError{msg: "exec takes a VM id and a command: agentos exec VM -- CMD [ARGS...]"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.runExec(cmd.Context(), argv[0], commandArgs(argv), interactive)
		},
	}
	// Flags end at the VM id: what follows is the command's, its flags
	// included, with or without --.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command")
	return cmd
}

// commandArgs is the command of exec's arguments: what follows the VM id,
// without the -- that the flag parser leaves there once it stopped at the
// id.
func commandArgs(argv []string) []string {
	if len(argv) < 2 {
		return nil
	}
	rest := argv[1:]
	if rest[0] == "--" {
		rest = rest[1:]
	}
	return rest
}

func (a *app) runExec(ctx context.Context, vmID string, argv []string, interactive bool) error {
	c, _, err := a.client()
	if err != nil {
		return err
	}
	req := client.SpawnRequest{Argv: argv}
	if len(argv) == 1 {
		req = client.SpawnRequest{Command: argv[0]}
	}
	p, err := c.VM(vmID).Spawn(ctx, req)
	if err != nil {
		return fmt.Errorf("run in VM %s: %w", vmID, err)
	}
	// From here on the signals belong to the process: the first ones are
	// sent to it, and the third ends the wait.
	interrupts := 0
	defer a.handleSignals(func(s os.Signal) bool {
		interrupts++
		if interrupts >= 3 {
			return false
		}
		sig := signalName(s.(syscall.Signal))
		go func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Signal(sctx, client.Signal(sig)); err != nil && !client.IsCode(err, client.CodeConflict) {
				fmt.Fprintf(a.stderr, "agentos: send %s to process %d: %s\n", sig, p.Pid(), describe(err, a.url))
			}
		}()
		return true
	})()
	if interactive {
		go a.pumpStdin(ctx, p)
	} else if err := p.CloseStdin(ctx); err != nil && !client.IsCode(err, client.CodeConflict) {
		// A process that exited already has no stdin to close
		// (conflict); anything else is worth saying.
		fmt.Fprintf(a.stderr, "agentos: close the stdin of process %d: %s\n", p.Pid(), describe(err, a.url))
	}
	return a.follow(ctx, p, fmt.Sprintf("follow process %d of VM %s", p.Pid(), vmID), true)
}

// pumpStdin copies this command's stdin to the process, then closes the
// process's stdin. A write the process refuses (it exited) ends the copy
// quietly: the exit status tells the rest.
func (a *app) pumpStdin(ctx context.Context, p *client.ProcessHandle) {
	buf := make([]byte, maxStdinWrite)
	for {
		n, rerr := a.stdin.Read(buf)
		if n > 0 {
			if err := p.WriteStdin(ctx, buf[:n]); err != nil {
				return
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				fmt.Fprintf(a.stderr, "agentos: read stdin: %v\n", rerr)
			}
			_ = p.CloseStdin(ctx)
			return
		}
	}
}

// follow copies a process's output to stdout and stderr until it exits
// and, when withStatus, returns its exit status as an exitError.
func (a *app) follow(ctx context.Context, p *client.ProcessHandle, what string, withStatus bool) error {
	for ev, err := range p.Follow(ctx) {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		switch ev := ev.(type) {
		case *client.Output:
			if err := a.writeOutput(ev); err != nil {
				return err
			}
		case *client.Gap:
			fmt.Fprintf(a.stderr, "agentos: output %d to %d was lost (the gateway's buffer no longer held it)\n", ev.From, ev.To)
		case *client.Exit:
			if !withStatus {
				return nil
			}
			if code := exitStatusCode(ev.ExitStatus); code != 0 {
				return exitError{code: code}
			}
			return nil
		case *client.Lost:
			return fmt.Errorf("%s: the VM was lost with its gateway node", what)
		}
	}
	return nil
}

func (a *app) writeOutput(ev *client.Output) error {
	w := a.stdout
	if ev.Stream == client.Stderr {
		w = a.stderr
	}
	if _, err := w.Write(ev.Data); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// exitStatusCode is a process's status as a shell reports it: its exit
// code, or 128+N when signal N ended it.
func exitStatusCode(st client.ExitStatus) int {
	if st.Signal != "" && st.ExitCode < 128 {
		if n := unix.SignalNum(string(st.Signal)); n != 0 {
			return 128 + int(n)
		}
	}
	return st.ExitCode
}

// signalName is the POSIX name of a signal, such as SIGINT.
func signalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(int(s))
}

func (a *app) logsCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs VM PID",
		Short: "Print a process's output (-f: follow it until the process exits)",
		Long: `logs prints the output of a process (one started by exec, or through the API)
that the gateway still holds, stdout to stdout and stderr to stderr. With -f
it goes on printing the output as it comes until the process exits,
reconnecting without losing or repeating output when the connection drops,
and exits with the process's status, as exec does (128+N for signal N).`,
		Args: args(2, "a VM id and a process id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			pid, err := strconv.ParseUint(argv[1], 10, 32)
			if err != nil {
				return usageError{msg: fmt.Sprintf("the process id %q is not a number", argv[1])}
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			return a.logs(cmd.Context(), c.VM(argv[0]).Process(uint32(pid)), argv[0], follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the process exits")
	return cmd
}

func (a *app) logs(ctx context.Context, p *client.ProcessHandle, vmID string, follow bool) error {
	what := fmt.Sprintf("process %d of VM %s", p.Pid(), vmID)
	info, err := p.Get(ctx)
	if err != nil {
		return fmt.Errorf("get %s: %w", what, err)
	}
	if follow || !info.Running {
		// The stream of an exited process ends after its output; -f
		// ends with the process's status.
		return a.follow(ctx, p, "follow "+what, follow)
	}
	// The stream of a running process never ends by itself: read up to
	// the latest output sequence, which the gateway names when asked to
	// resume past it.
	latest, err := latestSequence(ctx, p)
	if err != nil {
		return fmt.Errorf("read the output of %s: %w", what, err)
	}
	if latest == 0 {
		return nil
	}
	s, err := p.Output(ctx, client.StreamOptions{})
	if err != nil {
		return fmt.Errorf("read the output of %s: %w", what, err)
	}
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the output of %s: %w", what, err)
		}
		switch ev := ev.(type) {
		case *client.Output:
			if err := a.writeOutput(ev); err != nil {
				return err
			}
			if ev.Seq >= latest {
				return nil
			}
		case *client.Gap:
			fmt.Fprintf(a.stderr, "agentos: output %d to %d was lost (the gateway's buffer no longer held it)\n", ev.From, ev.To)
			if ev.To >= latest {
				return nil
			}
		case *client.Exit:
			return nil
		}
	}
}

// latestSequence asks for the output after the largest sequence number,
// which the gateway refuses with the latest one in details.latestSequence.
func latestSequence(ctx context.Context, p *client.ProcessHandle) (uint64, error) {
	s, err := p.Output(ctx, client.StreamOptions{LastEventID: strconv.FormatUint(1<<63-1, 10)})
	if err == nil {
		s.Close()
		return 0, errors.New("the gateway did not name the latest output sequence")
	}
	ce, ok := errors.AsType[*client.Error](err)
	if !ok || ce.Code != client.CodeInvalidArgument {
		return 0, err
	}
	switch n := ce.Details["latestSequence"].(type) {
	case float64:
		return uint64(n), nil
	case string:
		return strconv.ParseUint(n, 10, 64)
	}
	return 0, err
}
