package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleSubscribers holds many idle SSE subscribers on one VM's
// events stream and reports what each costs the gateway: its resident set
// growth per subscriber while they are held (each has had its backlog and
// one live event), and its heap (HeapInuse just after a collection) before
// they came and after they left. A second wave of as many subscribers then
// comes and goes: the heap after it, against the heap after the first,
// tells whether subscribers leave anything behind. (Against the heap before
// the first wave it cannot come back: the Go runtime keeps the descriptor
// of every goroutine it ever made, about 450 bytes each, for reuse.) The
// gateway runs as its own process (the binary) so that the subscribers'
// side, in this process, is not counted; its open-files limit (raised to
// the hard limit by the Go runtime at start) must allow them. SUBSCRIBERS
// overrides the 15,000 of the issue.
func BenchmarkIdleSubscribers(b *testing.B) {
	n := 15000
	if v := os.Getenv("SUBSCRIBERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("SUBSCRIBERS=%q: a positive count", v)
		}
	}
	bin := buildGateway(b)
	kernel := heldAsAClientWould(b, bin, n)

	cmd, base, logs := startBinary(b, bin, b.TempDir())
	pid := cmd.Process.Pid
	var vm struct{ ID string }
	if st := call(b, "POST", base+"/v1/vms", testAdminKey, map[string]any{}, &vm); st != http.StatusCreated {
		b.Fatalf("create vm: %d", st)
	}
	addr := strings.TrimPrefix(base, "http://")
	request := []byte("GET /v1/vms/" + vm.ID + "/events HTTP/1.1\r\nHost: " + addr +
		"\r\nAuthorization: Bearer " + testAdminKey + "\r\nAccept: text/event-stream\r\n\r\n")

	// A first round of subscribers that come and go warms what the gateway
	// keeps for any later one (pools, maps, code pages).
	subscribe := func(count int) []net.Conn {
		conns := make([]net.Conn, count)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		next := make(chan int)
		for range 32 {
			wg.Go(func() {
				for i := range next {
					c, err := openIdleStream(addr, request)
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("subscriber %d: %w", i, err)
						}
						mu.Unlock()
						continue
					}
					conns[i] = c
				}
			})
		}
		for i := range count {
			next <- i
		}
		close(next)
		wg.Wait()
		if firstErr != nil {
			closeAll(conns)
			b.Fatalf("%v\n%s", firstErr, tail(logs.String(), 2000))
		}
		return conns
	}
	waitSubscribers := func(want float64) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got := sumMetric(scrape(b, base), "agentos_gateway_sse_subscribers")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("agentos_gateway_sse_subscribers = %v, want %v", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// A first round of subscribers that come and go warms what the
	// gateway keeps for any later one (pools, code pages).
	closeAll(subscribe(min(n, 500)))
	waitSubscribers(0)

	heapFresh := gatewayHeapAfterGC(b, base)
	rssFresh := procRSS(b, pid)
	var held []net.Conn
	for b.Loop() {
		held = subscribe(n)
	}
	waitSubscribers(float64(n))
	// Each subscriber gets a live event too (a process's exit), so that
	// what it holds is what a subscriber that has streamed holds.
	var proc struct{ Pid int }
	if st := call(b, "POST", base+"/v1/vms/"+vm.ID+"/processes", testAdminKey, map[string]any{"command": "true"}, &proc); st != http.StatusCreated {
		b.Fatalf("spawn: %d", st)
	}
	time.Sleep(3 * time.Second)
	// Let the gateway settle (its collector frees the garbage of the
	// subscriptions) before measuring.
	gatewayHeapAfterGC(b, base)
	rssHeld := procRSS(b, pid)
	held0 := scrape(b, base)
	b.Logf("%d subscribers held: %v goroutines, stacks %.1f MiB, heap in use %.1f MiB", n,
		sumMetric(held0, "go_goroutines"), sumMetric(held0, "go_memstats_stack_inuse_bytes")/(1<<20), sumMetric(held0, "go_memstats_heap_inuse_bytes")/(1<<20))
	closeAll(held)
	waitSubscribers(0)
	heapFirst := gatewayHeapAfterGC(b, base)
	rssAfter := procRSS(b, pid)
	b.Logf("after they left: %v goroutines", sumMetric(scrape(b, base), "go_goroutines"))

	closeAll(subscribe(n))
	waitSubscribers(0)
	heapSecond := gatewayHeapAfterGC(b, base)

	// A clean stop disposes the VM and stops the sidecar.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("gateway: %v\n%s", err, tail(logs.String(), 2000))
	}

	b.ReportMetric(float64(n), "subscribers")
	b.ReportMetric(float64(kernel.held-kernel.before)/float64(n)/1024, "kernel-KiB/subscriber")
	b.ReportMetric(float64(kernel.ramp-kernel.before)/float64(n)/1024, "kernel-ramp-KiB/subscriber")
	b.ReportMetric(float64(kernel.before)/(1<<20), "kernel-rss-before-MiB")
	b.ReportMetric(float64(kernel.ramp)/(1<<20), "kernel-rss-ramp-MiB")
	b.ReportMetric(float64(kernel.held)/(1<<20), "kernel-rss-held-MiB")
	b.ReportMetric(float64(rssHeld-rssFresh)/float64(n)/1024, "KiB/subscriber")
	b.ReportMetric(float64(rssFresh)/(1<<20), "rss-base-MiB")
	b.ReportMetric(float64(rssHeld)/(1<<20), "rss-held-MiB")
	b.ReportMetric(float64(rssAfter)/(1<<20), "rss-after-MiB")
	b.ReportMetric(float64(heapFresh)/(1<<20), "heap-fresh-MiB")
	b.ReportMetric(float64(heapFirst)/(1<<20), "heap-base-MiB")
	b.ReportMetric(float64(heapSecond)/(1<<20), "heap-after-MiB")
	b.ReportMetric(float64(heapSecond)/float64(heapFirst), "heap-after/base")
	b.ReportMetric(float64(heapFirst)/float64(heapFresh), "heap-first/fresh")
}

// kernelRSS is the gateway's resident set as the kernel counts it (VmRSS)
// while subscribers come and are held.
type kernelRSS struct {
	before int64 // the fresh gateway, its VM created
	ramp   int64 // right after the last subscriber was in
	held   int64 // the lowest of the samples taken every 2 s over 30 s of holding them
}

// heldAsAClientWould measures the gateway's resident set as issue 26 did,
// the way an operator sizing a node sees it: a fresh gateway of its own with
// the defaults and one VM; n plain net/http clients (one connection each,
// Accept: text/event-stream) that all connect at once, read their streams
// and are held; VmRSS from /proc right after the last one is in, then every
// 2 s over 30 s, of which the lowest counts. Unlike the figure
// BenchmarkIdleSubscribers has reported since before (32 raw connections at
// a time after a warm-up wave, one sample once the gateway ran five
// collections, minutes later), this counts what the runtime freed but had
// not yet returned to the system when the operator looks.
func heldAsAClientWould(b *testing.B, bin string, n int) kernelRSS {
	b.Helper()
	cmd, base, logs := startBinary(b, bin, b.TempDir())
	pid := cmd.Process.Pid
	var vm struct{ ID string }
	if st := call(b, "POST", base+"/v1/vms", testAdminKey, map[string]any{}, &vm); st != http.StatusCreated {
		b.Fatalf("create vm: %d", st)
	}
	// The warm VMs the defaults keep are made in the background: the
	// resident set before counts them once they are ready.
	waitGateway(b, base, func(text string) bool { return sumMetric(text, "agentos_gateway_warm_vms") >= 4 })
	var m kernelRSS
	m.before = procRSS(b, pid)

	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/vms/"+vm.ID+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+testAdminKey)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := client.Do(req)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
				}
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	release := func() {
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for sumMetric(scrape(b, base), "agentos_gateway_sse_subscribers") != float64(n) {
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil || time.Now().After(deadline) {
			release()
			b.Fatalf("subscribers: %v\n%s", err, tail(logs.String(), 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.ramp = procRSS(b, pid)
	// Each gets a live event too, as in the benchmark's own waves.
	var proc struct{ Pid int }
	if st := call(b, "POST", base+"/v1/vms/"+vm.ID+"/processes", testAdminKey, map[string]any{"command": "true"}, &proc); st != http.StatusCreated {
		b.Fatalf("spawn: %d", st)
	}
	samples := []string{}
	for i := range 16 {
		if i > 0 {
			time.Sleep(2 * time.Second)
		}
		rss := procRSS(b, pid)
		if i == 0 || rss < m.held {
			m.held = rss
		}
		samples = append(samples, fmt.Sprintf("%.0f", float64(rss)/(1<<20)))
	}
	b.Logf("%d net/http subscribers: VmRSS %.0f MiB before, %.0f right after the ramp, every 2 s held (MiB): %s",
		n, float64(m.before)/(1<<20), float64(m.ramp)/(1<<20), strings.Join(samples, " "))
	// What the runtime says of the same memory: the heap in use (objects,
	// garbage not yet collected, room in spans), the heap it freed and kept,
	// and the stacks.
	text := scrape(b, base)
	mib := func(name string) float64 { return sumMetric(text, name) / (1 << 20) }
	b.Logf("held, the runtime's account (MiB): heap in use %.1f, free and kept %.1f, stacks %.1f, other %.1f; %v goroutines, %v collections",
		mib("go_memstats_heap_inuse_bytes"), mib("go_memstats_heap_idle_bytes")-mib("go_memstats_heap_released_bytes"),
		mib("go_memstats_stack_inuse_bytes"), mib("go_memstats_other_sys_bytes")+mib("go_memstats_mspan_inuse_bytes")+mib("go_memstats_gc_sys_bytes"),
		sumMetric(text, "go_goroutines"), sumMetric(text, "go_gc_duration_seconds_count"))
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "returned freed memory") {
			b.Logf("gateway: %s", strings.TrimSpace(line))
		}
	}
	release()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("gateway: %v\n%s", err, tail(logs.String(), 2000))
	}
	return m
}

// waitGateway waits up to a minute for the gateway's metrics to satisfy ok.
func waitGateway(b *testing.B, base string, ok func(metrics string) bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok(scrape(b, base)) {
		if time.Now().After(deadline) {
			b.Fatal("the gateway's metrics did not come to what was awaited in a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openIdleStream opens one events stream on a connection of its own and
// reads its response head; the stream's events are then left unread.
func openIdleStream(addr string, request []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write(request); err != nil {
		c.Close()
		return nil, err
	}
	head, err := readHead(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
		c.Close()
		return nil, fmt.Errorf("response %q", head)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// readHead reads up to the end of a response head byte by byte, so that
// nothing after it is consumed.
func readHead(r io.Reader) ([]byte, error) {
	var head []byte
	var one [1]byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := r.Read(one[:]); err != nil {
			return head, err
		}
		head = append(head, one[0])
		if len(head) > 8192 {
			return head, fmt.Errorf("response head too long")
		}
	}
	return head, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// scrape returns the gateway's /metrics text.
func scrape(b *testing.B, base string) string {
	b.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	return string(raw)
}

// gatewayHeapAfterGC returns the least HeapInuse the gateway reports over
// three garbage collections, counted from the second after the call: what
// its heap holds once the garbage of before is collected and swept, without
// the garbage it makes between collections. The gateway is not asked to
// collect; the scrapes themselves allocate until its collector runs (or its
// two-minute forced collection does).
func gatewayHeapAfterGC(b *testing.B, base string) int64 {
	b.Helper()
	cycles := sumMetric(scrape(b, base), "go_gc_duration_seconds_count")
	least := int64(-1)
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		text := scrape(b, base)
		seen := sumMetric(text, "go_gc_duration_seconds_count")
		if seen < cycles+2 {
			continue
		}
		if heap := int64(sumMetric(text, "go_memstats_heap_inuse_bytes")); least < 0 || heap < least {
			least = heap
		}
		if seen >= cycles+5 {
			return least
		}
	}
	b.Fatal("the gateway ran too few garbage collections in 5 minutes")
	return 0
}

// procRSS is process pid's resident set in bytes.
func procRSS(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS %q", v)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS for process %d", pid)
	return 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
