// Command mockanthropic serves the scripted mock of the Anthropic Messages
// API (package mockanthropic) to tests that are not Go, such as the Python
// SDK's: one mock, one set of reply rules, whatever language drives it.
//
// It listens on a free loopback port and prints one JSON line on stdout:
// the base URL, the session environment that points the agents at it, and
// the texts of its scripted replies. It serves until its standard input
// closes (its parent died or is done) or it gets SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// hello is the line a parent reads before it points anything at the mock.
type hello struct {
	URL       string            `json:"url"`
	Port      int               `json:"port"`
	Env       map[string]string `json:"env"`
	HelloText string            `json:"helloText"`
	DoneText  string            `json:"doneText"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mockanthropic:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s, err := mockanthropic.Listen()
	if err != nil {
		return err
	}
	defer s.Close()

	line, err := json.Marshal(hello{URL: s.URL(), Port: s.Port(), Env: s.Env(),
		HelloText: mockanthropic.HelloText, DoneText: mockanthropic.DoneText})
	if err != nil {
		return err
	}
	if _, err := fmt.Printf("%s\n", line); err != nil {
		return err
	}

	// Standard input closing is the parent's end, even when it could not
	// send a signal (it was killed).
	stdinClosed := make(chan struct{})
	go func() {
		defer close(stdinClosed)
		_, _ = io.Copy(io.Discard, os.Stdin)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return nil
}
