// Command oneshot is a test program: it creates a VM, runs echo hi, disposes
// and exits, printing the sidecar's pid first. With ONESHOT_MODE=hold it
// prints the pid and waits to be killed.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := agentos.Start(ctx, agentos.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(s.Pid())
	if os.Getenv("ONESHOT_MODE") == "hold" {
		select {}
	}
	vm, err := s.CreateVM(ctx, agentos.VMOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res, err := vm.Exec(ctx, "echo hi", agentos.ExecOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(string(res.Stdout))
	if err := vm.Dispose(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
