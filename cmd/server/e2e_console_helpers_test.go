package main

// Machinery of the web console's browser tests: one headless Chromium
// (Debian's, installed by scripts/ensure-tools.sh) driven with chromedp,
// controls found by role and accessible name in the browser's accessibility
// tree, the page's console errors and failed requests collected, and
// screenshots at a desktop and a phone size.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// browserStep bounds one browser action (a click, a wait for text).
const browserStep = 30 * time.Second

// The two sizes every page is checked and photographed at.
var (
	desktop = [2]int64{1280, 800}
	phone   = [2]int64{390, 844}
)

// browser is one Chromium tab on the gateway's console.
type browser struct {
	t    *testing.T
	ctx  context.Context // the tab's; cancelled at cleanup
	base string
	dir  string // where screenshots go

	mu       sync.Mutex
	problems []string // console errors and failed requests
	requests []string // "METHOD URL" of every request the page sent
	allowed  []string // URL parts whose refusals a step expects
}

// chromiumPath finds Debian's Chromium, which `make test` installs.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run scripts/ensure-tools.sh (make test does)")
	return ""
}

// newBrowser starts Chromium on the console at base. Every Chromium
// process it started is gone when the test ends, pass or fail.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromiumPath(t)
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.UserDataDir(profile),
		// Chromium keeps its singleton socket in a directory of its own
		// under TMPDIR (org.chromium.Chromium.*), which a browser ended by
		// a signal leaves behind: the test's temporary directory takes it.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(int(desktop[0]), int(desktop[1])),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	var watchers sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		watchers.Wait()
		// chromedp waits for the browser's process on cancel; its helpers
		// (renderers, the zygote) are found by the profile directory on
		// their command lines.
		eventually(t, 20*time.Second, "every Chromium process of the test to end", func() bool {
			return exec.Command("pgrep", "-f", profile).Run() != nil
		})
	})
	dir := os.Getenv("AGENTOS_GATEWAY_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "web", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	// The first action starts the browser; its context must have no
	// deadline, or the browser would die with it.
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{})
		return err
	})); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b.watch(&watchers)
	return b
}

// watch records the page's console errors and its failed requests, on
// goroutines that end when the tab does (wg waits for them).
func (b *browser) watch(wg *sync.WaitGroup) {
	messages := chromedp.Console(b.ctx)
	failures := chromedp.Events(b.ctx, network.LoadingFailed)
	responses := chromedp.Events(b.ctx, network.ResponseReceived)
	sent := chromedp.Events(b.ctx, network.RequestWillBeSent)
	wg.Add(4)
	go func() {
		defer wg.Done()
		for ev, err := range sent {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.requests = append(b.requests, ev.Request.Method+" "+ev.Request.URL)
			b.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == "error" || m.Type == "assert" {
				b.problem(m.URL, "console %s: %s (%s)", m.Type, m.Text, m.URL)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range failures {
			if err != nil {
				return
			}
			// Streams the page stops when it leaves a view are cancelled,
			// not failed.
			if !ev.Canceled {
				b.problem("", "request %s failed: %s %s", ev.RequestID, ev.ErrorText, ev.BlockedReason)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range responses {
			if err != nil {
				return
			}
			if ev.Response.Status >= 400 {
				b.problem(ev.Response.URL, "%s answered %d", ev.Response.URL, ev.Response.Status)
			}
		}
	}()
}

func (b *browser) problem(url, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.allowed {
		if url != "" && strings.Contains(url, a) {
			return
		}
	}
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// sent reports whether the page sent a request of method to a URL ending
// with path.
func (b *browser) sent(method, path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.requests {
		if strings.HasPrefix(r, method+" ") && strings.HasSuffix(r, path) {
			return true
		}
	}
	return false
}

// expectRefusal lets a step's requests to URLs containing part fail (a
// refused action the step provokes).
func (b *browser) expectRefusal(part string) func() {
	b.mu.Lock()
	b.allowed = append(b.allowed, part)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, a := range b.allowed {
			if a == part {
				b.allowed = append(b.allowed[:i], b.allowed[i+1:]...)
				return
			}
		}
	}
}

// checkProblems fails t with the console errors and failed requests seen
// since the last check.
func (b *browser) checkProblems(t *testing.T) {
	t.Helper()
	// Give late console messages a moment to arrive.
	time.Sleep(200 * time.Millisecond)
	b.mu.Lock()
	p := b.problems
	b.problems = nil
	b.mu.Unlock()
	for _, s := range p {
		t.Errorf("the page: %s", s)
	}
}

// do runs actions with a step's deadline.
func (b *browser) do(t testing.TB, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	b.doWithin(t, browserStep, what, actions...)
}

// doWithin is do for a step that waits on the engine's work, such as an
// agent's turn, rather than on the page: d is that work's own timeout.
func (b *browser) doWithin(t testing.TB, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.failed(t)
		t.Fatalf("%s: %v", what, err)
	}
}

// failed saves a screenshot of the page as it is when a step fails, with
// the text of its alerts in the log.
func (b *browser) failed(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	alerts, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("[role=alert],[role=status]")].map(e => e.innerText).filter(Boolean).join(" | ")`))
	t.Logf("the page's alerts and statuses: %s", alerts)
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
		_ = os.WriteFile(filepath.Join(b.dir, "failed-"+name+".png"), png, 0o644)
	}
}

// eval evaluates a JavaScript expression.
func evalJS[T any](t testing.TB, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is truthy.
func (b *browser) waitJS(t testing.TB, d time.Duration, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d))); err != nil {
		b.failed(t)
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// byRole finds the elements with an accessibility role and name, as a
// screen reader does: in the browser's accessibility tree.
func byRole(role, name string) chromedp.QueryOption {
	return chromedp.ByFunc(func(ctx context.Context, tg *chromedp.Target, n *chromedp.Node) ([]cdp.NodeID, error) {
		res, err := cdp.Call(ctx, tg, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{NodeID: n.NodeID, AccessibleName: name, Role: role})
		if err != nil {
			return nil, err
		}
		var ids []cdp.BackendNodeID
		for _, node := range res.Nodes {
			if !node.Ignored && node.BackendDOMNodeID != 0 {
				ids = append(ids, node.BackendDOMNodeID)
			}
		}
		if len(ids) == 0 {
			return nil, nil
		}
		pushed, err := cdp.Call(ctx, tg, dom.PushNodesByBackendIDsToFrontend, dom.PushNodesByBackendIDsToFrontendParams{BackendNodeIDs: ids})
		if err != nil {
			return nil, err
		}
		return pushed.NodeIDs, nil
	})
}

// label names a control in messages.
func label(role, name string) string { return role + " " + fmt.Sprintf("%q", name) }

// click clicks the control of role and name once it is visible and enabled.
func (b *browser) click(t testing.TB, role, name string) {
	t.Helper()
	b.do(t, "click "+label(role, name),
		chromedp.WaitEnabled(label(role, name), byRole(role, name)),
		chromedp.Click(label(role, name), byRole(role, name), chromedp.NodeVisible))
}

// fill types text into the text box of that name, replacing its value.
func (b *browser) fill(t testing.TB, name, text string) {
	t.Helper()
	l := label("textbox", name)
	b.do(t, "fill "+l,
		chromedp.WaitVisible(l, byRole("textbox", name)),
		chromedp.Focus(l, byRole("textbox", name)),
		chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		chromedp.KeyEvent(kb.Delete),
		chromedp.SendKeys(l, text, byRole("textbox", name)))
}

// choose picks the option of value in the select named name (by its
// label, as the accessibility tree names it).
func (b *browser) choose(t testing.TB, name, value string) {
	t.Helper()
	l := label("combobox", name)
	b.do(t, "choose "+value+" in "+l,
		chromedp.WaitVisible(l, byRole("combobox", name)),
		chromedp.SetValue(l, value, byRole("combobox", name)))
}

// visible waits for a control of role and name.
func (b *browser) visible(t testing.TB, role, name string) {
	t.Helper()
	b.visibleWithin(t, browserStep, role, name)
}

// visibleWithin is visible for a control that the engine's work brings,
// within that work's timeout d.
func (b *browser) visibleWithin(t testing.TB, d time.Duration, role, name string) {
	t.Helper()
	b.doWithin(t, d, "wait for "+label(role, name), chromedp.WaitVisible(label(role, name), byRole(role, name)))
}

// textOf returns the text of the first element matching a CSS selector.
func (b *browser) textOf(t testing.TB, css string) string {
	t.Helper()
	return evalJS[string](t, b, fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, css))
}

// waitText waits until the element matching css contains want.
func (b *browser) waitText(t testing.TB, d time.Duration, css, want string) {
	t.Helper()
	b.waitJS(t, d, fmt.Sprintf("%q in %s", want, css),
		fmt.Sprintf(`((document.querySelector(%q) || {}).innerText || "").includes(%q)`, css, want))
}

// shoot saves a screenshot of the page as name at both sizes, and leaves
// the page at the desktop size.
func (b *browser) shoot(t testing.TB, name string) {
	t.Helper()
	for _, size := range [][2]int64{phone, desktop} {
		b.do(t, "resize for the screenshot", chromedp.EmulateViewport(size[0], size[1]), chromedp.Sleep(300*time.Millisecond))
		ctx, cancel := context.WithTimeout(b.ctx, browserStep)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		cancel()
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		file := filepath.Join(b.dir, fmt.Sprintf("%s-%dx%d.png", name, size[0], size[1]))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
