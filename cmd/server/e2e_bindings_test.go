package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// hookCall is one request a test webhook received, with the outcome of
// its signature check.
type hookCall struct {
	path   string
	header http.Header
	body   map[string]any
	sigErr error
}

// hookServer is a tenant's webhook on loopback: /echo answers the input
// back, /slow answers only when the caller gives up, /fail answers 500,
// /decide answers the permission verdict set in decision. Every request's
// signature is checked with the secret set in secret.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	secret   string
	decision string
	calls    []hookCall
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		h.mu.Lock()
		h.calls = append(h.calls, hookCall{path: r.URL.Path, header: r.Header.Clone(), body: body, sigErr: client.VerifyWebhook(h.secret, r.Header, raw)})
		decision := h.decision
		h.mu.Unlock()
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"echo": body["input"], "from": "host"})
		case "/slow":
			<-r.Context().Done()
		case "/decide":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"decision":%q}`, decision)
		default:
			http.Error(w, "broken on purpose", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookServer) setSecret(s string) {
	h.mu.Lock()
	h.secret = s
	h.mu.Unlock()
}

func (h *hookServer) received(path string) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookCall
	for _, c := range h.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// hookedTenant starts a gateway that may call loopback webhooks, a webhook
// server, and a tenant whose secret the server verifies with.
func hookedTenant(t *testing.T, name string) (*e2e, *hookServer, *client.Client) {
	t.Helper()
	e := newE2E(t, "--webhook-allow", "127.0.0.1")
	hooks := newHookServer(t)
	_, c := e.tenant(e.uniq(name), nil)
	secret, err := c.WebhookSecret(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	hooks.setSecret(secret.Secret)
	return e, hooks, c
}

// weather is a collection whose bindings answer through h.
func weather(h *hookServer, echoURL string) client.BindingCollection {
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`)
	return client.BindingCollection{Name: "weather", Description: "Weather of a city, from the host", Bindings: []client.Binding{
		{Name: "get", Description: "Echo a city back", InputSchema: schema, WebhookURL: echoURL,
			Examples: []client.BindingExample{{Description: "Paris", Input: json.RawMessage(`{"city":"Paris"}`)}}},
		{Name: "slow", Description: "Never answers in time", InputSchema: json.RawMessage(`{"type":"object"}`), TimeoutMs: 1500, WebhookURL: h.URL + "/slow"},
		{Name: "fail", Description: "Answers 500", InputSchema: json.RawMessage(`{"type":"object"}`), WebhookURL: h.URL + "/fail"},
		{Name: "gone", Description: "Nobody listens", InputSchema: json.RawMessage(`{"type":"object"}`), WebhookURL: "http://127.0.0.1:1/"},
	}}
}

// TestE2EBindings runs host bindings end to end: declared at create and
// with PUT, called from a guest command, signed, with their failures as the
// command's error, each call a VM event; bad declarations, other tenants.
func TestE2EBindings(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--webhook-allow", "127.0.0.1")
	hooks := newHookServer(t)
	tn, c := e.tenant(e.uniq("bind"), nil)
	_, other := e.tenant(e.uniq("bind-other"), nil)

	secret, err := c.WebhookSecret(ctxT(t))
	if err != nil || !strings.HasPrefix(secret.Secret, "whsec_") || secret.SignatureHeader != client.WebhookSignatureHeader {
		t.Fatalf("webhook secret %+v %v", secret, err)
	}
	if o, err := other.WebhookSecret(ctxT(t)); err != nil || o.Secret == secret.Secret {
		t.Fatalf("the other tenant's secret %+v %v is not its own", o, err)
	}
	hooks.setSecret(secret.Secret)

	vm := e.vm(c, client.CreateVMRequest{Bindings: &client.Bindings{Collections: []client.BindingCollection{weather(hooks, hooks.URL+"/echo")}}})
	h := c.VM(vm.ID)
	run := func(t *testing.T, command string) *client.ExecResult {
		t.Helper()
		res, err := h.Exec(ctxT(t), client.ExecRequest{Command: command})
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		return res
	}

	t.Run("Call", func(t *testing.T) {
		res := run(t, "agentos-weather get --city Paris --days 3")
		var out struct {
			OK     bool `json:"ok"`
			Result struct {
				Echo map[string]any `json:"echo"`
				From string         `json:"from"`
			} `json:"result"`
		}
		if err := json.Unmarshal(res.Stdout, &out); err != nil || res.ExitCode != 0 || !out.OK || out.Result.From != "host" ||
			out.Result.Echo["city"] != "Paris" || out.Result.Echo["days"] != float64(3) {
			t.Fatalf("exit %d stdout %q stderr %q (%v)", res.ExitCode, res.Stdout, res.Stderr, err)
		}
		calls := hooks.received("/echo")
		if len(calls) != 1 {
			t.Fatalf("webhook calls %+v", calls)
		}
		got := calls[0]
		if got.sigErr != nil {
			t.Errorf("signature: %v", got.sigErr)
		}
		if got.body["type"] != "binding.call" || got.body["vmId"] != vm.ID || got.body["tenantId"] != tn.ID ||
			got.body["collection"] != "weather" || got.body["binding"] != "get" || got.body["invocationId"] == "" ||
			got.header.Get(client.WebhookIDHeader) != got.body["invocationId"] {
			t.Errorf("webhook request %v %v", got.body, got.header)
		}
		// A signature made with another secret, or a changed body, fails.
		raw, _ := json.Marshal(got.body)
		if err := client.VerifyWebhook("whsec_other", got.header, raw); err == nil {
			t.Error("a signature verified with another tenant's secret")
		}
	})

	t.Run("Failures", func(t *testing.T) {
		for _, tc := range []struct{ command, stderr string }{
			{"agentos-weather slow", "did not answer within"},
			{"agentos-weather fail", "webhook answered 500"},
			{"agentos-weather gone", "webhook unreachable"},
			{"agentos-weather get", "missing required property"},
		} {
			res := run(t, tc.command)
			if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), tc.stderr) {
				t.Errorf("%s: exit %d stderr %q, want %q", tc.command, res.ExitCode, res.Stderr, tc.stderr)
			}
		}
	})

	t.Run("Events", func(t *testing.T) {
		ctx := ctxT(t)
		want := map[string]string{"weather.get": "ok", "weather.slow": "timeout", "weather.fail": "http_error", "weather.gone": "unreachable"}
		events, cancel := context.WithTimeout(ctx, e2eTimeout)
		defer cancel()
		for ev, err := range h.FollowEvents(events) {
			if err != nil {
				t.Fatalf("vm events: %v (still waiting for %v)", err, want)
			}
			v, ok := ev.(*client.VMEvent)
			if !ok || v.Type != client.VMEventBindingCall {
				continue
			}
			if want[v.Name] != v.Detail["outcome"] || v.Detail["invocation"] == "" || v.Detail["durationMs"] == "" {
				t.Errorf("binding_call event %+v", v)
			}
			for k := range v.Detail {
				if k != "invocation" && k != "outcome" && k != "durationMs" && k != "status" {
					t.Errorf("binding_call event carries %s: %+v", k, v)
				}
			}
			delete(want, v.Name)
			if len(want) == 0 {
				break
			}
		}
	})

	// The bindings come back with the VM after a hibernation: the first
	// call wakes it, and reaches the host as before.
	t.Run("AfterHibernation", func(t *testing.T) {
		if _, err := h.Hibernate(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		res := run(t, "agentos-weather get --city Rome")
		if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"city":"Rome"`) {
			t.Fatalf("after the wake: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("Put", func(t *testing.T) {
		ctx := ctxT(t)
		notes := client.BindingCollection{Name: "notes", Description: "Notes kept by the host", Bindings: []client.Binding{
			{Name: "add", Description: "Add a note", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`), WebhookURL: hooks.URL + "/echo"},
		}}
		// The weather collection stays, its get binding now failing; the
		// engine cannot change what it registered, only the webhooks can.
		changed := weather(hooks, hooks.URL+"/fail")
		changed.Description = "Weather, changed"
		_, err := h.PutBindings(ctx, client.Bindings{Collections: []client.BindingCollection{notes, changed}})
		if ce := wantCode(t, err, "conflict", 409); ce.Details["field"] != "collections[1]" {
			t.Errorf("changed collection: details %v (%s)", ce.Details, ce.Detail)
		}
		_, err = h.Exec(ctx, client.ExecRequest{Command: "agentos-notes add --text hello"})
		wantCode(t, err, "invalid_argument", 400) // command not found: the refused put registered nothing
		changed.Description = weather(hooks, "").Description
		put, err := h.PutBindings(ctx, client.Bindings{Collections: []client.BindingCollection{changed, notes}, PermissionWebhookURL: hooks.URL + "/decide"})
		if err != nil || len(put.Collections) != 2 {
			t.Fatalf("put: %+v %v", put, err)
		}
		got, err := h.Bindings(ctx)
		if err != nil || len(got.Collections) != 2 || got.Collections[1].Name != "notes" || got.PermissionWebhookURL != hooks.URL+"/decide" {
			t.Fatalf("get: %+v %v", got, err)
		}
		if res := run(t, `agentos-notes add --text hello`); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"text":"hello"`) {
			t.Errorf("notes add: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if res := run(t, "agentos-weather get --city Rome"); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "webhook answered 500") {
			t.Errorf("changed get: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		// Dropped collections keep their command, whose calls are refused.
		if _, err := h.PutBindings(ctx, client.Bindings{}); err != nil {
			t.Fatal(err)
		}
		if res := run(t, "agentos-notes add --text again"); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "no longer declared") {
			t.Errorf("dropped notes add: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx := ctxT(t)
		good := weather(hooks, hooks.URL+"/echo")
		with := func(edit func(*client.BindingCollection)) *client.Bindings {
			col := good
			col.Bindings = append([]client.Binding(nil), good.Bindings...)
			edit(&col)
			return &client.Bindings{Collections: []client.BindingCollection{col}}
		}
		for _, tc := range []struct {
			name  string
			b     *client.Bindings
			field string
		}{
			{"name", with(func(c *client.BindingCollection) { c.Name = "Bad Name" }), "collections[0].name"},
			{"description", with(func(c *client.BindingCollection) { c.Description = "" }), "collections[0].description"},
			{"no bindings", with(func(c *client.BindingCollection) { c.Bindings = nil }), "collections[0].bindings"},
			{"repeated binding", with(func(c *client.BindingCollection) { c.Bindings[1].Name = "get" }), "collections[0].bindings[1].name"},
			{"schema", with(func(c *client.BindingCollection) { c.Bindings[0].InputSchema = json.RawMessage(`[1]`) }), "collections[0].bindings[0].inputSchema"},
			{"timeout", with(func(c *client.BindingCollection) { c.Bindings[0].TimeoutMs = 10 }), "collections[0].bindings[0].timeoutMs"},
			{"example", with(func(c *client.BindingCollection) {
				c.Bindings[0].Examples = []client.BindingExample{{Description: "x", Input: json.RawMessage(`"x"`)}}
			}), "collections[0].bindings[0].examples[0].input"},
			{"url", with(func(c *client.BindingCollection) { c.Bindings[0].WebhookURL = "ftp://example.com/" }), "collections[0].bindings[0].webhookUrl"},
			{"private address", with(func(c *client.BindingCollection) { c.Bindings[0].WebhookURL = "http://10.1.2.3/hook" }), "collections[0].bindings[0].webhookUrl"},
			{"host not allowed", with(func(c *client.BindingCollection) { c.Bindings[0].WebhookURL = "https://example.com/hook" }), "collections[0].bindings[0].webhookUrl"},
			{"permission webhook", &client.Bindings{PermissionWebhookURL: "http://169.254.169.254/"}, "permissionWebhookUrl"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := h.PutBindings(ctx, *tc.b)
				if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["field"] != tc.field {
					t.Errorf("put: field %v, want %s (%s)", ce.Details["field"], tc.field, ce.Detail)
				}
				_, err = c.CreateVM(ctx, client.CreateVMRequest{Bindings: tc.b})
				if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["field"] != "bindings."+tc.field {
					t.Errorf("create: field %v, want bindings.%s (%s)", ce.Details["field"], tc.field, ce.Detail)
				}
			})
		}
	})

	t.Run("OtherTenant", func(t *testing.T) {
		ctx := ctxT(t)
		_, err := other.VM(vm.ID).Bindings(ctx)
		wantCode(t, err, "not_found", 404)
		_, err = other.VM(vm.ID).PutBindings(ctx, client.Bindings{Collections: []client.BindingCollection{weather(hooks, hooks.URL+"/echo")}})
		wantCode(t, err, "not_found", 404)
		if got, err := h.Bindings(ctx); err != nil || len(got.Collections) != 0 {
			t.Fatalf("the owner's bindings after the other tenant's put: %+v %v", got, err)
		}
	})
}

// TestE2EBindingsTargets checks the target policy where it matters: with
// no pattern covering loopback, a loopback URL is refused when declared, and
// so is a name allowed by --webhook-allow that resolves to loopback, in an
// address's words (it used to be accepted and then refused at every call;
// the dial-time check still stands against a name rebound later, see
// webhook.TestCheckURLResolvesNames and the dialer's control).
func TestE2EBindingsTargets(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--webhook-allow", "localhost")
	hooks := newHookServer(t)
	_, c := e.tenant(e.uniq("targets"), nil)
	byName := strings.Replace(hooks.URL, "127.0.0.1", "localhost", 1) + "/echo"
	for _, url := range []string{hooks.URL + "/echo", byName} {
		_, err := c.CreateVM(ctxT(t), client.CreateVMRequest{Bindings: &client.Bindings{Collections: []client.BindingCollection{weather(hooks, url)}}})
		ce := wantCode(t, err, "invalid_argument", 400)
		want := "webhook target refused" // 127.0.0.1 matches no pattern
		if url == byName {
			want = "localhost is a loopback, private or otherwise non-public address"
		}
		if ce.Details["field"] != "bindings.collections[0].bindings[0].webhookUrl" || !strings.Contains(ce.Detail, want) {
			t.Fatalf("%s: details %v (%s)", url, ce.Details, ce.Detail)
		}
	}
	if calls := hooks.received("/echo"); len(calls) != 0 {
		t.Fatalf("the webhook was reached: %+v", calls)
	}
}

// TestE2EBindingsAgentPi has pi's bash tool run a binding's command: the
// agent calls the host through the guest command like any other.
func TestE2EBindingsAgentPi(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e, hooks, c := hookedTenant(t, "bind-pi")
	mock := mockanthropic.Start(t)
	vm := e.vm(c, client.CreateVMRequest{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())},
		Bindings: &client.Bindings{Collections: []client.BindingCollection{weather(hooks, hooks.URL+"/echo")}}})
	const sid = "pi-bindings"
	within(t, "open the session", turnTimeout, func(ctx context.Context) {
		if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi", Cwd: "/workspace", Env: mock.Env()}); err != nil {
			t.Fatal(err)
		}
	})
	within(t, "prompt", turnTimeout, func(ctx context.Context) {
		res, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: toolPrompt("bash", "agentos-weather get --city Lisbon")})
		if err != nil || res.StopReason != "end_turn" {
			t.Fatalf("prompt: %+v %v", res, err)
		}
	})
	calls := hooks.received("/echo")
	if len(calls) != 1 || calls[0].sigErr != nil || calls[0].body["binding"] != "get" {
		t.Fatalf("webhook calls %+v", calls)
	}
	if in, _ := calls[0].body["input"].(map[string]any); in["city"] != "Lisbon" {
		t.Fatalf("input %v", calls[0].body["input"])
	}
	r, ok := mock.LastToolResult()
	if !ok || !strings.Contains(r.LastText, `"city":"Lisbon"`) || r.LastIsError {
		t.Fatalf("the tool result the agent reported: %+v", r)
	}
}

// TestE2EBindingsPermissionWebhook has a permission webhook decide
// claude-code's permission requests: an allow that lets the command run,
// then a failing webhook whose request falls back at once to the default
// decision (reject), long before the default's timeout.
func TestE2EBindingsPermissionWebhook(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a real agent")
	}
	e, hooks, c := hookedTenant(t, "perm-hook")
	mock := mockanthropic.Start(t)
	hooks.mu.Lock()
	hooks.decision = "allow"
	hooks.mu.Unlock()
	vm := e.vm(c, client.CreateVMRequest{Agents: []string{"claude"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())},
		Bindings: &client.Bindings{Collections: []client.BindingCollection{}, PermissionWebhookURL: hooks.URL + "/decide"}})
	const sid = "claude-perm-hook"
	within(t, "open the session", turnTimeout, func(ctx context.Context) {
		if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "claude", Cwd: "/workspace", PermissionPolicy: "ask", Env: mock.Env(),
			PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 3600}}); err != nil {
			t.Fatal(err)
		}
	})
	feed := e.follow(t, c, vm.ID, sid, "")
	defer feed.close()
	decidedIn := func(t *testing.T, sid string, feed *sessionFeed, command string) client.SessionEvent {
		t.Helper()
		if res, err := c.VM(vm.ID).Session(sid).PromptAsync(ctxT(t), client.PromptRequest{Content: toolPrompt("Bash", command)}); err != nil || res != nil {
			t.Fatalf("async prompt: %+v %v", res, err)
		}
		ev := feed.until(t, turnTimeout, "the permission response", func(ev event) bool {
			se, err := ev.SessionEvent()
			return err == nil && se.Type == "permission_response"
		})
		se, _ := ev.SessionEvent()
		eventually(t, turnTimeout, "the turn to end", func() bool {
			return mustSession(t, c, vm.ID, sid).State == client.SessionIdle
		})
		return se
	}
	decided := func(t *testing.T, command string) client.SessionEvent {
		t.Helper()
		return decidedIn(t, sid, feed, command)
	}
	exists := func(t *testing.T, path string) bool {
		t.Helper()
		body, err := c.VM(vm.ID).ReadFile(ctxT(t), path)
		if client.IsCode(err, "not_found") {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		body.Close()
		return true
	}

	// Each of the next four steps runs a turn (the last two open a session
	// for it).
	stepFor(t, "Allow", turnTimeout, func(t *testing.T, ctx context.Context) {
		se := decided(t, "echo hooked > /workspace/hooked.txt")
		if se.Decision == nil || se.Decision.By != "webhook" || se.Status != "accepted" {
			t.Fatalf("response %+v decision %+v", se, se.Decision)
		}
		if !exists(t, "/workspace/hooked.txt") {
			t.Fatal("the command the webhook allowed did not run")
		}
		calls := hooks.received("/decide")
		if len(calls) != 1 || calls[0].sigErr != nil || calls[0].body["type"] != "permission.request" ||
			calls[0].body["sessionId"] != sid || calls[0].body["requestId"] != se.RequestID {
			t.Fatalf("webhook calls %+v", calls)
		}
	})
	stepFor(t, "Fallback", turnTimeout, func(t *testing.T, ctx context.Context) {
		if _, err := c.VM(vm.ID).PutBindings(ctx, client.Bindings{PermissionWebhookURL: hooks.URL + "/fail"}); err != nil {
			t.Fatal(err)
		}
		// The default's timeout is an hour, far past the test's deadline:
		// a decision at all is the fallback's.
		se := decided(t, "echo unhooked > /workspace/unhooked.txt")
		if se.Decision == nil || se.Decision.By != "timeout" {
			t.Fatalf("response %+v decision %+v", se, se.Decision)
		}
		if exists(t, "/workspace/unhooked.txt") {
			t.Fatal("the default decision (reject) let the command run")
		}
		if len(hooks.received("/fail")) != 1 {
			t.Fatalf("the failing webhook was asked %d times", len(hooks.received("/fail")))
		}
	})
	// A session's or its tenant's default decision can name the webhook
	// too; either wins over the VM's (which still answers 500 here).
	askedFor := func(t *testing.T, session string) {
		t.Helper()
		for _, call := range hooks.received("/decide") {
			if call.body["sessionId"] == session {
				if call.sigErr != nil {
					t.Fatalf("the webhook's call for %s: %v", session, call.sigErr)
				}
				return
			}
		}
		t.Fatalf("the webhook was never asked for session %s", session)
	}
	openFollowed := func(t *testing.T, session string, def *client.PermissionDefault) *sessionFeed {
		t.Helper()
		if _, err := c.VM(vm.ID).OpenSession(ctxT(t), client.OpenSessionRequest{SessionID: session, Agent: "claude", Cwd: "/workspace",
			PermissionPolicy: "ask", Env: mock.Env(), PermissionDefault: def}); err != nil {
			t.Fatal(err)
		}
		f := e.follow(t, c, vm.ID, session, "")
		t.Cleanup(f.close)
		return f
	}
	stepFor(t, "SessionSetting", turnTimeout, func(t *testing.T, ctx context.Context) {
		const sid2 = "claude-perm-session-hook"
		f := openFollowed(t, sid2, &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 3600, WebhookURL: hooks.URL + "/decide"})
		se := decidedIn(t, sid2, f, "echo by-session > /workspace/by-session.txt")
		if se.Decision == nil || se.Decision.By != "webhook" || se.Status != "accepted" || !exists(t, "/workspace/by-session.txt") {
			t.Fatalf("response %+v decision %+v", se, se.Decision)
		}
		askedFor(t, sid2)
	})
	stepFor(t, "TenantSetting", turnTimeout, func(t *testing.T, ctx context.Context) {
		me, err := c.Me(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.UpdateTenant(ctx, me.Tenant.ID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
			PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 3600, WebhookURL: hooks.URL + "/decide"}}}); err != nil {
			t.Fatal(err)
		}
		const sid3 = "claude-perm-tenant-hook"
		f := openFollowed(t, sid3, nil)
		se := decidedIn(t, sid3, f, "echo by-tenant > /workspace/by-tenant.txt")
		if se.Decision == nil || se.Decision.By != "webhook" || se.Status != "accepted" || !exists(t, "/workspace/by-tenant.txt") {
			t.Fatalf("response %+v decision %+v", se, se.Decision)
		}
		askedFor(t, sid3)
	})
	step(t, "SettingRefused", func(t *testing.T, ctx context.Context) {
		me, err := c.Me(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bad := &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60, WebhookURL: "ftp://hooks.example.com/x"}
		_, err = e.admin.UpdateTenant(ctx, me.Tenant.ID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{PermissionDefault: bad}})
		if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["field"] != "sessions.permissionDefault.webhookUrl" {
			t.Errorf("tenant update: field %v (%s)", ce.Details["field"], ce.Detail)
		}
		_, err = c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: "refused", Agent: "claude", PermissionDefault: bad})
		if ce := wantCode(t, err, "invalid_argument", 400); ce.Details["field"] != "permissionDefault.webhookUrl" {
			t.Errorf("session: field %v (%s)", ce.Details["field"], ce.Detail)
		}
	})
}

// TestE2EBindingsCluster declares and calls bindings through the node that
// does not run the VM: the request is proxied to the owner, whose engine
// asks it, so the owner makes the webhook call; every node gives a tenant
// the same secret.
func TestE2EBindingsCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs two gateway binaries")
	}
	cl := startCluster(t, 2, "--webhook-allow", "127.0.0.1")
	hc := cl.hc
	hooks := newHookServer(t)
	nodes := map[string]*clusterNode{}
	for _, n := range cl.nodes {
		nodes[n.id] = n
	}
	clients := map[string]*client.Client{}
	within(t, "a tenant and its secret on each node", e2eTimeout, func(ctx context.Context) {
		tn, err := nodes["n1"].c.CreateTenant(ctx, client.TenantCreate{Name: "bind-cluster"})
		if err != nil {
			t.Fatal(err)
		}
		key, err := nodes["n1"].c.CreateKey(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		var secrets []string
		for id, n := range nodes {
			clients[id] = mustClient(t, n.url(), key.Key, client.WithHTTPClient(hc))
			s, err := clients[id].WebhookSecret(ctx)
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, s.Secret)
		}
		if secrets[0] != secrets[1] {
			t.Fatalf("the nodes give the tenant different secrets")
		}
		hooks.setSecret(secrets[0])
	})

	vm, err := clients["n1"].CreateVM(ctxT(t), client.CreateVMRequest{})
	if err != nil {
		t.Fatal(err)
	}
	via := "n1"
	if vm.Node == "n1" {
		via = "n2"
	}
	h := clients[via].VM(vm.ID)
	within(t, "bindings through "+via, e2eTimeout, func(ctx context.Context) {
		if _, err := h.PutBindings(ctx, client.Bindings{Collections: []client.BindingCollection{weather(hooks, hooks.URL+"/echo")}}); err != nil {
			t.Fatalf("put through %s (the VM runs on %s): %v", via, vm.Node, err)
		}
		if got, err := h.Bindings(ctx); err != nil || len(got.Collections) != 1 {
			t.Fatalf("get through %s: %+v %v", via, got, err)
		}
		res, err := h.Exec(ctx, client.ExecRequest{Command: "agentos-weather get --city Oslo"})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"city":"Oslo"`) {
			t.Fatalf("exec through %s: %+v %v", via, res, err)
		}
		calls := hooks.received("/echo")
		if len(calls) != 1 || calls[0].sigErr != nil || calls[0].body["vmId"] != vm.ID {
			t.Fatalf("webhook calls %+v", calls)
		}
		if _, err := h.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
