package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// Create a VM, run a command, and dispose of the VM. (Compiled, not run:
// it needs a gateway.)
func Example() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("AGENTOS_GATEWAY_KEY"))
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Labels: map[string]string{"team": "docs"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.DeleteVM(ctx, vm.ID)

	res, err := c.Exec(ctx, vm.ID, client.ExecRequest{Command: "echo hi", TimeoutMs: 10_000}, client.WithIdempotencyKey("greet-1"))
	switch {
	case client.IsCode(err, client.CodeDeadlineExceeded):
		fmt.Println("too slow")
	case err != nil:
		fmt.Println(err)
	default:
		out, _ := res.StdoutBytes()
		fmt.Printf("exit %d: %s", res.ExitCode, out)
	}
}

// Follow a process's output to its end, surviving dropped connections.
func ExampleClient_FollowProcessOutput() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("AGENTOS_GATEWAY_KEY"),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 10, MaxBackoff: 2 * time.Second}))
	p, err := c.SpawnProcess(ctx, "vm_123", client.SpawnRequest{Argv: []string{"make", "test"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = c.FollowProcessOutput(ctx, "vm_123", p.Pid, func(ev client.Event) error {
		switch ev.Type {
		case client.EventStdout, client.EventStderr:
			o, err := ev.Output()
			if err != nil {
				return err
			}
			os.Stdout.Write(o.Data)
		case client.EventGap:
			g, _ := ev.Gap()
			fmt.Printf("[output %d..%d lost]\n", g.From, g.To)
		case client.EventExit:
			x, _ := ev.Exit()
			fmt.Println("exit", x.ExitCode, x.Signal)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}

// Read events one by one, resuming by hand.
func ExampleStream() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("AGENTOS_GATEWAY_KEY"))
	s, err := c.ProcessOutput(ctx, "vm_123", 7, client.StreamOptions{LastEventID: "41", IdleTimeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Println("reconnect after", s.LastEventID(), "because", err)
			return
		}
		fmt.Println(ev.ID, ev.Type, len(ev.Data))
	}
}

// Upload and download files without holding them in memory.
func ExampleClient_WriteFile() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("AGENTOS_GATEWAY_KEY"))
	if _, err := c.WriteFile(ctx, "vm_123", "/work/notes.txt", strings.NewReader("hello\n"), client.WriteFileOptions{Mkdirs: true}); err != nil {
		fmt.Println(err)
		return
	}
	rc, err := c.ReadFile(ctx, "vm_123", "/work/notes.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rc.Close()
	_, _ = io.Copy(os.Stdout, rc)
}

// Run an agent turn that asks before it runs tools: follow the session's
// events (resuming after dropped connections) and answer each permission
// request as it comes while the prompt waits for the end of the turn.
// (Compiled, not run: it needs a gateway and a model.)
func ExampleClient_FollowSessionEvents() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := client.New("http://127.0.0.1:8080", os.Getenv("AGENTOS_GATEWAY_KEY"))
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Agents: []string{"claude"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.DeleteVM(context.Background(), vm.ID)
	s, err := c.OpenSession(ctx, vm.ID, client.OpenSessionRequest{
		Agent: "claude", Cwd: "/workspace", PermissionPolicy: "ask",
		PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 300},
		Env:               map[string]string{"ANTHROPIC_API_KEY": os.Getenv("ANTHROPIC_API_KEY")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	followed := make(chan error, 1)
	go func() {
		followed <- c.FollowSessionEvents(ctx, vm.ID, s.ID, func(ev client.Event) error {
			switch ev.Type {
			case client.EventEphemeral:
				d, _ := ev.EphemeralEvent()
				fmt.Printf("%s", d.Update) // streamed text, as it comes
			case client.EventDurable:
				e, err := ev.SessionEvent()
				if err != nil || e.Type != "permission_request" {
					return err
				}
				for _, o := range e.Options {
					if o.Kind == "allow_once" {
						_, err := c.AnswerPermission(ctx, vm.ID, s.ID, e.RequestID, o.OptionID)
						return err
					}
				}
			}
			return nil
		})
	}()
	res, err := c.Prompt(ctx, vm.ID, s.ID, client.PromptRequest{
		Content: client.TextPrompt("Create hello.txt saying hi"), IdempotencyKey: "hello-1",
	})
	if err != nil {
		fmt.Println(err)
	} else {
		fmt.Println("\nturn ended:", res.StopReason)
	}
	cancel()
	<-followed
}
