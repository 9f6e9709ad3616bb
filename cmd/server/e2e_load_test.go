package main

// A bounded load test, on loopback only: the gateway and its sidecars run on
// this machine and nothing leaves it. 3 tenants, 200 concurrent SSE
// subscribers and 50 concurrent execs.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestE2ELoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("load test")
	}
	const (
		tenants     = 3
		vmsEach     = 2
		subscribers = 200
		execs       = 50
	)
	// 3 tenants × 2 VMs on 3 sidecars of 2 VMs each.
	e := newE2E(t, "--max-sidecars=3", "--vms-per-sidecar=2")
	// The test checks that nothing fails under the load, not how fast it
	// goes: its whole run (six VMs, 200 streams, 50 execs) gets more than
	// one request's bound, which a loaded CI machine outlasted.
	ctx := ctxFor(t, 4*e2eTimeout)
	type vmRef struct {
		c   *client.Client
		id  string
		pid uint32
	}
	var vms []vmRef
	for i := range tenants {
		_, c := e.tenant(fmt.Sprintf("load-%d", i), nil)
		for range vmsEach {
			vm := e.vm(c, client.CreateVMRequest{})
			e.exec(c, vm.ID, "true") // warm: a VM's first process is slow
			p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sh -c 'while true; do echo tick; sleep 0.5; done'"})
			if err != nil {
				t.Fatal(err)
			}
			vms = append(vms, vmRef{c, vm.ID, p.Pid()})
		}
	}
	scs, err := e.admin.Sidecars(ctx)
	if err != nil || len(scs) != 3 {
		t.Fatalf("sidecars: %+v %v", scs, err)
	}

	// 200 subscribers: half follow a ticking process's output, half a VM's
	// events. Each opens its stream, gets a first event (a tick, or the
	// VM's ready state), then holds it until told to stop.
	start := time.Now()
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		opened   sync.WaitGroup
		received atomic.Int64
		errs     = make(chan error, subscribers+execs)
	)
	for i := range subscribers {
		v := vms[i%len(vms)]
		wg.Add(1)
		opened.Add(1)
		go func() {
			defer wg.Done()
			var s *client.Stream
			var err error
			if i%2 == 0 {
				s, err = v.c.VM(v.id).Process(v.pid).Output(ctx, client.StreamOptions{})
			} else {
				s, err = v.c.VM(v.id).Events(ctx, client.StreamOptions{})
			}
			if err != nil {
				opened.Done()
				errs <- fmt.Errorf("subscriber %d: open: %w", i, err)
				return
			}
			first := true
			// Next runs in this goroutine; stop closes the stream.
			go func() { <-stop; s.Close() }()
			for {
				ev, err := next(ctx, s)
				if err != nil {
					if first {
						opened.Done()
					}
					if !errors.Is(err, client.ErrClosed) {
						errs <- fmt.Errorf("subscriber %d: %w", i, err)
					}
					return
				}
				received.Add(1)
				if ev.Final() {
					errs <- fmt.Errorf("subscriber %d: the stream ended: %s %s", i, ev.Type, ev.Data)
				}
				if first {
					first = false
					opened.Done()
				}
			}
		}()
	}
	opened.Wait()
	openedIn := time.Since(start)
	held := e.metric("agentos_gateway_sse_subscribers")
	if held != subscribers {
		t.Errorf("agentos_gateway_sse_subscribers = %v with %d subscribers", held, subscribers)
	}

	// 50 execs at once, spread over the tenants' VMs, while the subscribers
	// are held.
	lat := make([]time.Duration, execs)
	var ewg sync.WaitGroup
	gate := make(chan struct{})
	for i := range execs {
		v := vms[i%len(vms)]
		ewg.Add(1)
		go func() {
			defer ewg.Done()
			<-gate
			t0 := time.Now()
			res, err := v.c.VM(v.id).Exec(ctx, client.ExecRequest{Command: "echo hi"})
			lat[i] = time.Since(t0)
			switch {
			case err != nil:
				errs <- fmt.Errorf("exec %d: %w", i, err)
			case res.ExitCode != 0 || string(res.Stdout) != "hi\n":
				errs <- fmt.Errorf("exec %d: %+v", i, res)
			}
		}()
	}
	execStart := time.Now()
	close(gate)
	ewg.Wait()
	execTotal := time.Since(execStart)
	// The subscribers are all still there after the burst.
	heldAfter := e.metric("agentos_gateway_sse_subscribers")
	before := received.Load()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for received.Load() < before+subscribers/2 && rctx.Err() == nil {
		time.Sleep(20 * time.Millisecond) // the process streams keep ticking
	}
	cancel()
	close(stop)
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d errors", n)
	}
	if heldAfter != subscribers {
		t.Errorf("after the execs agentos_gateway_sse_subscribers = %v", heldAfter)
	}
	eventually(t, 15*time.Second, "the subscribers to be released", func() bool { return e.metric("agentos_gateway_sse_subscribers") == 0 })

	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	t.Logf("load: %d tenants, %d VMs on %d sidecars; %d SSE subscribers held (opened in %s, %d events received); "+
		"%d concurrent execs of `echo hi` in %s: p50 %s, p95 %s, max %s; whole test %s",
		tenants, len(vms), len(scs), subscribers, openedIn.Round(time.Millisecond), received.Load(),
		execs, execTotal.Round(time.Millisecond), pct(0.50).Round(time.Millisecond), pct(0.95).Round(time.Millisecond),
		lat[len(lat)-1].Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
