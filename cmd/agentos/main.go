// Command agentos is the command line of agentos-gateway: it creates and
// lists VMs, runs commands in them, opens interactive shells, copies files
// both ways, follows process output and agent sessions, mints tokens and
// forwards guest ports, through the gateway's REST API and the Go client.
//
// It is configured by --url and --key, or the AGENTOS_URL and
// AGENTOS_API_KEY environment variables, or what `agentos login` stored, in
// that order of precedence.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one command line and returns the process's exit code. It
// returns rather than exits so that deferred clean-ups (a terminal's raw
// mode above all) always run.
func run(args []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	stop := a.watchSignals(cancel)
	defer stop()

	root := a.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return a.exitCode(err)
}

// app is what every command shares: its streams, the environment, the
// global flags and the signal routing.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	flagURL, flagKey string
	output           string
	outputSet        bool

	// url is the gateway address the last client was made for, named in
	// the errors about reaching it.
	url string

	mu sync.Mutex
	// onSignal, when set, gets SIGINT, SIGTERM and SIGHUP first; it
	// returns false to let the signal cancel the command as usual.
	onSignal func(os.Signal) bool
	// caught is the signal that cancelled the command.
	caught os.Signal
}

// watchSignals cancels the command on SIGINT, SIGTERM or SIGHUP unless a
// command took them over (exec forwards them to its process).
func (a *app) watchSignals(cancel context.CancelFunc) func() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				a.mu.Lock()
				h := a.onSignal
				a.mu.Unlock()
				if h != nil && h(s) {
					continue
				}
				a.mu.Lock()
				if a.caught == nil {
					a.caught = s
				}
				a.mu.Unlock()
				cancel()
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// handleSignals routes the signals to h until the returned function is
// called.
func (a *app) handleSignals(h func(os.Signal) bool) func() {
	a.mu.Lock()
	a.onSignal = h
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.onSignal = nil
		a.mu.Unlock()
	}
}

// exitError ends the command with a code and no message: the exit status
// of a remote command or shell.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode prints err, if it has something to say, as one line on stderr
// and returns the process's exit code.
func (a *app) exitCode(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := errors.AsType[exitError](err); ok {
		return e.code
	}
	a.mu.Lock()
	caught := a.caught
	a.mu.Unlock()
	if caught != nil {
		// Interrupted by the user, whatever the cut-short call said: the
		// shell's convention, 128 + signal, and nothing to print.
		return 128 + int(caught.(syscall.Signal))
	}
	// One line: cobra's own errors may add suggestions on lines of their
	// own.
	msg, _, _ := strings.Cut(describe(err, a.url), "\n")
	fmt.Fprintln(a.stderr, "agentos: "+msg)
	if _, ok := errors.AsType[usageError](err); ok || strings.HasPrefix(err.Error(), "unknown command") {
		return 2
	}
	return 1
}
