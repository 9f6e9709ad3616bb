package handlers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/metering"
	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// This file checks the handlers against api/openapi.yaml without a sidecar:
// real handlers over a real (in-memory) store and a vms service whose pool
// never has room, with every response going through apispec.Transport. It
// reaches every route's validation and lookup errors, the tenant routes in
// full, and the JSON shapes of the Go types the handlers answer with.

// specFullPool is a sidecar pool with no room: creating a VM is
// resource_exhausted, and no sidecar is ever started.
type specFullPool struct{}

func (specFullPool) Acquire(context.Context, string, bool) (vms.Lease, error) {
	return nil, gateway.Errorf(gateway.CodeResourceExhausted, "the sidecar pool is full")
}

// specPool is what the handlers show of the pool.
type specPool struct{ ready bool }

func (p *specPool) Sidecars() []gateway.SidecarInfo {
	return []gateway.SidecarInfo{
		{ID: "sc_1", Pid: 4242, State: "ready", Holds: 2, Tenants: []string{"default"}, RSS: 64 << 20, StartedAt: time.Now()},
		{ID: "sc_2", State: "starting", StartedAt: time.Now()},
	}
}
func (p *specPool) Stats() gateway.SidecarPoolStats { return gateway.SidecarPoolStats{Restarts: 1} }
func (p *specPool) Ready() bool                     { return p.ready }

const specAdminKey = "agk_spec_test_admin_key_0123456789"

type specEnv struct {
	t        *testing.T
	doc      *openapi3.T
	url      string
	client   *http.Client
	db       *store.DB
	tenantB  string // a tenant other than default
	keyB     string // its key
	lostVM   string // a VM of default, lost
	goneVM   string // a VM of default that never got a sidecar, disposed
	slowKey  string // a key of a tenant allowed 1 request per second
	slowTent string
}

func newSpecEnv(t *testing.T) *specEnv {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.EnsureTenant(ctx, gateway.Tenant{ID: gateway.DefaultTenantID, Name: "default"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, specAdminKey); err != nil {
		t.Fatal(err)
	}
	b, err := db.CreateTenant(ctx, gateway.Tenant{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	_, keyB, err := db.CreateAPIKey(ctx, b.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := db.CreateTenant(ctx, gateway.Tenant{Name: "slow", Quotas: gateway.Quotas{RequestsPerSecond: 0.001}})
	if err != nil {
		t.Fatal(err)
	}
	_, slowKey, err := db.CreateAPIKey(ctx, slow.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	lost := gateway.VM{ID: "vm_0000000000000000lost", TenantID: gateway.DefaultTenantID, State: gateway.VMLost,
		Reason: "sidecar died", Spec: gateway.VMSpec{Labels: map[string]string{"team": "docs"}, Env: map[string]string{"A": "1"},
			Permissions: map[string]any{"network": "deny"}, Software: []string{"@agentos-software/pi"}, LoopbackExemptPorts: []uint16{8080}}}
	if err := db.CreateVM(ctx, lost); err != nil {
		t.Fatal(err)
	}

	svc := vms.New(vms.Config{}, db, specFullPool{})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	keeper := idempotency.New(idempotency.Config{}, db)
	t.Cleanup(keeper.Close)
	sess := sessions.New(sessions.Config{Idempotency: keeper}, db, svc)
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	s := New(Config{MaxBodyBytes: 4 << 10, MaxFileBytes: 1 << 10, OpenAPI: api.Spec}, db, svc, sess, nil, keeper, &specPool{ready: true})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	doc := apispec.MustLoad(t)
	e := &specEnv{t: t, doc: doc, url: srv.URL, db: db, tenantB: b.ID, keyB: keyB, lostVM: lost.ID,
		slowKey: slowKey, slowTent: slow.ID,
		client: &http.Client{Transport: apispec.Transport(t, doc, nil), Timeout: 30 * time.Second}}

	// A create that fails leaves no record.
	status, _, body := e.do("POST", "/v1/vms", specAdminKey, nil, `{"labels":{"k":"v"}}`)
	if status != http.StatusTooManyRequests {
		t.Fatalf("create with a full pool: %d %s", status, body)
	}
	page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: gateway.DefaultTenantID, States: gateway.AllStates, Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != lost.ID {
		t.Fatalf("VMs after a failed create: %v %v", page.Items, err)
	}
	gone := gateway.VM{ID: "vm_0000000000000000gone", TenantID: gateway.DefaultTenantID, State: gateway.VMDisposed, Reason: "deleted"}
	if err := db.CreateVM(ctx, gone); err != nil {
		t.Fatal(err)
	}
	e.goneVM = gone.ID
	return e
}

func (e *specEnv) do(method, path, key string, header map[string]string, body string) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

func specProblemCode(b []byte) string {
	var p api.Problem
	_ = json.Unmarshal(b, &p)
	return string(p.Code)
}

// TestHandlersAnswerTheSpec drives every route as far as it goes without a
// sidecar; apispec.Transport checks every answer against openapi.yaml.
func TestHandlersAnswerTheSpec(t *testing.T) {
	e := newSpecEnv(t)
	vm := "/v1/vms/" + e.lostVM
	gone := "/v1/vms/" + e.goneVM
	big := `{"command":"` + strings.Repeat("x", 5<<10) + `"}`

	type hdr = map[string]string
	cases := []struct {
		name         string
		method, path string
		key          string
		header       hdr
		body         string
		status       int
		code         string // the problem's code, for errors
	}{
		// Operations.
		{"healthz", "GET", "/healthz", "", nil, "", 200, ""},
		{"readyz", "GET", "/readyz", "", nil, "", 200, ""},
		{"metrics", "GET", "/metrics", "", nil, "", 200, ""},
		{"openapi", "GET", "/v1/openapi.yaml", "", nil, "", 200, ""},
		{"me as admin", "GET", "/v1/me", specAdminKey, nil, "", 200, ""},
		{"me as tenant", "GET", "/v1/me", e.keyB, nil, "", 200, ""},
		{"me without a key", "GET", "/v1/me", "", nil, "", 401, "unauthenticated"},
		{"sidecars", "GET", "/v1/sidecars", specAdminKey, nil, "", 200, ""},
		{"sidecars as tenant", "GET", "/v1/sidecars", e.keyB, nil, "", 403, "permission_denied"},
		{"unknown route", "GET", "/v1/nothing", specAdminKey, nil, "", 404, "not_found"},
		{"method not allowed", "PATCH", "/v1/vms", specAdminKey, nil, "", 405, "method_not_allowed"},

		// Authentication.
		{"no key", "GET", "/v1/vms", "", nil, "", 401, "unauthenticated"},
		{"unknown key", "GET", "/v1/vms", "agk_not_a_key_at_all_000000000000", nil, "", 401, "unauthenticated"},
		{"basic auth", "GET", "/v1/vms", "", hdr{"Authorization": "Basic YTpi"}, "", 401, "unauthenticated"},

		// VMs.
		{"list vms", "GET", "/v1/vms", specAdminKey, nil, "", 200, ""},
		{"list vms filtered", "GET", "/v1/vms?state=lost&label=team:docs&limit=1", specAdminKey, nil, "", 200, ""},
		{"list vms bad state", "GET", "/v1/vms?state=sleeping", specAdminKey, nil, "", 400, "invalid_argument"},
		{"list vms bad label", "GET", "/v1/vms?label=team", specAdminKey, nil, "", 400, "invalid_argument"},
		{"list vms bad limit", "GET", "/v1/vms?limit=0", specAdminKey, nil, "", 400, "invalid_argument"},
		{"list vms bad cursor", "GET", "/v1/vms?cursor=garbage", specAdminKey, nil, "", 400, "invalid_argument"},
		{"get vm", "GET", vm, specAdminKey, nil, "", 200, ""},
		{"get vm trailing slash", "GET", vm + "/", specAdminKey, nil, "", 200, ""},
		{"get disposed vm", "GET", gone, specAdminKey, nil, "", 200, ""},
		{"get unknown vm", "GET", "/v1/vms/vm_nope", specAdminKey, nil, "", 404, "not_found"},
		{"get another tenant's vm", "GET", vm, e.keyB, nil, "", 404, "not_found"},
		{"delete unknown vm", "DELETE", "/v1/vms/vm_nope", specAdminKey, nil, "", 404, "not_found"},
		{"create vm unknown field", "POST", "/v1/vms", specAdminKey, nil, `{"colour":"red"}`, 400, "invalid_argument"},
		{"create vm bad agent", "POST", "/v1/vms", specAdminKey, nil, `{"agents":["emacs"]}`, 400, "invalid_argument"},
		{"create vm host software", "POST", "/v1/vms", specAdminKey, nil, `{"software":["/etc"]}`, 400, "invalid_argument"},
		{"create vm bad permission", "POST", "/v1/vms", specAdminKey, nil, `{"permissions":{"fs":"maybe"}}`, 400, "invalid_argument"},
		{"create vm not json", "POST", "/v1/vms", specAdminKey, nil, `{`, 400, "invalid_argument"},
		{"create vm empty body", "POST", "/v1/vms", specAdminKey, nil, ``, 400, "invalid_argument"},
		{"create vm too large", "POST", "/v1/vms", specAdminKey, nil, `{"labels":{"a":"` + strings.Repeat("x", 5<<10) + `"}}`, 413, "payload_too_large"},
		{"create vm pool full", "POST", "/v1/vms", e.keyB, nil, `{}`, 429, "resource_exhausted"},
		{"events of lost vm", "GET", vm + "/events", specAdminKey, nil, "", 409, "conflict"},
		{"events bad last-event-id", "GET", vm + "/events", specAdminKey, hdr{"Last-Event-ID": "x"}, "", 400, "invalid_argument"},
		{"events of unknown vm", "GET", "/v1/vms/vm_nope/events?lastEventId=3", specAdminKey, nil, "", 404, "not_found"},
		{"usage of lost vm", "GET", vm + "/usage", specAdminKey, nil, "", 409, "conflict"},
		{"usage of unknown vm", "GET", "/v1/vms/vm_nope/usage", specAdminKey, nil, "", 404, "not_found"},
		{"usage of another tenant's vm", "GET", vm + "/usage", e.keyB, nil, "", 404, "not_found"},

		// Exec.
		{"exec on lost vm", "POST", vm + "/exec", specAdminKey, nil, `{"command":"true"}`, 409, "conflict"},
		{"exec on unknown vm", "POST", "/v1/vms/vm_nope/exec", specAdminKey, nil, `{"argv":["true"]}`, 404, "not_found"},
		{"exec both command and argv", "POST", vm + "/exec", specAdminKey, nil, `{"command":"true","argv":["true"]}`, 400, "invalid_argument"},
		{"exec neither", "POST", vm + "/exec", specAdminKey, nil, `{"cwd":"/"}`, 400, "invalid_argument"},
		{"exec relative cwd", "POST", vm + "/exec", specAdminKey, nil, `{"command":"true","cwd":"tmp"}`, 400, "invalid_argument"},
		{"exec bad stdin", "POST", vm + "/exec", specAdminKey, nil, `{"command":"cat","stdin":"!","stdinEncoding":"base64"}`, 400, "invalid_argument"},
		{"exec timeout too long", "POST", vm + "/exec", specAdminKey, nil, `{"command":"true","timeoutMs":86400001}`, 400, "invalid_argument"},
		{"exec too large", "POST", vm + "/exec", specAdminKey, nil, big, 413, "payload_too_large"},
		{"exec idempotent", "POST", vm + "/exec", specAdminKey, hdr{"Idempotency-Key": "k1"}, `{"command":"true"}`, 409, "conflict"},
		// A refusal before anything ran is not recorded: the same key may be
		// used again, even with another body. (Replays of outcomes are
		// tested end to end against a real sidecar.)
		{"exec idempotent refusal not recorded", "POST", vm + "/exec", specAdminKey, hdr{"Idempotency-Key": "k1"}, `{"command":"true"}`, 409, "conflict"},
		{"exec idempotent key reusable", "POST", vm + "/exec", specAdminKey, hdr{"Idempotency-Key": "k1"}, `{"command":"false"}`, 409, "conflict"},
		{"exec idempotency key too long", "POST", vm + "/exec", specAdminKey, hdr{"Idempotency-Key": strings.Repeat("k", 256)}, `{"command":"true"}`, 400, "invalid_argument"},
		{"exec streamed with idempotency key on a lost vm", "POST", vm + "/exec", specAdminKey, hdr{"Accept": "text/event-stream", "Idempotency-Key": "k2"}, `{"command":"true"}`, 409, "conflict"},

		// Processes.
		{"spawn on lost vm", "POST", vm + "/processes", specAdminKey, nil, `{"argv":["sleep","1"]}`, 409, "conflict"},
		{"spawn bad body", "POST", vm + "/processes", specAdminKey, nil, `{"argv":[""]}`, 400, "invalid_argument"},
		{"spawn unknown field", "POST", vm + "/processes", specAdminKey, nil, `{"command":"true","stdin":"x"}`, 400, "invalid_argument"},
		{"spawn idempotent", "POST", "/v1/vms/vm_nope/processes", specAdminKey, hdr{"Idempotency-Key": "k3"}, `{"command":"true"}`, 404, "not_found"},
		{"list processes", "GET", vm + "/processes", specAdminKey, nil, "", 409, "conflict"},
		{"get process bad pid", "GET", vm + "/processes/abc", specAdminKey, nil, "", 400, "invalid_argument"},
		{"get process", "GET", vm + "/processes/1", specAdminKey, nil, "", 409, "conflict"},
		{"get process unknown vm", "GET", "/v1/vms/vm_nope/processes/1", specAdminKey, nil, "", 404, "not_found"},
		{"process output", "GET", vm + "/processes/1/output", specAdminKey, nil, "", 409, "conflict"},
		{"process output bad last-event-id", "GET", vm + "/processes/1/output?lastEventId=-1", specAdminKey, nil, "", 400, "invalid_argument"},
		{"stdin", "POST", vm + "/processes/1/stdin", specAdminKey, hdr{"Content-Type": "application/octet-stream"}, "hello\n", 409, "conflict"},
		{"stdin bad pid", "POST", vm + "/processes/-1/stdin", specAdminKey, nil, "x", 400, "invalid_argument"},
		{"close stdin", "POST", vm + "/processes/1/stdin/close", specAdminKey, nil, "", 409, "conflict"},
		{"signal", "POST", vm + "/processes/1/signal", specAdminKey, nil, `{"signal":"TERM"}`, 409, "conflict"},
		{"signal missing", "POST", vm + "/processes/1/signal", specAdminKey, nil, `{}`, 400, "invalid_argument"},
		{"wait", "GET", vm + "/processes/1/wait?timeoutMs=10", specAdminKey, nil, "", 409, "conflict"},
		{"wait bad timeout", "GET", vm + "/processes/1/wait?timeoutMs=-1", specAdminKey, nil, "", 400, "invalid_argument"},

		// Shells.
		{"open shell", "POST", vm + "/shells", specAdminKey, nil, `{"shell":"bash","cols":100}`, 409, "conflict"},
		{"open shell bad shell", "POST", vm + "/shells", specAdminKey, nil, `{"shell":"zsh"}`, 400, "invalid_argument"},
		{"open shell unknown vm", "POST", "/v1/vms/vm_nope/shells", specAdminKey, nil, `{}`, 404, "not_found"},
		{"shell input", "POST", vm + "/shells/sh_1/input", specAdminKey, nil, "ls\n", 409, "conflict"},
		{"shell resize", "POST", vm + "/shells/sh_1/resize", specAdminKey, nil, `{"cols":80,"rows":24}`, 409, "conflict"},
		{"shell resize bad", "POST", vm + "/shells/sh_1/resize", specAdminKey, nil, `{"cols":0,"rows":24}`, 400, "invalid_argument"},
		{"shell output", "GET", "/v1/vms/vm_nope/shells/sh_1/output", specAdminKey, nil, "", 404, "not_found"},
		{"close shell", "DELETE", vm + "/shells/sh_1", specAdminKey, nil, "", 409, "conflict"},

		// Files.
		{"read file", "GET", vm + "/files?path=/etc/hosts", specAdminKey, nil, "", 409, "conflict"},
		{"read file no path", "GET", vm + "/files", specAdminKey, nil, "", 400, "invalid_argument"},
		{"read file relative", "GET", vm + "/files?path=etc/hosts", specAdminKey, nil, "", 400, "invalid_argument"},
		{"read file dotdot", "GET", vm + "/files?path=/etc/../root", specAdminKey, nil, "", 400, "invalid_argument"},
		{"head file", "HEAD", vm + "/files?path=/etc/hosts", specAdminKey, nil, "", 409, ""},
		{"head file unknown vm", "HEAD", "/v1/vms/vm_nope/files?path=/etc/hosts", specAdminKey, nil, "", 404, ""},
		{"head file no path", "HEAD", vm + "/files", specAdminKey, nil, "", 400, ""},
		{"write file", "PUT", vm + "/files?path=/tmp/a&mkdirs=true", specAdminKey, nil, "hello", 409, "conflict"},
		{"write file bad mkdirs", "PUT", vm + "/files?path=/tmp/a&mkdirs=maybe", specAdminKey, nil, "hello", 400, "invalid_argument"},
		{"write file too large", "PUT", vm + "/files?path=/tmp/a", specAdminKey, nil, strings.Repeat("x", 2<<10), 413, "payload_too_large"},
		{"read archive", "GET", vm + "/archive?path=/tmp", specAdminKey, nil, "", 409, "conflict"},
		{"read archive bad format", "GET", vm + "/archive?path=/tmp&format=zip", specAdminKey, nil, "", 400, "invalid_argument"},
		{"read archive no path", "GET", vm + "/archive", specAdminKey, nil, "", 400, "invalid_argument"},
		{"write archive", "PUT", vm + "/archive?path=/tmp&mkdirs=true", specAdminKey, nil, "", 409, "conflict"},
		{"write archive bad encoding", "PUT", vm + "/archive?path=/tmp", specAdminKey, hdr{"Content-Encoding": "br"}, "", 400, "invalid_argument"},
		{"delete file", "DELETE", vm + "/files?path=/tmp/a&recursive=true", specAdminKey, nil, "", 409, "conflict"},
		{"delete root", "DELETE", vm + "/files?path=/", specAdminKey, nil, "", 400, "invalid_argument"},
		{"list dir", "GET", vm + "/dirs?path=/&recursive=true&maxDepth=2", specAdminKey, nil, "", 409, "conflict"},
		{"list dir bad depth", "GET", vm + "/dirs?path=/&maxDepth=65", specAdminKey, nil, "", 400, "invalid_argument"},
		{"mkdir", "POST", vm + "/dirs", specAdminKey, nil, `{"path":"/tmp/d"}`, 409, "conflict"},
		{"mkdir relative", "POST", vm + "/dirs", specAdminKey, nil, `{"path":"tmp/d"}`, 400, "invalid_argument"},
		{"mkdir dotdot", "POST", vm + "/dirs", specAdminKey, nil, `{"path":"/tmp/../d"}`, 400, "invalid_argument"},
		{"move", "POST", "/v1/vms/vm_nope/fs/move", specAdminKey, nil, `{"from":"/a","to":"/b"}`, 404, "not_found"},
		{"move missing to", "POST", vm + "/fs/move", specAdminKey, nil, `{"from":"/a"}`, 400, "invalid_argument"},
		{"stat", "GET", vm + "/fs/stat?path=/", specAdminKey, nil, "", 409, "conflict"},

		// Tenants.
		{"create tenant", "POST", "/v1/tenants", specAdminKey, nil, `{"name":"c","isolated":true,"quotas":{"maxVms":2,"requestsPerSecond":null}}`, 201, ""},
		{"create tenant no name", "POST", "/v1/tenants", specAdminKey, nil, `{"isolated":true}`, 400, "invalid_argument"},
		{"create tenant bad quota", "POST", "/v1/tenants", specAdminKey, nil, `{"name":"c","quotas":{"maxVms":-1}}`, 400, "invalid_argument"},
		{"create tenant unknown quota", "POST", "/v1/tenants", specAdminKey, nil, `{"name":"c","quotas":{"maxDisks":1}}`, 400, "invalid_argument"},
		{"create tenant as tenant", "POST", "/v1/tenants", e.keyB, nil, `{"name":"c"}`, 403, "permission_denied"},
		{"list tenants", "GET", "/v1/tenants?limit=2", specAdminKey, nil, "", 200, ""},
		{"list tenants bad limit", "GET", "/v1/tenants?limit=501", specAdminKey, nil, "", 400, "invalid_argument"},
		{"get tenant", "GET", "/v1/tenants/" + e.tenantB, specAdminKey, nil, "", 200, ""},
		{"get default tenant", "GET", "/v1/tenants/default", specAdminKey, nil, "", 200, ""},
		{"get unknown tenant", "GET", "/v1/tenants/ten_nope", specAdminKey, nil, "", 404, "not_found"},
		{"update tenant", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"name":"bee","quotas":{"maxProcesses":5}}`, 200, ""},
		{"update tenant empty name", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"name":""}`, 400, "invalid_argument"},
		{"update unknown tenant", "PATCH", "/v1/tenants/ten_nope", specAdminKey, nil, `{}`, 404, "not_found"},
		{"create key", "POST", "/v1/tenants/" + e.tenantB + "/keys", specAdminKey, nil, "", 201, ""},
		{"create key unknown tenant", "POST", "/v1/tenants/ten_nope/keys", specAdminKey, nil, "", 404, "not_found"},
		{"list keys", "GET", "/v1/tenants/" + e.tenantB + "/keys", specAdminKey, nil, "", 200, ""},
		{"list keys unknown tenant", "GET", "/v1/tenants/ten_nope/keys", specAdminKey, nil, "", 404, "not_found"},
		{"delete unknown key", "DELETE", "/v1/tenants/" + e.tenantB + "/keys/key_nope", specAdminKey, nil, "", 404, "not_found"},
		{"list keys as tenant", "GET", "/v1/tenants/" + e.tenantB + "/keys", e.keyB, nil, "", 403, "permission_denied"},

		// Last, as it removes the lost VM's record: a second delete finds
		// nothing.
		{"delete lost vm", "DELETE", vm, specAdminKey, nil, "", 204, ""},
		{"delete lost vm again", "DELETE", vm, specAdminKey, nil, "", 404, "not_found"},

		// The request-rate quota: the first request takes the only token.
		{"rate limited first", "GET", "/v1/vms", e.slowKey, nil, "", 200, ""},
		{"rate limited", "GET", "/v1/vms", e.slowKey, nil, "", 429, "resource_exhausted"},
	}
	for _, c := range cases {
		status, h, body := e.do(c.method, c.path, c.key, c.header, c.body)
		if status != c.status {
			t.Errorf("%s: %s %s = %d, want %d\n%s", c.name, c.method, c.path, status, c.status, body)
			continue
		}
		if c.code != "" {
			if got := specProblemCode(body); got != c.code {
				t.Errorf("%s: code %q, want %q\n%s", c.name, got, c.code, body)
			}
		}
		if h.Get("X-Request-ID") == "" {
			t.Errorf("%s: no X-Request-ID", c.name)
		}
		switch c.name {
		case "exec idempotent refusal not recorded", "exec idempotent key reusable":
			if h.Get("Idempotent-Replayed") != "" {
				t.Errorf("%s: a refusal was replayed", c.name)
			}
		case "rate limited":
			if h.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", c.name)
			}
		case "no key", "unknown key":
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: WWW-Authenticate %q", c.name, h.Get("WWW-Authenticate"))
			}
		}
	}
}

// A key deleted through the API stops working at once.
func TestDeletedKeyStopsWorking(t *testing.T) {
	e := newSpecEnv(t)
	status, _, body := e.do("POST", "/v1/tenants/"+e.tenantB+"/keys", specAdminKey, nil, "")
	if status != 201 {
		t.Fatalf("create key: %d %s", status, body)
	}
	var k api.APIKey
	if err := json.Unmarshal(body, &k); err != nil || k.Key == "" {
		t.Fatalf("created key %s: %v", body, err)
	}
	if status, _, body := e.do("GET", "/v1/vms", k.Key, nil, ""); status != 200 {
		t.Fatalf("new key: %d %s", status, body)
	}
	if status, _, body := e.do("DELETE", "/v1/tenants/"+e.tenantB+"/keys/"+k.ID, specAdminKey, nil, ""); status != 204 {
		t.Fatalf("delete key: %d %s", status, body)
	}
	if status, _, _ := e.do("GET", "/v1/vms", k.Key, nil, ""); status != 401 {
		t.Fatalf("deleted key: %d, want 401", status)
	}
}

// specReadEvent is one event read off a stream.
type specReadEvent struct{ id, event, data string }

func specReadEvents(t *testing.T, r io.Reader) []specReadEvent {
	t.Helper()
	var out []specReadEvent
	var cur specReadEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = specReadEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	return out
}

// A streamed exec refuses a VM it cannot use with a status before the
// stream starts, like the buffered form.
func TestStreamedExecRefusesUnusableVM(t *testing.T) {
	e := newSpecEnv(t)
	for vm, want := range map[string]int{"vm_nope": 404, e.lostVM: 409} {
		req, _ := http.NewRequest("POST", e.url+"/v1/vms/"+vm+"/exec", strings.NewReader(`{"command":"echo hi"}`))
		req.Header.Set("Authorization", "Bearer "+specAdminKey)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d problem", vm, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
	}
}

// The events the handlers render match the schemas x-sse-events names.
func TestEventDataMatchesSpec(t *testing.T) {
	doc := apispec.MustLoad(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	check := func(method, path string, ev sse.Event) {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		if err := apispec.CheckEvent(doc, req, ev.Event, ev.Data); err != nil {
			t.Error(err)
		}
	}
	const (
		procOut  = "/v1/vms/vm_1/processes/7/output"
		shellOut = "/v1/vms/vm_1/shells/sh_1/output"
		exec     = "/v1/vms/vm_1/exec"
		events   = "/v1/vms/vm_1/events"
	)
	out := outputEvent(streamlog.Entry[vms.Chunk]{Seq: 1, V: vms.Chunk{Stream: "stdout", Data: []byte("héllo\n"), Time: now}})
	check("GET", procOut, out)
	bin := outputEvent(streamlog.Entry[vms.Chunk]{Seq: 2, V: vms.Chunk{Stream: "stderr", Data: []byte{0xff, 0xfe, 0}, Time: now}})
	check("GET", procOut, bin)
	if !bytes.Contains(bin.Data, []byte(`"encoding":"base64"`)) || bin.ID != "2" {
		t.Errorf("binary output event: id %s, %s", bin.ID, bin.Data)
	}
	check("POST", exec, out)
	check("POST", exec, exitEvent(2, &vms.ExecResult{ExitCode: 0, Duration: time.Millisecond}, nil))
	check("POST", exec, exitEvent(2, &vms.ExecResult{ExitCode: 137, Signal: "SIGKILL", StdoutTruncated: true}, nil))
	check("POST", exec, exitEvent(2, nil, gateway.Errorf(gateway.CodeDeadlineExceeded, "exec: deadline exceeded")))
	shellExit := func(st *gateway.ExitStatus) func() (*gateway.ExitStatus, error) {
		return func() (*gateway.ExitStatus, error) { return st, nil }
	}
	check("GET", shellOut, shellEnd(shellExit(&gateway.ExitStatus{ExitCode: 3}))(3, nil)[0])
	check("GET", shellOut, shellEnd(shellExit(&gateway.ExitStatus{ExitCode: 137, Signal: "SIGKILL"}))(3, nil)[0])
	check("GET", shellOut, shellEnd(shellExit(nil))(3, gateway.Errorf(gateway.CodeConflict, "the VM is disposed"))[0])
	check("GET", shellOut, sse.EndEvent(3, gateway.Errorf(gateway.CodeConflict, "the VM is disposed")))
	check("GET", procOut, sse.EndEvent(3, errors.New("boom")))
	check("GET", shellOut, sse.Event{Event: "error", Data: []byte(`{"code":"unavailable","detail":"the gateway is shutting down"}`)})

	// A reader behind a bounded log gets a gap, what is left, then the end.
	log := streamlog.New[vms.Chunk](30)
	for i := 0; i < 10; i++ {
		log.Append(0, 10, vms.Chunk{Stream: "stdout", Data: []byte("0123456789"), Time: now})
	}
	log.Close(nil)
	var got []sse.Event
	err := sse.FollowLog(context.Background(), log, 0, func(ev sse.Event) error { got = append(got, ev); return nil }, outputEvent, shellEnd(shellExit(&gateway.ExitStatus{})))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range got {
		names = append(names, ev.Event)
		check("GET", shellOut, ev)
	}
	if strings.Join(names, ",") != "gap,stdout,stdout,stdout,end" {
		t.Errorf("events %v", names)
	}
	if got[0].ID != "7" || string(got[0].Data) != `{"from":1,"to":7}` {
		t.Errorf("gap event id %s data %s", got[0].ID, got[0].Data)
	}

	// VM events: the SSE event name is the event's type.
	for _, v := range []gateway.VMEvent{
		{Type: "state", Time: now, State: gateway.VMReady},
		{Type: "state", Time: now, State: gateway.VMLost, Reason: "sidecar died"},
		{Type: "limit_warning", Time: now, Name: "memory", Detail: map[string]string{"used": "90%"}},
		{Type: "process_exit", Time: now, Pid: 7, Exit: &gateway.ExitStatus{ExitCode: 1, Signal: "SIGTERM"}},
		{Type: "structured", Time: now, Name: "events_dropped"},
	} {
		data, _ := json.Marshal(v)
		check("GET", events, sse.Event{Event: string(v.Type), Data: data})
	}

	// Agent session events: the SSE event name is the sessions.Event kind.
	const sessEvents = "/v1/vms/vm_1/sessions/s_1/events"
	for _, raw := range specDurableEvents(now) {
		check("GET", sessEvents, sse.Event{ID: "1", Event: sessions.TypeDurable, Data: raw})
	}
	for _, ev := range []sessions.Event{
		{Type: sessions.TypeEphemeral, AfterSequence: 3, Data: json.RawMessage(`{"afterSequence":3,"type":"agent_message_chunk","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"he"}}}`)},
		{Type: sessions.TypeEphemeral, Data: json.RawMessage(`{"afterSequence":0,"type":"session_update","update":null}`)},
		{Type: sessions.TypeAgentStderr, Data: specMarshal(map[string]any{"agentType": "pi", "processId": "p1", "text": "warning: slow\n"})},
		{Type: sessions.TypeAgentExit, Data: specMarshal(map[string]any{"agentType": "pi", "processId": "p1", "exitCode": (*int32)(nil), "restart": "never"})},
		{Type: sessions.TypeAgentExit, Data: specMarshal(map[string]any{"agentType": "pi", "processId": "p1", "exitCode": new(int32), "restart": "restarting"})},
		{Type: sessions.TypeOverflow, Data: json.RawMessage(`{"reason":"the stream fell behind; streamed deltas were dropped, durable events follow from the store"}`)},
		{Type: sessions.TypeEnd, Data: specMarshal(map[string]string{"state": string(gateway.SessionClosed)})},
		{Type: sessions.TypeEnd, Data: specMarshal(map[string]string{"state": string(gateway.SessionLost)})},
		{Type: sessions.TypeEnd, Data: specMarshal(map[string]string{"state": "deleted"})},
	} {
		check("GET", sessEvents, sse.Event{Event: ev.Type, Data: ev.Data})
	}
	check("GET", sessEvents, sse.Event{Event: "error", Data: problemData(gateway.Errorf(gateway.CodeInternal, "store: read history"))})
	check("GET", sessEvents, sse.Event{Event: "error", Data: []byte(`{"code":"unavailable","detail":"the gateway is shutting down"}`)})
}

func specMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

var specPermissionOptions = json.RawMessage(`[{"optionId":"allow-once","name":"Allow","kind":"allow_once"},` +
	`{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]`)

// specDurableEvents are durable session events of each type, as the
// recorder stores and serves them.
func specDurableEvents(now time.Time) []json.RawMessage {
	ts := now.UTC()
	out := []json.RawMessage{}
	for _, e := range []gateway.SessionEventData{
		{Sequence: 1, Timestamp: ts, Type: "user_message_chunk", Update: json.RawMessage(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}`)},
		{Sequence: 2, Timestamp: ts, Type: "tool_call", Update: json.RawMessage(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"ls","status":"pending"}`)},
		{Sequence: 3, Timestamp: ts, Type: "permission_request", RequestID: "req_1", Options: specPermissionOptions,
			ToolCall: json.RawMessage(`{"toolCallId":"t1","title":"ls"}`)},
		{Sequence: 4, Timestamp: ts, Type: "permission_request", RequestID: "req_2", Options: json.RawMessage("null"), ToolCall: json.RawMessage("null")},
		{Sequence: 5, Timestamp: ts, Type: "permission_response", RequestID: "req_1", Status: "accepted",
			Response: json.RawMessage(`{"outcome":{"outcome":"selected","optionId":"reject-once"}}`),
			Decision: &gateway.PermissionDecision{By: gateway.DecidedByTimeout, OptionID: "reject-once", Status: "accepted", At: now}},
		{Sequence: 6, Timestamp: ts, Type: "permission_response", RequestID: "req_2", Status: "cancelled", Reason: "turn cancelled",
			Decision: &gateway.PermissionDecision{By: gateway.DecidedByAgent, Status: "cancelled", Reason: "turn cancelled", At: now}},
		{Sequence: 7, Timestamp: ts, Type: "session_update"},
	} {
		out = append(out, specMarshal(e))
	}
	return out
}

// Full Go values, marshalled as the handlers do, validate against their
// schemas.
func TestGoValuesValidate(t *testing.T) {
	doc := apispec.MustLoad(t)
	now := time.Now()
	exit := &gateway.ExitStatus{ExitCode: 143, Signal: "SIGTERM"}
	for _, c := range []struct {
		schema string
		v      any
	}{
		{"VM", vmResource(gateway.VM{ID: "vm_1", State: gateway.VMReady, SidecarID: "sc_1", CreatedAt: now, UpdatedAt: now})},
		{"VM", vmResource(gateway.VM{ID: "vm_1", State: gateway.VMLost, Reason: "sidecar died", CreatedAt: now, UpdatedAt: now,
			Spec: gateway.VMSpec{Labels: map[string]string{"a": "b"}, Env: map[string]string{"A": "1"}, Permissions: map[string]any{"fs": "allow"},
				Limits: map[string]any{"resources": map[string]any{"maxProcesses": 64}}, LoopbackExemptPorts: []uint16{3000}, Software: []string{"@agentos-software/pi"},
				Agents: []string{"pi"}, IdleTimeoutSeconds: 60}})},
		{"VMUsage", usageResource(metering.Usage{VMID: "vm_1", State: gateway.VMReady, CollectedAt: now, OwnSidecar: true,
			MemoryBytes: new(int64(300 << 20)), CPU: new(1500 * time.Millisecond), FilesystemBytes: new(uint64(5 << 20)), Inodes: new(uint64(376)),
			Engine: &metering.EngineCounts{RunningProcesses: 1, OpenFDs: 4, Pipes: 1, ProcessLimit: 256, FilesystemBytesLimit: 64 << 20}})},
		{"VMUsage", usageResource(metering.Usage{VMID: "vm_1", State: gateway.VMReady, CollectedAt: now, Engine: &metering.EngineCounts{}})},
		{"VMUsage", usageResource(metering.Usage{VMID: "vm_1", State: gateway.VMHibernated, CollectedAt: now, ImageBytes: new(int64(1 << 20))})},
		{"ProcessInfo", gateway.ProcessInfo{Pid: 7, Command: "sleep", Args: []string{"1"}, Cwd: "/", Running: true, StartedAt: now}},
		{"ProcessInfo", gateway.ProcessInfo{Pid: 7, Command: "sleep", Args: []string{}, Cwd: "/", Exit: exit, StartedAt: now, ExitedAt: &now}},
		{"ProcessInfo", gateway.ProcessInfo{Pid: 7, Command: "sleep", Args: []string{}, Cwd: "/", Error: "the VM is lost", StartedAt: now}},
		{"ExitStatus", gateway.ExitStatus{ExitCode: 0}},
		{"Shell", gateway.ShellInfo{ID: "sh_1", Shell: "sh", State: gateway.ShellRunning, Cols: 80, Rows: 24, StartedAt: now}},
		{"Shell", gateway.ShellInfo{ID: "sh_1", Shell: "bash", State: gateway.ShellExited, Cols: 80, Rows: 24, StartedAt: now, ExitedAt: &now, Exit: exit}},
		{"Shell", gateway.ShellInfo{ID: "sh_1", Shell: "bash", State: gateway.ShellExited, Cols: 80, Rows: 24, StartedAt: now, ExitedAt: &now, Error: "the VM is disposed"}},
		{"ShellList", api.List[gateway.ShellInfo]{Items: []gateway.ShellInfo{}}},
		{"AttachServerFrame", api.AttachServerFrame{Type: "hello", Seq: new(uint64)}},
		{"AttachServerFrame", api.AttachServerFrame{Type: "gap", From: 1, To: 7}},
		{"AttachServerFrame", api.AttachServerFrame{Type: "exit", Seq: new(uint64), ExitCode: &exit.ExitCode, Signal: &exit.Signal}},
		{"AttachServerFrame", api.AttachServerFrame{Type: "exit", Seq: new(uint64), Code: "conflict", Detail: "the VM is disposed"}},
		{"AttachServerFrame", api.AttachServerFrame{Type: "error", Code: "invalid_argument", Detail: "unknown signal"}},
		{"ExitStatus", *exit},
		{"ExecResult", api.ExecResult{ExitCode: 1, Stdout: "a", Stderr: "", Encoding: "utf8", DurationMs: 3}},
		{"Tenant", gateway.Tenant{ID: "default", Name: "default", CreatedAt: now, UpdatedAt: now}},
		{"CreatedAPIKey", api.APIKey{ID: "key_1", TenantID: "default", Prefix: "agk_abcd", CreatedAt: now, Key: "agk_secret"}},
		{"APIKey", api.APIKey{ID: "key_1", TenantID: "default", Prefix: "agk_abcd", CreatedAt: now}},
		{"Stat", api.Stat{Path: "/", Mode: 0o40755, IsDir: true, ModTime: now}},
		{"ArchiveExtracted", api.ArchiveExtracted{Path: "/workspace", Files: 2, Dirs: 1, Symlinks: 1, Bytes: 10}},
		{"DirList", api.List[gateway.DirEntry]{Items: []gateway.DirEntry{{Name: "a", Path: "/a", Size: 1}}}},
		{"Problem", api.Problem{Type: api.ProblemType + "conflict", Title: "Conflict", Status: 409, Detail: "the VM is lost", Code: gateway.CodeConflict,
			Instance: "/v1/vms/vm_1", RequestID: "r", Details: map[string]any{"state": "lost", "reason": "sidecar died"}}},
		{"Tenant", gateway.Tenant{ID: "ten_1", Name: "acme", CreatedAt: now, UpdatedAt: now,
			Sessions: gateway.SessionSettings{RetentionDays: 30, PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionAllow, TimeoutSeconds: 60}}}},
		{"Session", sessionResource(gateway.Session{ID: "ses_1", VMID: "vm_1", Agent: "pi", Cwd: "/home/agentos",
			PermissionPolicy: "allow_all", State: gateway.SessionIdle, CreatedAt: now, UpdatedAt: now})},
		{"Session", sessionResource(gateway.Session{ID: "ses_1", VMID: "vm_1", Agent: "claude", Cwd: "/work", AdditionalDirectories: []string{"/data"},
			PermissionPolicy: "ask", PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionReject, TimeoutSeconds: 600},
			State: gateway.SessionWaiting, LatestSequence: 12, CreatedAt: now, UpdatedAt: now,
			PendingPermissions: []gateway.Permission{
				{RequestID: "req_1", Options: specPermissionOptions, ToolCall: json.RawMessage(`{"toolCallId":"t1","title":"rm -rf build"}`),
					AskedAt: now, Status: gateway.PermissionPending},
				{RequestID: "req_2", Options: specPermissionOptions, AskedAt: now, Status: gateway.PermissionPending,
					Decision: &gateway.PermissionDecision{By: gateway.DecidedByAPI, KeyID: "key_1", OptionID: "allow-once", Status: "accepted", At: now}},
			}})},
		{"Permission", gateway.Permission{RequestID: "req_1", Options: specPermissionOptions, ToolCall: json.RawMessage("null"),
			AskedAt: now, Status: gateway.PermissionPending}},
		{"Permission", permissionResources([]gateway.Permission{{RequestID: "req_1", AskedAt: now, Status: gateway.PermissionDropped,
			Decision: &gateway.PermissionDecision{By: gateway.DecidedByAgent, Status: "not_pending", Reason: "vm_ended", At: now}}})[0]},
		{"PermissionList", api.List[gateway.Permission]{Items: permissionResources(nil)}},
		{"SessionList", api.List[api.Session]{Items: []api.Session{}, NextCursor: "abc"}},
		{"AgentList", api.List[gateway.Agent]{Items: []gateway.Agent{{ID: "pi", Installed: true}, {ID: "codex"}}}},
		{"SessionHistory", api.SessionHistory{Events: specDurableEvents(now), HasMoreBefore: true}},
		{"SessionHistory", api.SessionHistory{Events: []json.RawMessage{}}},
		{"PromptResult", gateway.PromptResult{StopReason: "end_turn", Message: json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"done"}]}`)}},
		{"PromptResult", gateway.PromptResult{StopReason: "cancelled", Message: json.RawMessage("null")}},
		{"PromptAccepted", api.PromptAccepted{Status: "accepted"}},
		{"CancelResult", api.CancelResult{Status: "no_active_prompt"}},
		{"PermissionAnswer", gateway.PermissionAnswer{Status: "accepted"}},
		{"PermissionAnswer", gateway.PermissionAnswer{Status: "not_pending", Reason: "already_resolved"}},
		{"SessionConfig", configResource(sessions.SessionConfig{Revision: 3, Options: json.RawMessage(`[{"id":"model","currentValue":"sonnet"}]`)})},
		{"SessionConfig", configResource(sessions.SessionConfig{})},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		_ = json.Unmarshal(b, &v)
		if err := doc.Components.Schemas[c.schema].Value.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s: %v", c.schema, b, err)
		}
	}
}

// The agent-session routes, as far as they go without a sidecar: a session
// of a lost VM keeps its record, history and events, and everything that
// needs its agent is a conflict. apispec.Transport checks every answer.
func TestSessionRoutesAnswerTheSpec(t *testing.T) {
	e := newSpecEnv(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := e.db.CreateSession(ctx, gateway.Session{ID: "s_1", TenantID: gateway.DefaultTenantID, VMID: e.lostVM, Agent: "pi",
		Cwd: "/home/agentos", PermissionPolicy: "ask", PermissionDefault: &gateway.PermissionDefault{Decision: gateway.DecisionAllow, TimeoutSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	durable := specDurableEvents(now)[:3]
	for i, raw := range durable {
		var ev gateway.SessionEventData
		_ = json.Unmarshal(raw, &ev)
		if err := e.db.AppendSessionEvents(ctx, gateway.SessionEvent{VMID: e.lostVM, SessionID: "s_1", Sequence: uint64(i + 1), Time: now, Type: ev.Type, Data: raw}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.AddPermission(ctx, e.lostVM, "s_1", gateway.Permission{RequestID: "req_1", Options: specPermissionOptions, AskedAt: now}); err != nil {
		t.Fatal(err)
	}

	vm := "/v1/vms/" + e.lostVM
	ses := vm + "/sessions/s_1"
	type hdr = map[string]string
	text := `{"content":[{"type":"text","text":"hi"}]}`
	for _, c := range []struct {
		name         string
		method, path string
		key          string
		header       hdr
		body         string
		status       int
		code         string
	}{
		{"agents of lost vm", "GET", vm + "/agents", specAdminKey, nil, "", 409, "conflict"},
		{"agents of unknown vm", "GET", "/v1/vms/vm_nope/agents", specAdminKey, nil, "", 404, "not_found"},
		{"open on lost vm", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","permissionPolicy":"ask","permissionDefault":null,"mcpServers":null}`, 409, "conflict"},
		{"open on unknown vm", "POST", "/v1/vms/vm_nope/sessions", specAdminKey, nil, `{"agent":"pi","permissionDefault":{"decision":"allow","timeoutSeconds":5}}`, 404, "not_found"},
		{"open without agent", "POST", vm + "/sessions", specAdminKey, nil, `{}`, 400, "invalid_argument"},
		{"open bad session id", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","sessionId":"-x"}`, 400, "invalid_argument"},
		{"open bad mcp servers", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","mcpServers":{}}`, 400, "invalid_argument"},
		{"open bad policy", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","permissionPolicy":"maybe"}`, 400, "invalid_argument"},
		{"open bad permission default", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","permissionDefault":{"decision":"allow","timeoutSeconds":0}}`, 400, "invalid_argument"},
		{"open relative cwd", "POST", vm + "/sessions", specAdminKey, nil, `{"agent":"pi","cwd":"work"}`, 400, "invalid_argument"},
		{"list sessions", "GET", vm + "/sessions", specAdminKey, nil, "", 200, ""},
		{"list sessions paged", "GET", vm + "/sessions?limit=1", specAdminKey, nil, "", 200, ""},
		{"list sessions bad limit", "GET", vm + "/sessions?limit=501", specAdminKey, nil, "", 400, "invalid_argument"},
		{"list sessions unknown vm", "GET", "/v1/vms/vm_nope/sessions", specAdminKey, nil, "", 404, "not_found"},
		{"get session", "GET", ses, specAdminKey, nil, "", 200, ""},
		{"get session trailing slash", "GET", ses + "/", specAdminKey, nil, "", 200, ""},
		{"get unknown session", "GET", vm + "/sessions/nope", specAdminKey, nil, "", 404, "not_found"},
		{"get another tenant's session", "GET", ses, e.keyB, nil, "", 404, "not_found"},
		{"unload", "POST", ses + "/unload", specAdminKey, nil, "", 409, "conflict"},
		{"prompt", "POST", ses + "/prompt", specAdminKey, nil, text, 409, "conflict"},
		{"prompt async", "POST", ses + "/prompt", specAdminKey, hdr{"Prefer": "respond-async"}, `{"content":[{"type":"text","text":"hi"}],"idempotencyKey":"k1"}`, 409, "conflict"},
		// The VM is lost: that is what is wrong, not the session (issue 36).
		{"prompt unknown session", "POST", vm + "/sessions/nope/prompt", specAdminKey, nil, text, 409, "conflict"},
		{"prompt no content", "POST", ses + "/prompt", specAdminKey, nil, `{}`, 400, "invalid_argument"},
		{"prompt empty content", "POST", ses + "/prompt", specAdminKey, nil, `{"content":[]}`, 400, "invalid_argument"},
		{"prompt unknown block", "POST", ses + "/prompt", specAdminKey, nil, `{"content":[{"type":"video"}]}`, 400, "invalid_argument"},
		{"prompt image without data", "POST", ses + "/prompt", specAdminKey, nil, `{"content":[{"type":"image"}]}`, 400, "invalid_argument"},
		{"prompt key too long", "POST", ses + "/prompt", specAdminKey, nil, `{"content":[{"type":"text","text":"hi"}],"idempotencyKey":"` + strings.Repeat("k", 256) + `"}`, 400, "invalid_argument"},
		{"cancel", "POST", ses + "/cancel", specAdminKey, nil, "", 409, "conflict"},
		{"permissions", "GET", ses + "/permissions", specAdminKey, nil, "", 200, ""},
		{"permissions unknown session", "GET", vm + "/sessions/nope/permissions", specAdminKey, nil, "", 404, "not_found"},
		{"answer permission", "POST", ses + "/permissions/req_1", specAdminKey, nil, `{"optionId":"allow-once"}`, 409, "conflict"},
		{"answer permission no option", "POST", ses + "/permissions/req_1", specAdminKey, nil, `{}`, 400, "invalid_argument"},
		{"config", "GET", ses + "/config", specAdminKey, nil, "", 409, "conflict"},
		{"set config", "PUT", ses + "/config/model", specAdminKey, nil, `{"value":"sonnet"}`, 409, "conflict"},
		{"set config no value", "PUT", ses + "/config/model", specAdminKey, nil, `{}`, 400, "invalid_argument"},
		{"capabilities", "GET", ses + "/capabilities", specAdminKey, nil, "", 409, "conflict"},
		{"agent info", "GET", ses + "/agent-info", specAdminKey, nil, "", 409, "conflict"},
		{"history", "GET", ses + "/history", specAdminKey, nil, "", 200, ""},
		{"history backwards", "GET", ses + "/history?before=3&limit=1", specAdminKey, nil, "", 200, ""},
		{"history after", "GET", ses + "/history?after=1&limit=1", specAdminKey, nil, "", 200, ""},
		{"history after not below before", "GET", ses + "/history?after=3&before=2", specAdminKey, nil, "", 400, "invalid_argument"},
		{"history bad after", "GET", ses + "/history?after=x", specAdminKey, nil, "", 400, "invalid_argument"},
		{"history bad limit", "GET", ses + "/history?limit=1001", specAdminKey, nil, "", 400, "invalid_argument"},
		{"history unknown session", "GET", vm + "/sessions/nope/history", specAdminKey, nil, "", 404, "not_found"},
		{"events beyond latest", "GET", ses + "/events", specAdminKey, hdr{"Last-Event-ID": "99"}, "", 400, "invalid_argument"},
		{"events bad last-event-id", "GET", ses + "/events?lastEventId=x", specAdminKey, nil, "", 400, "invalid_argument"},
		{"events unknown session", "GET", vm + "/sessions/nope/events", specAdminKey, nil, "", 404, "not_found"},
		{"delete unknown session", "DELETE", vm + "/sessions/nope", specAdminKey, nil, "", 404, "not_found"},

		// Tenants' session settings.
		{"create tenant with sessions", "POST", "/v1/tenants", specAdminKey, nil, `{"name":"s","sessions":{"retentionDays":7,"permissionDefault":{"decision":"allow","timeoutSeconds":60}}}`, 201, ""},
		{"update tenant sessions", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"sessions":{"permissionDefault":{"decision":"reject","timeoutSeconds":30}}}`, 200, ""},
		{"clear tenant permission default", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"sessions":{"retentionDays":null,"permissionDefault":null}}`, 200, ""},
		{"tenant bad retention", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"sessions":{"retentionDays":-1}}`, 400, "invalid_argument"},
		{"tenant bad permission default", "PATCH", "/v1/tenants/" + e.tenantB, specAdminKey, nil, `{"sessions":{"permissionDefault":{"decision":"maybe","timeoutSeconds":30}}}`, 400, "invalid_argument"},
		{"tenant permission default unknown field", "POST", "/v1/tenants", specAdminKey, nil, `{"name":"s","sessions":{"permissionDefault":{"decision":"allow","timeoutSeconds":1,"x":1}}}`, 400, "invalid_argument"},
	} {
		status, _, body := e.do(c.method, c.path, c.key, c.header, c.body)
		if status != c.status {
			t.Errorf("%s: %s %s = %d, want %d\n%s", c.name, c.method, c.path, status, c.status, body)
			continue
		}
		if c.code != "" {
			if got := specProblemCode(body); got != c.code {
				t.Errorf("%s: code %q, want %q\n%s", c.name, got, c.code, body)
			}
		}
	}

	// The session of a lost VM is listed lost.
	status, _, body := e.do("GET", ses, specAdminKey, nil, "")
	var got api.Session
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || got.State != gateway.SessionLost || got.LatestSequence != 3 {
		t.Errorf("session of a lost VM: %d %s", status, body)
	}

	// Its stream replays the history from the store after Last-Event-ID,
	// then ends with the VM's end.
	req, _ := http.NewRequest("GET", e.url+ses+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+specAdminKey)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs := specReadEvents(t, resp.Body)
	resp.Body.Close()
	var seen []string
	for _, ev := range evs {
		seen = append(seen, ev.event+"#"+ev.id)
		if err := apispec.CheckEvent(e.doc, httptest.NewRequest("GET", ses+"/events", nil), ev.event, []byte(ev.data)); err != nil {
			t.Error(err)
		}
	}
	if strings.Join(seen, ",") != "durable#2,durable#3,end#3" || evs[len(evs)-1].data != `{"state":"lost"}` {
		t.Errorf("stream of a lost VM's session: %v (%v)", seen, evs)
	}

	// A session of an ended VM can still be deleted.
	if status, _, body := e.do("DELETE", ses, specAdminKey, nil, ""); status != 204 {
		t.Errorf("delete session of a lost VM: %d %s", status, body)
	}
	if status, _, _ := e.do("GET", ses, specAdminKey, nil, ""); status != 404 {
		t.Errorf("deleted session: %d, want 404", status)
	}
}

// TestUnknownQueryParameter: a query parameter the operation does not take
// is 400 naming it, after authentication; a guest port's query is the
// guest's.
func TestUnknownQueryParameter(t *testing.T) {
	e := newSpecEnv(t)
	for _, tc := range []struct {
		name, path, key string
		status          int
		field           string
	}{
		{"a misspelt filter", "/v1/vms?labelSelector=team%3Ddocs", specAdminKey, http.StatusBadRequest, "labelSelector"},
		{"the filter spelt right", "/v1/vms?label=team%3Ddocs", specAdminKey, http.StatusOK, ""},
		{"an operation without query parameters", "/v1/me?verbose=1", specAdminKey, http.StatusBadRequest, "verbose"},
		{"a parameter of another operation", "/v1/vms/" + e.lostVM + "?recursive=true", specAdminKey, http.StatusBadRequest, "recursive"},
		{"authentication first", "/v1/vms?labelSelector=x", "", http.StatusUnauthorized, ""},
		{"a guest port's query is not checked", "/v1/vms/" + e.lostVM + "/ports/8080/x?anything=1", specAdminKey, http.StatusConflict, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := e.do("GET", tc.path, tc.key, nil, "")
			if status != tc.status {
				t.Fatalf("%d %s, want %d", status, body, tc.status)
			}
			if tc.field == "" {
				return
			}
			var p api.Problem
			if err := json.Unmarshal(body, &p); err != nil || p.Code != "invalid_argument" || p.Details["field"] != tc.field || !strings.Contains(p.Detail, tc.field) {
				t.Fatalf("problem %s", body)
			}
		})
	}
}
