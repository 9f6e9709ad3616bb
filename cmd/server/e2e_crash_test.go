package main

// The crash rule, end to end: a sidecar killed with SIGKILL while a process
// streams and an exec runs.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestE2ESidecarCrash(t *testing.T) {
	t.Parallel()
	// One VM per sidecar: tenant B's VM is on a sidecar of its own.
	e := newE2E(t, "--vms-per-sidecar=1", "--max-sidecars=4")
	ctx := ctxT(t)
	_, ca := e.tenant("crash-a", nil)
	_, cb := e.tenant("crash-b", nil)
	vmA := e.vm(ca, client.CreateVMRequest{})
	vmB := e.vm(cb, client.CreateVMRequest{})
	if vmA.SidecarID == vmB.SidecarID {
		t.Fatalf("both VMs on sidecar %s", vmA.SidecarID)
	}
	e.exec(ca, vmA.ID, "true") // warm both VMs: a first process is slow
	e.exec(cb, vmB.ID, "true")
	pidA, pidB := e.sidecarPid(vmA), e.sidecarPid(vmB)

	// A process that prints a tick every 100 ms, on each VM, with their
	// output streams open; A's event stream too.
	const loop = "sh -c 'while true; do echo tick; sleep 0.1; done'"
	ticker := func(c *client.Client, vm string) (*client.ProcessHandle, *client.Stream) {
		p, err := c.VM(vm).Spawn(ctx, client.SpawnRequest{Command: loop})
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return p, s
	}
	pA, outA := ticker(ca, vmA.ID)
	pB, outB := ticker(cb, vmB.ID)
	evA, err := ca.VM(vmA.ID).Events(ctx, client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer evA.Close()
	outReqA := e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vmA.ID, pA.Pid()))
	outReqB := e.eventReq("GET", fmt.Sprintf("/v1/vms/%s/processes/%d/output", vmB.ID, pB.Pid()))
	waitTicks := func(s *client.Stream, req *http.Request, n int) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, e2eTimeout)
		defer cancel()
		for seen := 0; seen < n; {
			ev, err := next(rctx, s)
			if err != nil {
				t.Fatalf("ticks: %v", err)
			}
			validateEvent(e, req, ev)
			if ev.Type != "stdout" {
				t.Fatalf("unexpected %s event %s", ev.Type, ev.Data)
			}
			o, _ := ev.Output()
			seen += strings.Count(string(o.Data), "tick")
		}
	}
	waitTicks(outA, outReqA, 3)
	waitTicks(outB, outReqB, 3)

	// Calls in flight on A: a buffered exec and a streamed one. Each leaves
	// a mark in a file once it runs in the guest.
	const inFlight = "sh -c 'echo running >> /workspace/started; sleep 30'"
	type result struct {
		err error
		at  time.Time
	}
	execDone := make(chan result, 1)
	go func() {
		_, err := ca.VM(vmA.ID).Exec(ctx, client.ExecRequest{Command: inFlight})
		execDone <- result{err, time.Now()}
	}()
	execStream, err := ca.VM(vmA.ID).ExecStream(ctx, client.ExecRequest{Command: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	defer execStream.Close()
	eventually(t, e2eTimeout, "both execs to run", func() bool {
		r, err := ca.VM(vmA.ID).ReadFile(ctx, "/workspace/started")
		if err != nil {
			return false
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		return strings.Count(string(b), "running") == 2
	})
	waitTicks(outA, outReqA, 2) // the process streams meanwhile

	killedAt := time.Now()
	if err := syscall.Kill(pidA, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// The in-flight exec fails with unavailable within a few seconds.
	select {
	case r := <-execDone:
		wantCode(t, r.err, client.CodeUnavailable, http.StatusServiceUnavailable)
		if d := r.at.Sub(killedAt); d > 10*time.Second {
			t.Errorf("the in-flight exec failed %s after the kill", d)
		}
	case <-time.After(e2eTimeout):
		t.Fatal("the in-flight exec did not end after its sidecar died")
	}
	// So does the streamed one, with a final error event.
	evs := e.collect(execStream, e.eventReq("POST", "/v1/vms/"+vmA.ID+"/exec"), e2eTimeout)
	if perr, err := evs[len(evs)-1].Problem(); err != nil || perr.Code != client.CodeUnavailable {
		t.Errorf("streamed exec ended with %s", summarize(evs))
	}

	// The process's output stream gets a final error event and closes.
	evs = e.collect(outA, outReqA, e2eTimeout)
	perr, err := evs[len(evs)-1].Problem()
	if err != nil || (perr.Code != client.CodeUnavailable && perr.Code != client.CodeConflict) {
		t.Fatalf("process stream ended with %s", summarize(evs[len(evs)-1:]))
	}

	// The VM is lost, with the reason.
	var lost *client.VM
	eventually(t, e2eTimeout, "the VM to be lost", func() bool {
		v, err := ca.VM(vmA.ID).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lost = v
		return v.State == client.VMLost
	})
	// A reason for the tenant, without the host's internals (pids, the
	// sidecar's log).
	if lost.Reason == "" || strings.Contains(lost.Reason, "stderr") || strings.Contains(lost.Reason, fmt.Sprint(pidA)) {
		t.Fatalf("lost with reason %q", lost.Reason)
	}
	t.Logf("VM lost %s after the kill: %q", time.Since(killedAt).Round(time.Millisecond), lost.Reason)

	// Its event stream says so and ends.
	evs = e.collect(evA, e.eventReq("GET", "/v1/vms/"+vmA.ID+"/events"), e2eTimeout)
	var lostEvent bool
	for _, ev := range evs[:len(evs)-1] {
		if v, err := ev.VMEvent(); err == nil && ev.Type == "state" && v.State == client.VMLost && v.Reason != "" {
			lostEvent = true
		}
	}
	if perr, err := evs[len(evs)-1].Problem(); !lostEvent || err != nil || perr.Code != client.CodeConflict {
		t.Fatalf("events of the lost VM: %s", summarize(evs))
	}

	// Calls on it are conflict, with the state.
	for name, do := range map[string]func() error{
		"exec": func() error { _, err := ca.VM(vmA.ID).Exec(ctx, client.ExecRequest{Command: "true"}); return err },
		"spawn": func() error {
			_, err := ca.VM(vmA.ID).Spawn(ctx, client.SpawnRequest{Command: "true"})
			return err
		},
		"processes": func() error { _, err := ca.VM(vmA.ID).Processes(ctx); return err },
		"output": func() error {
			s, err := ca.VM(vmA.ID).Process(pA.Pid()).Output(ctx, client.StreamOptions{})
			if s != nil {
				s.Close()
			}
			return err
		},
		"read file": func() error { _, err := ca.VM(vmA.ID).ReadFile(ctx, "/etc/hostname"); return err },
	} {
		ce := wantCode(t, do(), client.CodeConflict, http.StatusConflict)
		if ce.Details["state"] != "lost" {
			t.Errorf("%s: details %v", name, ce.Details)
		}
	}

	// The killed sidecar is gone; a new create gets a fresh one.
	eventually(t, 10*time.Second, "the killed sidecar to be reaped", func() bool { return !alive(pidA) })
	vmC := e.vm(ca, client.CreateVMRequest{})
	if pidC := e.sidecarPid(vmC); pidC == pidA || pidC == pidB {
		t.Fatalf("new VM on sidecar pid %d (killed %d, B's %d)", pidC, pidA, pidB)
	}
	if out := e.exec(ca, vmC.ID, "echo fresh"); out != "fresh\n" {
		t.Fatalf("%q", out)
	}

	// Tenant B's VM, on another sidecar, never noticed.
	waitTicks(outB, outReqB, 3)
	if v, err := cb.VM(vmB.ID).Get(ctx); err != nil || v.State != client.VMReady {
		t.Fatalf("B's VM: %+v %v", v, err)
	}
	if out := e.exec(cb, vmB.ID, "echo b-ok"); out != "b-ok\n" {
		t.Fatalf("%q", out)
	}
	if p, err := cb.VM(vmB.ID).Process(pB.Pid()).Get(ctx); err != nil || !p.Running {
		t.Fatalf("B's process: %+v %v", p, err)
	}
	if e.sidecarPid(vmB) != pidB {
		t.Fatal("B's sidecar was replaced")
	}
	if n := e.metric("agentos_gateway_sidecar_crashes_total"); n != 1 {
		t.Errorf("agentos_gateway_sidecar_crashes_total = %v", n)
	}
	// The lost VM's record is removed by a DELETE, once.
	if v, err := ca.VM(vmA.ID).Delete(ctx); err != nil || v != nil {
		t.Fatalf("delete the lost VM: %+v %v; want its record removed", v, err)
	}
	_, err = ca.VM(vmA.ID).Delete(ctx)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
}
