package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// BenchmarkWatch10k watches a tree of 10,000 entries made by a guest
// process: each iteration is an API write and the wait for its event
// (api-p50-ms); it also reports how long a guest write takes to be seen at
// a 500 ms scan interval (guest-ms, the mean of a few) and the CPU one scan
// of the tree costs the gateway and the sidecar together (scan-cpu-ms),
// measured against the same VM idle without a watch (cpu-ratio).
func BenchmarkWatch10k(b *testing.B) {
	g := startGateway(b, "")
	c := mustClient(b, g.URL, testAdminKey)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		b.Fatal(err)
	}
	h := c.VM(vm.ID)
	run := func(cmd string) {
		res, err := h.Exec(ctx, client.ExecRequest{Command: cmd, Timeout: 15 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %v %+v", cmd, err, res)
		}
	}
	// 100 directories of 98 files: 9,900 entries, within the bound of 10,000
	// with room for the files the benchmark adds.
	run(`sh -c 'mkdir -p /workspace/big; d=0; while [ $d -lt 100 ]; do mkdir /workspace/big/d$d; f=1; while [ $f -lt 99 ]; do : > /workspace/big/d$d/f$f; f=$((f+1)); done; d=$((d+1)); done'`)
	sidecar := 0
	scs, err := c.Sidecars(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, sc := range scs {
		if sc.ID == vm.SidecarID {
			sidecar = sc.Pid
		}
	}
	cpu := func() time.Duration { return selfCPU(b) + procCPU(b, sidecar) }
	idleFor := 5 * time.Second
	before := cpu()
	time.Sleep(idleFor)
	idle := cpu() - before

	s, err := h.Watch(ctx, "/workspace/big", client.WatchOptions{Recursive: true, Interval: 500 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	wait := func(path string) {
		for {
			ev, err := s.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if fc, ok := ev.(*client.FileChange); ok && fc.Path == path {
				return
			}
		}
	}
	var durs []time.Duration
	i := 0
	for b.Loop() {
		p := fmt.Sprintf("/workspace/big/api%d", i)
		i++
		start := time.Now()
		if _, err := h.WriteFile(ctx, p, strings.NewReader("x"), client.WriteFileOptions{}); err != nil {
			b.Fatal(err)
		}
		wait(p)
		durs = append(durs, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, durs)
	// Guest writes: from the exec's return to the event.
	var guest time.Duration
	const n = 4
	for k := range n {
		p := "/workspace/big/d0/guest" + strconv.Itoa(k)
		run("sh -c ': > " + p + "'")
		start := time.Now()
		wait(p)
		guest += time.Since(start)
	}
	b.ReportMetric(float64(guest/n)/1e6, "guest-ms")
	before = cpu()
	time.Sleep(idleFor)
	watched := cpu() - before
	scans := float64(idleFor / (500 * time.Millisecond))
	b.ReportMetric(float64(watched-idle)/1e6/scans, "scan-cpu-ms")
	if idle > 0 {
		b.ReportMetric(float64(watched)/float64(idle), "cpu-ratio")
	}
}

// selfCPU is the CPU time this process (the gateway, in process) used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time process pid used, from /proc (clock ticks of
// 10 ms, the Linux default).
func procCPU(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
