package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2EConsole drives the web console in headless Chromium against a real
// gateway and sidecar, through every feature of issue 10, one dependent step
// after another in one browser: controls are found by role and accessible
// name, and any console error or failed request the step did not provoke
// fails it. Each page is photographed at 1280x800 and 390x844 into
// web/screenshots (git-ignored; AGENTOS_GATEWAY_SCREENSHOTS elsewhere).
func TestE2EConsole(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a browser and real agents")
	}
	// One VM per sidecar: the terminal's VM then has a sidecar of its own.
	e := newE2E(t, "--vms-per-sidecar=1")
	mock := mockanthropic.Start(t)
	b := newBrowser(t, e.gw.URL)
	// The browser's waits bound the steps, each its own; a call to the API
	// between them has a context of its own (ctxT).
	var vmID string

	step(t, "SignIn", func(t *testing.T, _ context.Context) {
		b.do(t, "open the console", chromedp.Navigate(b.base+"/"))
		b.visible(t, "textbox", "API key")
		b.shoot(t, "signin")
		defer b.expectRefusal("/v1/me")()
		b.fill(t, "API key", "agk_not_a_key_at_all_000000000000")
		b.click(t, "button", "Sign in")
		b.waitText(t, browserStep, "[role=alert]", "unknown or revoked API key")
		b.fill(t, "API key", testAdminKey)
		b.click(t, "button", "Sign in")
		b.visible(t, "button", "Sign out")
		b.waitText(t, browserStep, "header", "default")
	})
	b.checkProblems(t)

	step(t, "CreateVM", func(t *testing.T, _ context.Context) {
		b.visible(t, "button", "Create VM")
		b.fill(t, "Labels", "team=console")
		b.fill(t, "Environment", "GREETING=hello")
		b.fill(t, "Loopback ports", strconv.Itoa(mock.Port()))
		b.click(t, "checkbox", "pi")
		b.click(t, "checkbox", "claude")
		b.click(t, "button", "Create VM")
		b.waitText(t, e2eTimeout, "[role=status]", "Created vm_")
		vmID = strings.TrimSuffix(strings.TrimPrefix(b.textOf(t, "form [role=status]"), "Created "), ".")
		vm, err := e.admin.VM(vmID).Get(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if vm.Labels["team"] != "console" || vm.Env["GREETING"] != "hello" || len(vm.Agents) != 2 || len(vm.LoopbackExemptPorts) != 1 {
			t.Fatalf("created %+v", vm)
		}
		b.waitJS(t, browserStep, "the VM listed ready", fmt.Sprintf(`(document.querySelector('[data-vm-state=%q]') || {}).textContent === "ready"`, vmID))
		b.shoot(t, "vms")
	})
	b.checkProblems(t)

	// The terminal depends on the engine's shells the most (README, known
	// limits): its failure fails the test, and the steps after it still run.
	// It runs in a VM of its own, on a sidecar of its own: a process blocked
	// on its stdin (the Processes step runs one, and so is a shell at its
	// prompt) slows every shell and launch of its sidecar on 0.2.21.
	t.Run("Terminal", func(t *testing.T) {
		e := e.sub(t)
		created, err := e.admin.CreateVM(ctxT(t), client.CreateVMRequest{Labels: map[string]string{"team": "terminal"}})
		if err != nil {
			t.Fatal(err)
		}
		vmID := created.ID
		// The VM is deleted behind the page's back at the end: a page that
		// follows its events then hears 409 (the VM is gone), as it should.
		b.expectRefusal("/v1/vms/" + vmID + "/events")
		defer e.admin.VM(vmID).Delete(context.Background())
		b.do(t, "open the terminal's VM", chromedp.Navigate(b.base+"/#/vms/"+vmID))
		b.click(t, "tab", "Terminal")
		shell := terminalScenario(t, b, e, vmID)

		// Leaving the tab closes the shell.
		b.click(t, "tab", "Sessions")
		eventually(t, browserStep, "the page to close the shell", func() bool {
			return b.sent(http.MethodDelete, "/v1/vms/"+vmID+"/shells/"+shell)
		})
		b.do(t, "back to the VM list", chromedp.Navigate(b.base+"/"))
	})
	b.checkProblems(t)

	step(t, "EditFile", func(t *testing.T, _ context.Context) {
		// The list drops the terminal's VM when its deletion lands, which
		// moves the rows: a click meanwhile hits where the link was (seen
		// on a loaded machine, the page stayed on the list).
		b.waitJS(t, browserStep, "the list to hold the console's VM alone", fmt.Sprintf(
			`document.querySelectorAll('[data-vm-state]').length === 1 && !!document.querySelector('[data-vm-state=%q]')`, vmID))
		b.click(t, "link", vmID)
		b.visible(t, "tab", "Files")
		b.fill(t, "New file name", "hello.txt")
		b.click(t, "button", "New file")
		b.do(t, "type into the editor", chromedp.SendKeys("editor", "written in the browser", byRole("textbox", "File content")))
		b.click(t, "button", "Save")
		b.waitText(t, browserStep, "[role=status]", "Saved /workspace/hello.txt")
		if got := readVMFile(t, e.admin, vmID, "/workspace/hello.txt"); got != "written in the browser" {
			t.Fatalf("the file holds %q", got)
		}
		b.waitText(t, browserStep, "[role=tree]", "hello.txt")
		b.shoot(t, "files")
		// The Usage section showed the VM's figures when the page opened;
		// Refresh shows the engine's count of the file just written (the
		// gateway keeps figures for 2 s, hence the retries).
		b.visible(t, "heading", "Usage")
		b.waitText(t, browserStep, "[data-testid=usage-processes]", "running")
		b.waitText(t, browserStep, "[data-testid=usage-memory]", "B")
		eventually(t, browserStep, "the usage to count the saved file", func() bool {
			b.click(t, "button", "Refresh usage")
			time.Sleep(500 * time.Millisecond)
			return strings.Contains(b.textOf(t, "[data-testid=usage-files]"), "inodes")
		})
	})
	b.checkProblems(t)

	step(t, "Upload", func(t *testing.T, _ context.Context) {
		// Through the Upload button's file picker...
		file := filepath.Join(t.TempDir(), "picked.txt")
		if err := os.WriteFile(file, []byte("picked in the browser"), 0o644); err != nil {
			t.Fatal(err)
		}
		b.visible(t, "button", "Upload")
		b.do(t, "pick a file", chromedp.SetUploadFiles(`input[type=file]`, []string{file}))
		b.waitText(t, browserStep, "[role=status]", "Uploaded /workspace/picked.txt")
		b.waitText(t, browserStep, "[role=tree]", "picked.txt")
		// ...and by dropping one on the drop zone, as a drag from the
		// desktop ends.
		b.do(t, "drop a file", chromedp.Evaluate[chromedp.Void](`(() => {
			const dt = new DataTransfer();
			dt.items.add(new File(["dropped on the page"], "dropped.txt", { type: "text/plain" }));
			document.querySelector(".drop").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
		})()`))
		b.waitText(t, browserStep, "[role=tree]", "dropped.txt")
		if got := readVMFile(t, e.admin, vmID, "/workspace/dropped.txt"); got != "dropped on the page" {
			t.Fatalf("the dropped file holds %q", got)
		}
		if got := readVMFile(t, e.admin, vmID, "/workspace/picked.txt"); got != "picked in the browser" {
			t.Fatalf("the picked file holds %q", got)
		}
	})
	b.checkProblems(t)

	step(t, "Run", func(t *testing.T, _ context.Context) {
		b.click(t, "tab", "Processes")
		b.fill(t, "Command", "echo streamed; sleep 1; echo to-stderr >&2; exit 3")
		b.click(t, "button", "Run")
		b.waitText(t, e2eTimeout, "[data-testid=exit-status]", "Exit code 3")
		out := b.textOf(t, "pre.output")
		if !strings.Contains(out, "streamed") || !strings.Contains(out, "to-stderr") {
			t.Fatalf("the output shows %q", out)
		}
		// A background process: its live output, its stdin, and Kill.
		b.click(t, "checkbox", "in the background")
		// It reads one line, then sleeps: a process blocked on its stdin
		// slows its whole sidecar on agentOS 0.2.21 (README).
		b.fill(t, "Command", `read line; echo "got $line"; sleep 120`)
		b.click(t, "button", "Run")
		b.visible(t, "article", "")
		pid := evalJS[string](t, b, `document.querySelector("article.proc strong").textContent`)
		b.fill(t, "Stdin of "+pid, "fed through stdin")
		b.click(t, "button", "Send input")
		b.waitText(t, e2eTimeout, "article.proc pre", "got fed through stdin")
		b.shoot(t, "processes")
		b.click(t, "button", "Kill")
		b.waitText(t, e2eTimeout, "article.proc", "exited")
	})
	b.checkProblems(t)

	var env []string
	for k, v := range mock.Env() {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	// openSession opens a session of agent from the Sessions tab and
	// returns its id.
	openSession := func(t *testing.T, agent, policy string) string {
		b.click(t, "tab", "Sessions")
		b.choose(t, "Agent", agent)
		b.choose(t, "Permissions", policy)
		b.fill(t, "Session environment", strings.Join(env, "\n"))
		b.click(t, "button", "Open session")
		b.waitJS(t, turnTimeout, "the session to open", `/^Session ses_[0-9a-f]+$/.test(document.querySelector("[data-testid=session-state]").textContent)`)
		return strings.TrimPrefix(b.textOf(t, "[data-testid=session-state]"), "Session ")
	}
	send := func(t *testing.T, text string) {
		b.fill(t, "Message", text)
		b.click(t, "button", "Send")
	}
	const lastAgentText = `[...document.querySelectorAll(".msg.agent .text")].map(e => e.textContent).pop() || ""`

	step(t, "SessionPi", func(t *testing.T, _ context.Context) {
		sid := openSession(t, "pi", "allow_all")
		send(t, "hello")
		b.waitText(t, turnTimeout, ".chat", mockanthropic.HelloText)
		// The reply's text shows while it streams, before the turn ends;
		// the next message waits for the end, or it is refused as a turn
		// that is already running.
		eventually(t, turnTimeout, "the first turn to end", func() bool {
			s, err := e.admin.VM(vmID).Session(sid).Get(ctxT(t))
			return err == nil && s.State == client.SessionIdle
		})
		// A slow reply shows while it streams; Cancel ends the turn.
		send(t, "SLOW please")
		b.waitJS(t, turnTimeout, "the slow reply to stream in", fmt.Sprintf(`(t => t.length > 0 && !t.includes(%q))(%s)`, mockanthropic.HelloText, lastAgentText))
		streamed := evalJS[string](t, b, lastAgentText)
		b.shoot(t, "sessions")
		b.click(t, "button", "Cancel")
		b.waitText(t, browserStep, "[data-testid=session-state]", "Cancelled")
		eventually(t, turnTimeout, "the turn to end", func() bool {
			s, err := e.admin.VM(vmID).Session(sid).Get(ctxT(t))
			return err == nil && s.State == client.SessionIdle
		})
		if !strings.HasPrefix(evalJS[string](t, b, lastAgentText), streamed) {
			t.Fatalf("the streamed text %q was not kept", streamed)
		}
		// After a reload the history comes back from the durable events.
		b.do(t, "reload", chromedp.Reload())
		b.visible(t, "tab", "Sessions")
		b.waitText(t, turnTimeout, ".chat", mockanthropic.HelloText)
		b.waitText(t, browserStep, ".chat .msg.user", "hello")
	})
	b.checkProblems(t)

	step(t, "PermissionClaude", func(t *testing.T, _ context.Context) {
		sid := openSession(t, "claude", "ask")
		// A Claude turn in this step has stalled past the turn's timeout
		// about once in five fresh-clone runs, with no error anywhere:
		// when it does, say where the turn stopped (the model's requests,
		// the session's durable events) for the next engineer.
		defer func() {
			if !t.Failed() {
				return
			}
			for _, r := range mock.Requests() {
				t.Logf("model request at %s: prompt %q, %d messages, last block %s, reply %s", r.Time.Format(time.StampMilli), r.Prompt, r.Messages, r.LastBlockType, r.Reply)
			}
			hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if h, err := e.admin.VM(vmID).Session(sid).History(hctx, client.HistoryQuery{}); err == nil {
				for _, ev := range h.Events {
					t.Logf("session event %d at %s: %s %s", ev.Sequence, ev.Timestamp.Format(time.StampMilli), ev.Type, tail(string(ev.Update), 160))
				}
			}
			t.Logf("the gateway's log, last 6 KiB:\n%s", tail(e.gw.logs.String(), 6<<10))
		}()
		send(t, `RUN_TOOL:Bash:{"command":"echo approved > /home/agentos/approved.txt","description":"write a file"}`)
		// The request comes in the agent's turn, so within a turn's time.
		b.visibleWithin(t, turnTimeout, "group", "Permission request")
		perms, err := e.admin.VM(vmID).Session(sid).Permissions(ctxT(t))
		if err != nil || len(perms) != 1 {
			t.Fatalf("pending permissions %+v %v", perms, err)
		}
		opts, err := client.PermissionOptions(perms[0].Options)
		if err != nil {
			t.Fatal(err)
		}
		var allow string
		for _, o := range opts {
			// Every option is a button named as the agent names it.
			b.visible(t, "button", o.Name)
			if o.Kind == "allow_once" {
				allow = o.Name
			}
		}
		if allow == "" {
			t.Fatalf("no allow_once option in %+v", perms[0].Options)
		}
		b.shoot(t, "permission")
		b.click(t, "button", allow)
		eventually(t, turnTimeout, "the approved command to write its file", func() bool {
			body, err := e.admin.VM(vmID).ReadFile(ctxT(t), "/home/agentos/approved.txt")
			if err != nil {
				return false
			}
			defer body.Close()
			got, _ := io.ReadAll(body)
			return string(got) == "approved\n"
		})
		b.waitText(t, turnTimeout, ".chat", "Answered")
		b.waitJS(t, turnTimeout, "the tool call to complete", `!!document.querySelector(".tool .status.completed")`)
	})
	b.checkProblems(t)

	step(t, "Events", func(t *testing.T, _ context.Context) {
		b.click(t, "tab", "Events")
		b.waitText(t, browserStep, "[aria-label='VM events']", "state")
		b.waitText(t, browserStep, "[aria-label='VM events']", "process_exit")
		b.shoot(t, "events")
	})
	b.checkProblems(t)

	step(t, "HibernateWake", func(t *testing.T, _ context.Context) {
		b.click(t, "button", "Hibernate")
		b.waitText(t, turnTimeout, "[data-testid=vm-state]", "hibernated")
		if vm, err := e.admin.VM(vmID).Get(ctxT(t)); err != nil || vm.State != client.VMHibernated {
			t.Fatalf("after Hibernate: %+v %v", vm, err)
		}
		b.shoot(t, "hibernated")
		b.click(t, "button", "Wake")
		b.waitText(t, turnTimeout, "[data-testid=vm-state]", "ready")
		b.waitText(t, browserStep, "[aria-label='VM events']", "state")
		// A page opened on a hibernated VM wakes it.
		if _, err := e.admin.VM(vmID).Hibernate(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		b.do(t, "open the hibernated VM", chromedp.Navigate(b.base+"/#/vms/"+vmID+"/files"))
		b.waitText(t, turnTimeout, "[data-testid=vm-state]", "ready")
		b.visible(t, "button", "Hibernate")
		// Checkpoint stores the VM's files now; the summary says when.
		b.click(t, "button", "Checkpoint")
		b.waitText(t, turnTimeout, "[data-testid=vm-checkpoint]", "ago")
		if vm, err := e.admin.VM(vmID).Get(ctxT(t)); err != nil || vm.CheckpointAt == nil {
			t.Fatalf("after Checkpoint: %+v %v", vm, err)
		}
	})
	b.checkProblems(t)

	step(t, "Admin", func(t *testing.T, _ context.Context) {
		b.click(t, "link", "Admin")
		b.visible(t, "button", "Create tenant")
		// A refused action: the gateway's own words are shown.
		func() {
			defer b.expectRefusal("/v1/tenants")()
			b.click(t, "button", "Create tenant")
			b.waitText(t, browserStep, "[role=alert]", "name")
			b.checkProblems(t)
		}()
		b.fill(t, "Tenant name", "acme")
		b.click(t, "button", "Create tenant")
		b.click(t, "button", "Create a key for acme")
		b.waitJS(t, browserStep, "the new key", `!!document.querySelector("[data-testid=new-key]")`)
		key := b.textOf(t, "[data-testid=new-key]")
		b.waitText(t, browserStep, "[aria-label='Sidecar pool']", "sc-")
		b.shoot(t, "admin")
		if _, err := e.client(key).ListVMs(ctxT(t), client.ListVMsOptions{}); err != nil {
			t.Fatalf("the key shown does not work: %v", err)
		}
		// The tenant's own key shows the tenant's name, and no admin page.
		b.click(t, "button", "Sign out")
		b.fill(t, "API key", key)
		b.click(t, "button", "Sign in")
		b.waitText(t, browserStep, "header", "acme")
		if evalJS[bool](t, b, `[...document.querySelectorAll("header a")].some(a => a.textContent === "Admin")`) {
			t.Fatal("a tenant key is offered the admin page")
		}
		b.click(t, "button", "Sign out")
		b.fill(t, "API key", testAdminKey)
		b.click(t, "button", "Sign in")
		b.waitText(t, browserStep, "header", "default")
	})
	b.checkProblems(t)

	step(t, "TokenLink", func(t *testing.T, _ context.Context) {
		// A backend hands its end user a link to one VM's terminal: the
		// page signs in with the token, drops it from the address bar, and
		// shows that VM with the tabs and buttons its scopes allow.
		tok, err := e.admin.CreateToken(ctxT(t), client.TokenRequest{Scopes: []string{client.ScopeVMRead, client.ScopeShells}, VM: vmID, Label: "end user"})
		if err != nil {
			t.Fatal(err)
		}
		b.do(t, "open the token link", chromedp.Navigate(b.base+"/#token="+tok.Secret))
		b.visible(t, "tab", "Terminal")
		b.waitText(t, browserStep, "[data-testid=token]", "end user")
		b.waitText(t, browserStep, "h1", vmID)
		if href := evalJS[string](t, b, `location.href`); strings.Contains(href, tok.Secret) {
			t.Fatalf("the token stayed in the address bar: %s", href)
		}
		for _, absent := range []string{`[role=tab][id=tab-files]`, `[role=tab][id=tab-sessions]`, `nav a[href="#/admin"]`, `nav a[href="#/"]`} {
			if n := evalJS[int](t, b, fmt.Sprintf(`document.querySelectorAll(%q).length`, absent)); n != 0 {
				t.Errorf("%s is shown to the token", absent)
			}
		}
		if n := evalJS[int](t, b, `[...document.querySelectorAll("button")].filter((x) => x.textContent === "Delete VM").length`); n != 0 {
			t.Error("Delete VM is shown to a token without vm:write")
		}
		b.shoot(t, "token-link")

		// The page's own native EventSource, which cannot send headers,
		// follows the VM's events with the token in its query; a revoked
		// token's stream is refused, and EventSource gives up on it.
		evalJS[any](t, b, fmt.Sprintf(`(() => {
			const open = (name, token) => {
				const r = window[name] = { events: [], closed: false };
				const es = new EventSource("/v1/vms/%s/events?access_token=" + encodeURIComponent(token));
				es.addEventListener("state", (ev) => { r.events.push(ev.lastEventId + " " + ev.data); es.close(); });
				es.onerror = () => { r.closed = es.readyState === EventSource.CLOSED; };
			};
			open("__live", %q);
			open("__revoked", %q);
			return null;
		})()`, vmID, tok.Secret, "agt_revoked"))
		defer b.expectRefusal("access_token=agt_revoked")()
		b.waitJS(t, browserStep, "the EventSource's first event", `window.__live.events.length > 0`)
		if first := evalJS[string](t, b, `window.__live.events[0]`); !regexp.MustCompile(`^[0-9]+ \{.*"state":"`).MatchString(first) {
			t.Errorf("the EventSource's first event: %s", first)
		}
		b.waitJS(t, browserStep, "the refused EventSource to close", `window.__revoked.closed && window.__revoked.events.length === 0`)
		// Back to the admin key for the steps that follow.
		b.click(t, "button", "Sign out")
		b.fill(t, "API key", testAdminKey)
		b.click(t, "button", "Sign in")
		b.waitText(t, browserStep, "header", "default")
	})
	b.checkProblems(t)

	step(t, "DeleteVM", func(t *testing.T, _ context.Context) {
		b.do(t, "open the VM", chromedp.Navigate(b.base+"/#/vms/"+vmID+"/events"))
		b.click(t, "button", "Delete VM")
		b.visible(t, "button", "Create VM")
		vm, err := e.admin.VM(vmID).Get(ctxT(t))
		if err != nil || vm.State != client.VMDisposed {
			t.Fatalf("after Delete VM: %+v %v", vm, err)
		}
		b.waitJS(t, browserStep, "the VM to leave the list", fmt.Sprintf(`!document.querySelector('[data-vm-state=%q]')`, vmID))
	})
	b.checkProblems(t)
}

// terminalScenario types echo hi in the terminal and sees it, resizes the
// window and sees the shell take the size, drops the connection and sees
// the terminal come back with its earlier output and carry keystrokes; it
// returns the shell's id.
func terminalScenario(t testing.TB, b *browser, e *e2e, vmID string) string {
	b.waitText(t, e2eTimeout, "[data-testid=terminal-status]", "Connected to sh_")
	// Type at the prompt, as a person would: the line's output, then a new
	// prompt.
	b.waitJS(t, 20*time.Second, "the prompt", `document.querySelector(".xterm-rows").innerText.trimEnd().endsWith("$")`)
	typeInTerminal(t, b, "echo hi-$((6*7))")
	b.waitJS(t, e2eTimeout, "the line's output and a new prompt", `(() => {
		const ls = document.querySelector(".xterm-rows").innerText.split("\n").map(l => l.trimEnd());
		const i = ls.findIndex(l => l.endsWith("echo hi-$((6*7))"));
		return i >= 0 && ls[i + 1] === "hi-42" && ls[i + 2] === "$";
	})()`)
	shell := strings.TrimPrefix(b.textOf(t, "[data-testid=terminal-status]"), "Connected to ")
	b.shoot(t, "terminal")

	// Resizing the window resizes the shell's terminal.
	before, err := e.admin.VM(vmID).Shell(shell).Get(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	b.do(t, "narrow the window", chromedp.EmulateViewport(800, 600))
	eventually(t, browserStep, "the shell to take the new size", func() bool {
		s, err := e.admin.VM(vmID).Shell(shell).Get(ctxT(t))
		return err == nil && s.Cols < before.Cols
	})
	b.do(t, "widen the window", chromedp.EmulateViewport(desktop[0], desktop[1]))

	// A dropped connection comes back, resuming after the last output
	// it had: the earlier output stays, none of it twice.
	screen := strings.TrimRight(b.textOf(t, ".xterm-rows"), " \n")
	b.click(t, "button", "Reconnect")
	b.waitText(t, browserStep, "[data-testid=terminal-status]", "reconnecting")
	b.waitText(t, e2eTimeout, "[data-testid=terminal-status]", "Connected to "+shell)
	// Keystrokes go out and their echo comes back on the new connection.
	b.do(t, "type on the new connection", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: "echo again"})
		return err
	}))
	b.waitJS(t, e2eTimeout, "the echo on the new connection", `document.querySelector(".xterm-rows").innerText.includes("echo again")`)
	// The screen is what it was, none of it twice, with the new echo
	// after it.
	if rows := b.textOf(t, ".xterm-rows"); !strings.HasPrefix(rows, screen) || !strings.Contains(rows[len(screen):], "echo again") {
		t.Fatalf("the terminal after reconnecting shows:\n%s", rows)
	}
	return shell
}

// typeInTerminal types a line into the terminal and presses Enter. The
// text goes in as one input event (as a keyboard layout or an IME makes
// them; key events carrying text reach xterm.js twice under CDP, as keydown
// and as char); Enter comes once the line is echoed.
func typeInTerminal(t testing.TB, b *browser, line string) {
	t.Helper()
	sel := label("textbox", "Terminal input")
	b.do(t, "type in the terminal",
		chromedp.Focus(sel, byRole("textbox", "Terminal input")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: line})
			return err
		}))
	b.waitJS(t, e2eTimeout, "the shell to echo "+line, fmt.Sprintf(`document.querySelector(".xterm-rows").innerText.includes(%q)`, line))
	b.do(t, "press Enter", pressEnter())
}

// pressEnter presses Enter once: a key down with no text (so no char
// event, which xterm.js would take for a second Enter) and a key up.
func pressEnter() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{"rawKeyDown", "keyUp"} {
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// readVMFile reads a file of a VM through the API.
func readVMFile(t *testing.T, c *client.Client, vm, path string) string {
	t.Helper()
	body, err := c.VM(vm).ReadFile(ctxT(t), path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
