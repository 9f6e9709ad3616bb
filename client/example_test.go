package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// These examples run against a real gateway that TestMain starts; a
// program of your own reads the same variables.

// exampleClient is how the examples connect.
func exampleClient() *client.Client {
	c, err := client.New(os.Getenv("AGENTOS_URL"), os.Getenv("AGENTOS_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// exampleVM creates a VM as Example does, and returns its handle; the
// caller deletes it.
func exampleVM(ctx context.Context, c *client.Client, req client.CreateVMRequest) *client.VMHandle {
	created, err := c.CreateVM(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	return c.VM(created.ID)
}

// Create a VM, run a command in it, and dispose of the VM.
func Example() {
	ctx := context.Background()
	c, err := client.New(os.Getenv("AGENTOS_URL"), os.Getenv("AGENTOS_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	created, err := c.CreateVM(ctx, client.CreateVMRequest{Labels: map[string]string{"team": "docs"}})
	if err != nil {
		log.Fatal(err)
	}
	vm := c.VM(created.ID)
	defer vm.Delete(ctx)

	res, err := vm.Exec(ctx, client.ExecRequest{Command: "echo hello; exit 3", Timeout: 10 * time.Second})
	switch {
	case client.IsCode(err, client.CodeDeadlineExceeded):
		fmt.Println("too slow")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
	}
	// Output: exit 3: hello
}

// Branch on the gateway's error codes, never on the text of an error.
func ExampleError() {
	ctx := context.Background()
	c := exampleClient()
	_, err := c.VM("vm_that_does_not_exist").Get(ctx)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
	}
	fmt.Println(client.IsCode(err, client.CodeNotFound))
	// Output:
	// 404 not_found
	// true
}

// Stream a command's output into writers as it comes.
func ExampleVMHandle_Exec_writers() {
	ctx := context.Background()
	c := exampleClient()
	vm := exampleVM(ctx, c, client.CreateVMRequest{})
	defer vm.Delete(ctx)

	var stderr strings.Builder
	res, err := vm.Exec(ctx, client.ExecRequest{
		Command: `for i in 1 2 3; do echo line $i; done; echo done >&2`,
		Stdout:  os.Stdout,
		Stderr:  &stderr,
	}, client.WithIdempotencyKey("example-lines-1"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d, stderr %q\n", res.ExitCode, stderr.String())
	// Output:
	// line 1
	// line 2
	// line 3
	// exit 0, stderr "done\n"
}

// Follow a process's output to its end with a type switch over its events;
// the iterator reconnects after a dropped connection without losing or
// repeating output.
func ExampleProcessHandle_Follow() {
	ctx := context.Background()
	c := exampleClient()
	vm := exampleVM(ctx, c, client.CreateVMRequest{})
	defer vm.Delete(ctx)

	p, err := vm.Spawn(ctx, client.SpawnRequest{Command: `sh -c "while read l; do echo got $l; done"`})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte("hello\n")); err != nil {
		log.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		log.Fatal(err)
	}
	for ev, err := range p.Follow(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev := ev.(type) {
		case *client.Output:
			fmt.Printf("%s: %s", ev.Stream, ev.Data)
		case *client.Gap:
			fmt.Printf("[output %d..%d lost]\n", ev.From, ev.To)
		case *client.Exit:
			fmt.Println("exit", ev.ExitCode)
		}
	}
	// Output:
	// stdout: got hello
	// exit 0
}

// Iterate over every VM a label selects; the pages are fetched as the loop
// goes on.
func ExampleClient_VMs() {
	ctx := context.Background()
	c := exampleClient()
	for range 2 {
		defer exampleVM(ctx, c, client.CreateVMRequest{Labels: map[string]string{"example": "vms"}}).Delete(ctx)
	}
	n := 0
	for vm, err := range c.VMs(ctx, client.ListVMsOptions{Labels: map[string]string{"example": "vms"}, Limit: 1}) {
		if err != nil {
			log.Fatal(err)
		}
		if vm.State == client.VMReady {
			n++
		}
	}
	fmt.Println(n, "ready VMs")
	// Output: 2 ready VMs
}

// Upload and download files without holding them in memory.
func ExampleVMHandle_WriteFile() {
	ctx := context.Background()
	c := exampleClient()
	vm := exampleVM(ctx, c, client.CreateVMRequest{})
	defer vm.Delete(ctx)

	if _, err := vm.WriteFile(ctx, "/workspace/notes/hello.txt", strings.NewReader("hello\n"), client.WriteFileOptions{Mkdirs: true}); err != nil {
		log.Fatal(err)
	}
	rc, err := vm.ReadFile(ctx, "/workspace/notes/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	_, _ = io.Copy(os.Stdout, rc)
	rc.Close()
	entries, err := vm.ListDir(ctx, "/workspace/notes", client.ListDirOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		st, err := vm.Stat(ctx, e.Path)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Name, st.Size)
	}
	// Output:
	// hello
	// hello.txt 6
}

// Run an agent turn while its events stream in: the text deltas as they
// come, then the durable record of the turn. The stream is opened before
// the prompt, since deltas are live only (durable events are also
// replayed). (The gateway of the examples points the agent at a mock model;
// a real key and no ANTHROPIC_BASE_URL reach Anthropic.)
func ExampleSessionHandle_Events() {
	ctx := context.Background()
	c := exampleClient()
	port, _ := strconv.Atoi(os.Getenv("MOCK_MODEL_PORT"))
	vm := exampleVM(ctx, c, client.CreateVMRequest{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(port)}})
	defer vm.Delete(ctx)
	s, err := vm.OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", Env: map[string]string{
		"ANTHROPIC_API_KEY":  os.Getenv("ANTHROPIC_API_KEY"),
		"ANTHROPIC_BASE_URL": os.Getenv("ANTHROPIC_BASE_URL"),
	}})
	if err != nil {
		log.Fatal(err)
	}
	session := vm.Session(s.ID)
	events, err := session.Events(ctx, client.StreamOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer events.Close()

	streamed := make(chan string)
	go func() {
		var text strings.Builder
		for {
			ev, err := events.Next(ctx)
			if err != nil {
				log.Fatal(err)
			}
			switch ev := ev.(type) {
			case *client.EphemeralEvent:
				var u struct {
					Content struct{ Text string } `json:"content"`
				}
				if json.Unmarshal(ev.Update, &u) == nil {
					text.WriteString(u.Content.Text)
				}
			case *client.SessionEvent:
				fmt.Println(ev.Sequence, ev.Type)
				if ev.Type == "agent_message_chunk" {
					streamed <- text.String()
					return
				}
			}
		}
	}()
	res, err := session.Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("Say hello"), IdempotencyKey: "hello-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("streamed %q\n", <-streamed)
	fmt.Println("turn ended:", res.StopReason)
	// Output:
	// 1 user_message_chunk
	// 2 agent_message_chunk
	// streamed "Hello from the mock LLM."
	// turn ended: end_turn
}

// A webhook of the tenant's checks that the gateway sent each request before
// it answers: a binding call's answer is any JSON, which the guest command
// prints as its result. (Not run: it serves until stopped.)
func ExampleVerifyWebhook() {
	ctx := context.Background()
	secret, err := exampleClient().WebhookSecret(ctx)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/weather", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		if err := client.VerifyWebhook(secret.Secret, r.Header, body); err != nil {
			http.Error(w, "not from the gateway", http.StatusUnauthorized)
			return
		}
		var call struct {
			Binding string          `json:"binding"`
			Input   json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(body, &call); err != nil {
			http.Error(w, "not a binding call", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"binding": call.Binding, "forecast": "sunny"})
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:9000", nil))
}
