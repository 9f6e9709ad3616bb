// Command soak runs the gateway's soak (make soak): a real gateway binary
// under mixed load from three tenants for SOAK_MINUTES minutes (10 by
// default) while one of its sidecars is SIGKILLed every minute, then the
// report: operations by kind with p50/p99 latency, errors by code, and the
// figures that must be zero (lost acknowledged writes, hung streams,
// leaked goroutines, processes and temporary files). It exits 1 when one
// of those is not zero, 2 when the soak could not run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/soak"
)

func main() {
	err := run()
	switch {
	case errors.Is(err, errFailed):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case err != nil:
		// The soak could not run (no gateway binary, a gateway that did
		// not start): not a measurement.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// errFailed is the run that measured a must-be-zero figure above zero.
var errFailed = errors.New("soak: FAIL")

func run() error {
	minutes := 10.0
	if v := os.Getenv("SOAK_MINUTES"); v != "" {
		m, err := strconv.ParseFloat(v, 64)
		if err != nil || m <= 0 {
			return fmt.Errorf("soak: SOAK_MINUTES=%q is not a positive number of minutes", v)
		}
		minutes = m
	}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	gatewayBin := fs.String("gateway", "", "the gateway binary to soak (go build ./cmd/server); required")
	fs.Float64Var(&minutes, "minutes", minutes, "how long the load runs, in minutes (env SOAK_MINUTES)")
	killEvery := fs.Duration("kill-every", 60*time.Second, "period of the sidecar kills")
	tenants := fs.Int("tenants", 3, "number of tenants")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	dir := fs.String("dir", "", "directory for the gateway's data, TMPDIR and log (default: a temporary one)")
	keep := fs.Bool("keep", false, "keep the temporary directory after the run")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *gatewayBin == "" {
		return errors.New("soak: --gateway is required")
	}
	if minutes <= 0 {
		return errors.New("soak: --minutes must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := time.Duration(minutes * float64(time.Minute))
	fmt.Printf("soak: %s of load on %s, a sidecar killed every %s\n", d, *gatewayBin, *killEvery)
	rep, err := soak.Run(ctx, soak.Config{GatewayBin: *gatewayBin, Duration: d, KillEvery: *killEvery,
		Tenants: *tenants, Dir: *dir, Keep: *keep, Progress: os.Stdout})
	if err != nil {
		return err
	}
	if err := rep.Print(os.Stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	if !rep.Passed() {
		return errFailed
	}
	return nil
}
