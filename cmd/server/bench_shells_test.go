package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkShellStarts opens SHELL_STARTS (default 200) shells one after
// another, each over the WebSocket attach as a browser terminal does: open
// the shell, attach, wait for the prompt, type a line at once, wait for its
// output, close. It reports how many ran the line ("ran", out of
// "starts") and the p50 and p95 from the open to the line's output. Run it
// with -benchtime=1x, as bench/run.sh does.
func BenchmarkShellStarts(b *testing.B) {
	starts := 200
	if v, err := strconv.Atoi(os.Getenv("SHELL_STARTS")); err == nil && v > 0 {
		starts = v
	}
	g := startGateway(b, "")
	c := mustClient(b, g.URL, testAdminKey)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"}); err != nil {
		b.Fatal(err)
	}
	wsBase := "ws" + strings.TrimPrefix(g.URL, "http")
	for b.Loop() {
		var durs []time.Duration
		ran := 0
		for i := range starts {
			took, err := shellStart(ctx, c, wsBase, vm.ID, i)
			if err != nil {
				b.Logf("start %d: %v", i, err)
				continue
			}
			ran++
			durs = append(durs, took)
		}
		b.ReportMetric(float64(starts), "starts")
		b.ReportMetric(float64(ran), "ran")
		if len(durs) > 0 {
			reportLatency(b, durs)
		}
	}
}

// shellStart is one start of BenchmarkShellStarts: it returns the time from
// the open to the typed line's output.
func shellStart(ctx context.Context, c *client.Client, wsBase, vm string, i int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	sh, err := c.VM(vm).OpenShell(ctx, client.ShellRequest{Cols: 100, Rows: 30})
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = sh.Close(cctx)
	}()
	conn, _, err := websocket.Dial(ctx, wsBase+"/v1/vms/"+vm+"/shells/"+sh.ID()+"/attach", &websocket.DialOptions{
		Subprotocols: []string{"agentos-gateway.v1", "bearer.agentos-gateway." + testAdminKey},
	})
	if err != nil {
		return 0, fmt.Errorf("attach: %w", err)
	}
	defer conn.CloseNow()
	var screen strings.Builder
	until := func(want string) error {
		for !strings.Contains(screen.String(), want) {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return fmt.Errorf("waiting for %q: %w; screen %q", want, err, screen.String())
			}
			if typ == websocket.MessageBinary {
				screen.Write(data)
			}
		}
		return nil
	}
	if err := until("$ "); err != nil {
		return 0, err
	}
	want := fmt.Sprintf("ran-%d", i)
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo ran-$(("+strconv.Itoa(i)+"))\r")); err != nil {
		return 0, fmt.Errorf("type: %w", err)
	}
	if err := until(want + "\r\n"); err != nil {
		return 0, err
	}
	took := time.Since(start)
	_ = conn.Close(websocket.StatusNormalClosure, "")
	return took, nil
}
