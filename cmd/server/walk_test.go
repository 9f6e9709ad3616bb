package main

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// A request's walk is the chain of the gateway's packages on the stack of
// the goroutine that serves it, outermost first, taken while it waits on
// the engine: who passes the request on, and how often it comes back to a
// package it had already left (a callback into a caller, an adapter that
// calls back up). TestRequestWalks measures three walks (issue 40) and
// holds them to what they are now, so a new arrow that goes back up is a
// decision, not an accident.

const modulePrefix = "github.com/agentos-gateway/agentos-gateway/"

// walk is one goroutine's chain of the module's packages.
type walk struct {
	goroutine string   // its id in the stack dump
	packages  []string // outermost first, consecutive repeats merged
	frames    int      // the module's frames on the stack
}

// returns counts the packages entered again after the walk had left them.
func (w walk) returns() int {
	seen := map[string]bool{}
	n := 0
	for _, p := range w.packages {
		if seen[p] {
			n++
		}
		seen[p] = true
	}
	return n
}

func (w walk) String() string {
	return fmt.Sprintf("%s (%d frames, %d returns)", strings.Join(w.packages, " → "), w.frames, w.returns())
}

// walksOf parses runtime.Stack(all) text into the walks of the goroutines
// whose stacks hold every one of the packages in want.
func walksOf(stacks string, want ...string) []walk {
	var out []walk
	for _, g := range strings.Split(stacks, "\n\n") {
		var frames []string
		id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		for _, line := range strings.Split(g, "\n") {
			switch {
			case strings.HasPrefix(line, modulePrefix):
				frames = append(frames, packageOf(strings.TrimPrefix(line, modulePrefix)))
			case strings.HasPrefix(line, strings.TrimSuffix(modulePrefix, "/")+"."):
				frames = append(frames, "gateway") // the root package's domain types
			}
		}
		slices.Reverse(frames) // a stack prints innermost first
		w := walk{goroutine: id, frames: len(frames)}
		for _, p := range frames {
			if len(w.packages) == 0 || w.packages[len(w.packages)-1] != p {
				w.packages = append(w.packages, p)
			}
		}
		if len(w.packages) > 0 && containsAll(w.packages, want) {
			out = append(out, w)
		}
	}
	return out
}

// packageOf is the package of a stack line "pkg/path.Func(...)" or
// "pkg/path.(*T).Method(...)", relative to the module ("" for its root).
func packageOf(fn string) string {
	head := fn
	if i := strings.Index(head, "("); i >= 0 {
		head = head[:i] // a receiver "(*T)" comes after the package's dot
	}
	slash := strings.LastIndex(head, "/")
	dot := strings.Index(fn[slash+1:], ".")
	if dot < 0 {
		return fn
	}
	return fn[:slash+1+dot]
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// catchWalks takes the goroutine stacks every few milliseconds while during
// runs and returns the longest walk of each distinct chain holding want,
// and the timeline of the goroutine seen in most chains: where its
// innermost package of the module was at each sample that changed it.
func catchWalks(t *testing.T, want []string, during func()) ([]walk, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu        sync.Mutex
		found     = map[string]walk{}
		timelines = map[string][]string{}
		serving   = map[string]bool{} // goroutines seen with every package of want
		wg        sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 8<<20)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, w := range walksOf(string(buf[:runtime.Stack(buf, true)]), want[0]) {
				key := strings.Join(w.packages, " ")
				mu.Lock()
				if containsAll(w.packages, want) {
					serving[w.goroutine] = true
					if old, ok := found[key]; !ok || w.frames > old.frames {
						found[key] = w
					}
				}
				inner := w.packages[len(w.packages)-1]
				if tl := timelines[w.goroutine]; len(tl) == 0 || tl[len(tl)-1] != inner {
					timelines[w.goroutine] = append(tl, inner)
				}
				mu.Unlock()
			}
		}
	}()
	during()
	cancel()
	wg.Wait()
	out := make([]walk, 0, len(found))
	for _, w := range found {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b walk) int { return strings.Compare(a.String(), b.String()) })
	var longest []string
	for id, tl := range timelines {
		if serving[id] && len(tl) > len(longest) {
			longest = tl
		}
	}
	return out, longest
}

func TestPackageOf(t *testing.T) {
	for in, want := range map[string]string{
		"vms.(*Service).Exec(0xc000, {0x1, 0x2})": "vms",
		"agentos.(*Sidecar).request(...)":         "agentos",
		"agentos/protocol.(*Reader).Frame(0x1)":   "agentos/protocol",
		"handlers.(*Server).exec.func1()":         "handlers",
		"internal/inproc.RoundTripper.RoundTrip":  "internal/inproc",
	} {
		if got := packageOf(in); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", in, got, want)
		}
	}
	w := walk{packages: []string{"handlers", "vms", "sidecarpool", "vms", "agentos", "vms"}}
	if w.returns() != 2 {
		t.Errorf("returns of %v = %d, want 2", w.packages, w.returns())
	}
}

// walkBudget is how many returns each walk has today: a walk that grows
// past it fails, and one that shrinks should lower it.
var walkBudget = map[string]int{"exec": 0, "attach": 0, "wake": 0}

func TestRequestWalks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway")
	}
	t.Parallel()
	e := newE2E(t)
	vm := e.vm(e.admin, client.CreateVMRequest{})
	h := e.admin.VM(vm.ID)

	ws, tl := catchWalks(t, []string{"handlers", "agentos"}, func() {
		if _, err := h.Exec(ctxFor(t, e2eTimeout), client.ExecRequest{Command: "sleep 1"}); err != nil {
			t.Fatalf("exec: %v", err)
		}
	})
	checkWalks(t, "exec", ws, tl)

	sh, err := h.OpenShell(ctxFor(t, e2eTimeout), client.ShellRequest{})
	if err != nil {
		t.Fatalf("open a shell: %v", err)
	}
	ws, tl = catchWalks(t, []string{"handlers", "attach"}, func() {
		a := e.attach(t, "/v1/vms/"+url.PathEscape(vm.ID)+"/shells/"+sh.ID()+"/attach", false)
		time.Sleep(500 * time.Millisecond)
		a.conn.CloseNow()
		<-a.done
	})
	checkWalks(t, "attach", ws, tl)

	if _, err := h.Hibernate(ctxFor(t, e2eTimeout)); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	ws, tl = catchWalks(t, []string{"handlers", "vms", "agentos"}, func() {
		if _, err := h.Exec(ctxFor(t, e2eTimeout), client.ExecRequest{Command: "true"}); err != nil {
			t.Fatalf("exec that wakes: %v", err)
		}
	})
	checkWalks(t, "wake", ws, tl)
}

// checkWalks logs the walks of one request and holds them to walkBudget.
func checkWalks(t *testing.T, name string, ws []walk, timeline []string) {
	t.Helper()
	t.Logf("%s: innermost package over time: %s", name, strings.Join(timeline, " → "))
	if len(ws) == 0 {
		t.Fatalf("%s: no goroutine was caught waiting with the packages asked for", name)
	}
	most := 0
	for _, w := range ws {
		t.Logf("%s: %s", name, w)
		most = max(most, w.returns())
	}
	if most > walkBudget[name] {
		t.Errorf("%s: a walk returns to a package it left %d times, more than the %d it did", name, most, walkBudget[name])
	}
}
