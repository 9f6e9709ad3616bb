package main

// Guest ports and previews end to end, with the real gateway and sidecar: a
// node HTTP server in the VM is reached through /ports/ with the API key
// and through a preview URL without it; hop-by-hop and credential headers
// never reach it; an event stream arrives event by event; previews expire,
// are revoked, end with their VM and are bounded per VM; another tenant's
// VM is 404; bad input is 400 naming the field; a body over the limit is
// 413; host-based previews work with --preview-domain.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/handlers"
)

// guestServer is the VM's web app: /echo answers with what it was sent,
// /page is a page that tells its parent frame what it can read of its
// origin's storage and cookies,
// /sse sends one event and the second only once /release was called (so
// that the test sees the first arrive alone, without timing anything).
const guestServer = `
const http = require('http');
let release = null;
http.createServer((q, s) => {
  if (q.url === '/release') { if (release) { release(); release = null; } s.end('released'); return; }
  if (q.url === '/page') {
    s.writeHead(200, {'content-type': 'text/html'});
    s.end('<!doctype html><title>guest</title><script>' +
      'const probe = f => { try { return String(f()); } catch (e) { return "blocked"; } };' +
      'parent.postMessage("storage:" + probe(() => sessionStorage.getItem("probe")) + " cookie:" + probe(() => document.cookie), "*");' +
      '</script>');
    return;
  }
  if (q.url.startsWith('/sse')) {
    s.writeHead(200, {'content-type': 'text/event-stream', 'cache-control': 'no-cache'});
    s.write('data: one\n\n');
    release = () => { s.write('data: two\n\n'); s.end(); };
    return;
  }
  let n = 0;
  q.on('data', d => n += d.length);
  q.on('end', () => {
    s.setHeader('set-cookie', 'guest=1; Path=/');
    s.writeHead(q.url.startsWith('/teapot') ? 418 : 200, {'content-type': 'application/json', 'x-guest': 'yes'});
    s.end(JSON.stringify({method: q.method, url: q.url, headers: q.headers, bodyLength: n}));
  });
}).listen(8080, () => console.log('listening'));
`

// guestEcho is what /echo saw.
type guestEcho struct {
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers"`
	BodyLength int               `json:"bodyLength"`
}

// portsFixture is a gateway with a VM running guestServer.
type portsFixture struct {
	e      *e2e
	tenant string
	c      *client.Client
	key    string
	vm     string
	guest  *http.Client // not validated: guest answers are the guest's
}

func newPortsFixture(t *testing.T, args ...string) *portsFixture {
	t.Helper()
	e := newE2E(t, args...)
	tn, key := e.tenantWithKey(e.uniq("ports"), nil)
	c := e.client(key)
	f := withGuestServer(t, e, c, key, e.vm(c, client.CreateVMRequest{}).ID)
	f.tenant = tn.ID
	return f
}

// withGuestServer starts guestServer in a VM and waits until it answers
// through the gateway of e.
func withGuestServer(t *testing.T, e *e2e, c *client.Client, key, vmID string) *portsFixture {
	t.Helper()
	if _, err := c.VM(vmID).Spawn(ctxT(t), client.SpawnRequest{Argv: []string{"node", "-e", guestServer}}); err != nil {
		t.Fatalf("spawn the guest server: %v", err)
	}
	f := &portsFixture{e: e, c: c, key: key, vm: vmID, guest: &http.Client{Transport: e.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	eventually(t, e2eTimeout, "the guest server listens", func() bool {
		resp, err := f.do(http.MethodGet, "/v1/vms/"+vmID+"/ports/8080/echo", key, nil, nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return f
}

// do sends a request to the gateway, with key unless it is empty.
func (f *portsFixture) do(method, path, key string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctxT(f.e.t), method, f.e.gw.URL+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if host := header.Get("Host"); host != "" {
		req.Host = host
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return f.guest.Do(req)
}

// echo sends a request that must reach /echo and returns what the guest saw.
func (f *portsFixture) echo(t *testing.T, method, path, key string, body io.Reader, header http.Header) (*http.Response, guestEcho) {
	t.Helper()
	resp, err := f.do(method, path, key, body, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var g guestEcho
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTeapot || json.Unmarshal(b, &g) != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp, g
}

// problem checks a gateway error answer and returns its details.
func (f *portsFixture) problem(t *testing.T, resp *http.Response, err error, status int) map[string]any {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("%s %s: want a %d problem, got %d %q %s", resp.Request.Method, resp.Request.URL.Path, status, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var p struct {
		Details map[string]any `json:"details"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Details
}

func TestE2EGuestPorts(t *testing.T) {
	t.Parallel()
	f := newPortsFixture(t)
	base := "/v1/vms/" + f.vm + "/ports/8080"

	t.Run("forwards method, path, query, headers and body; strips hop-by-hop and credentials", func(t *testing.T) {
		h := http.Header{"X-App": {"yes"}, "Connection": {"X-Hop"}, "X-Hop": {"1"}, "Te": {"trailers"},
			"Cookie": {"session=console"}, "Content-Type": {"text/plain"}}
		resp, g := f.echo(t, http.MethodPut, base+"/teapot/a%20b?q=1&r=two", f.key, strings.NewReader("payload"), h)
		if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Guest") != "yes" || resp.Header.Get("Set-Cookie") != "guest=1; Path=/" {
			t.Errorf("response: %d %v", resp.StatusCode, resp.Header)
		}
		if g.Method != "PUT" || g.URL != "/teapot/a%20b?q=1&r=two" || g.BodyLength != 7 || g.Headers["x-app"] != "yes" ||
			g.Headers["content-type"] != "text/plain" || g.Headers["cookie"] != "session=console" {
			t.Errorf("the guest saw %+v", g)
		}
		for _, name := range []string{"authorization", "x-hop", "te", "x-agentos-forwarded-by"} {
			if v, ok := g.Headers[name]; ok {
				t.Errorf("the guest saw %s: %q", name, v)
			}
		}
		if g.Headers["x-forwarded-prefix"] != base {
			t.Errorf("X-Forwarded-Prefix = %q, want %q", g.Headers["x-forwarded-prefix"], base)
		}
	})

	t.Run("typed client", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, "/echo?via=client", strings.NewReader("abc"))
		resp, err := f.c.VM(f.vm).Fetch(ctxT(t), 8080, req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var g guestEcho
		if err := json.NewDecoder(resp.Body).Decode(&g); err != nil || g.URL != "/echo?via=client" || g.BodyLength != 3 || g.Headers["authorization"] != "" {
			t.Fatalf("Fetch: %d %+v %v", resp.StatusCode, g, err)
		}
		if want := f.e.gw.URL + base + "/"; f.c.VM(f.vm).PortURL(8080) != want {
			t.Errorf("PortURL = %q, want %q", f.c.VM(f.vm).PortURL(8080), want)
		}
	})

	t.Run("an event stream arrives event by event", func(t *testing.T) {
		streamIncrementally(t, f, base+"/sse", f.key)
	})

	t.Run("bad input and limits", func(t *testing.T) {
		for _, port := range []string{"0", "65536", "http", "-1"} {
			resp, err := f.do(http.MethodGet, "/v1/vms/"+f.vm+"/ports/"+port+"/", f.key, nil, nil)
			if d := f.problem(t, resp, err, http.StatusBadRequest); d["field"] != "port" {
				t.Errorf("port %s: details %v", port, d)
			}
		}
		resp, err := f.do(http.MethodGet, "/v1/vms/"+f.vm+"/ports/9999/", f.key, nil, nil)
		f.problem(t, resp, err, http.StatusServiceUnavailable)
		big := bytes.Repeat([]byte("x"), handlers.MaxGuestRequestBytes+1)
		resp, err = f.do(http.MethodPost, base+"/echo", f.key, bytes.NewReader(big), nil)
		if d := f.problem(t, resp, err, http.StatusRequestEntityTooLarge); d["limit"] != float64(handlers.MaxGuestRequestBytes) {
			t.Errorf("413 details %v", d)
		}
		// Just at the limit goes through.
		_, g := f.echo(t, http.MethodPost, base+"/echo", f.key, bytes.NewReader(big[1:]), nil)
		if g.BodyLength != handlers.MaxGuestRequestBytes {
			t.Errorf("the guest got %d bytes, want %d", g.BodyLength, handlers.MaxGuestRequestBytes)
		}
		resp, err = f.do(http.MethodGet, base+"/echo", "", nil, nil)
		f.problem(t, resp, err, http.StatusUnauthorized)
	})

	t.Run("another tenant's VM is 404", func(t *testing.T) {
		_, other := f.e.tenantWithKey(f.e.uniq("other"), nil)
		resp, err := f.do(http.MethodGet, base+"/echo", other, nil, nil)
		f.problem(t, resp, err, http.StatusNotFound)
		_, err = f.e.client(other).VM(f.vm).CreatePreview(ctxT(t), client.PreviewRequest{Port: 8080})
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})
}

// streamIncrementally reads the guest's /sse through path: the first
// event must arrive while the guest holds back the second, which it sends
// once /release is called.
func streamIncrementally(t *testing.T, f *portsFixture, path, key string) {
	t.Helper()
	resp, err := f.do(http.MethodGet, path, key, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("sse: %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("sse read: %v (so far %q)", err, b.String())
			}
			if line == "\n" {
				return b.String()
			}
			b.WriteString(line)
		}
	}
	if ev := readEvent(); ev != "data: one\n" {
		t.Fatalf("first event %q", ev)
	}
	// The second is sent only now: the first came alone, as it was written.
	r2, err := f.do(http.MethodGet, "/v1/vms/"+f.vm+"/ports/8080/release", f.key, nil, nil)
	if err != nil || r2.StatusCode != http.StatusOK {
		t.Fatalf("release: %v %v", r2, err)
	}
	r2.Body.Close()
	if ev := readEvent(); ev != "data: two\n" {
		t.Fatalf("second event %q", ev)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the last event: %q %v", rest, err)
	}
}

func TestE2EPreviews(t *testing.T) {
	t.Parallel()
	const domain = "preview.test"
	f := newPortsFixture(t, "--preview-domain="+domain)
	ctx := ctxT(t)
	vm := f.c.VM(f.vm)

	t.Run("bad port and ttl are 400 naming the field", func(t *testing.T) {
		for _, c := range []struct {
			body, field string
		}{
			{`{"port":0}`, "port"}, {`{"port":65536}`, "port"}, {`{"port":8080,"ttlSeconds":-1}`, "ttlSeconds"},
			{`{"port":8080,"ttlSeconds":604801}`, "ttlSeconds"}, {`{"port":"8080"}`, "port"},
		} {
			err := f.e.raw(http.MethodPost, "/v1/vms/"+f.vm+"/previews", f.key, strings.NewReader(c.body), map[string]string{"Content-Type": "application/json"})
			ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
			if ce.Details["field"] != c.field {
				t.Errorf("%s: details %v, want field %s", c.body, ce.Details, c.field)
			}
		}
	})

	p, err := vm.CreatePreview(ctx, client.PreviewRequest{Port: 8080, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(p.URL)
	if err != nil || !strings.HasPrefix(u.Path, "/p/pvt_") || !strings.HasSuffix(u.Path, "/") || p.HostURL == "" {
		t.Fatalf("preview %+v", p)
	}

	t.Run("path-based, without the API key", func(t *testing.T) {
		h := http.Header{"Cookie": {"console=secret"}}
		resp, g := f.echo(t, http.MethodPost, u.Path+"echo?x=1", "", strings.NewReader("hi"), h)
		if g.URL != "/echo?x=1" || g.BodyLength != 2 || g.Headers["cookie"] != "" || g.Headers["x-forwarded-prefix"] != strings.TrimSuffix(u.Path, "/") {
			t.Errorf("the guest saw %+v", g)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") || strings.Contains(csp, "frame-ancestors") ||
			resp.Header.Get("X-Frame-Options") != "" || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("preview response headers: %v", resp.Header)
		}
		// The key, when a browser sends one anyway, does not reach the guest.
		_, g = f.echo(t, http.MethodGet, u.Path+"echo", f.key, nil, nil)
		if g.Headers["authorization"] != "" {
			t.Errorf("the guest saw Authorization through a preview")
		}
		streamIncrementally(t, f, u.Path+"sse", "")
		resp, err := f.do(http.MethodGet, strings.TrimSuffix(u.Path, "/")+"?a=1", "", nil, http.Header{"Accept": {"text/html"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != u.Path+"?a=1" {
			t.Errorf("the preview's root without its slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("list, get and revoke", func(t *testing.T) {
		ctx := ctxT(t)
		list, err := vm.Previews(ctx)
		if err != nil || len(list) != 1 || list[0].ID != p.ID || list[0].URL != "" || list[0].Port != 8080 {
			t.Fatalf("Previews: %+v %v", list, err)
		}
		got, err := vm.Preview(p.ID).Get(ctx)
		if err != nil || !got.ExpiresAt.Equal(p.ExpiresAt) {
			t.Fatalf("Get: %+v %v", got, err)
		}
		q, err := vm.CreatePreview(ctx, client.PreviewRequest{Port: 8080})
		if err != nil {
			t.Fatal(err)
		}
		if d := q.ExpiresAt.Sub(q.CreatedAt); d != time.Hour {
			t.Errorf("default ttl %v, want 1h", d)
		}
		if err := vm.Preview(q.ID).Delete(ctx); err != nil {
			t.Fatal(err)
		}
		qu, _ := url.Parse(q.URL)
		resp, err := f.do(http.MethodGet, qu.Path+"echo", "", nil, nil)
		f.problem(t, resp, err, http.StatusNotFound)
		wantCode(t, vm.Preview(q.ID).Delete(ctx), client.CodeNotFound, http.StatusNotFound)
		resp, err = f.do(http.MethodGet, "/p/pvt_guessed/echo", "", nil, nil)
		f.problem(t, resp, err, http.StatusNotFound)
	})

	t.Run("expiry", func(t *testing.T) {
		ctx := ctxT(t)
		q, err := vm.CreatePreview(ctx, client.PreviewRequest{Port: 8080, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		qu, _ := url.Parse(q.URL)
		eventually(t, 30*time.Second, "the preview expires", func() bool {
			resp, err := f.do(http.MethodGet, qu.Path+"echo", "", nil, nil)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusNotFound
		})
		if list, err := vm.Previews(ctx); err != nil || len(list) != 1 {
			t.Errorf("Previews after an expiry: %+v %v", list, err)
		}
	})

	t.Run("per-VM bound", func(t *testing.T) {
		ctx := ctxT(t)
		var made []string
		for {
			q, err := vm.CreatePreview(ctx, client.PreviewRequest{Port: 3000})
			if err != nil {
				ce := wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
				if ce.Details["quota"] != "previewsPerVm" {
					t.Errorf("details %v", ce.Details)
				}
				break
			}
			made = append(made, q.ID)
			if len(made) > 100 {
				t.Fatal("no bound on the previews of a VM")
			}
		}
		if len(made) != 16-1 {
			t.Errorf("made %d previews besides the first, want 15", len(made))
		}
		for _, id := range made {
			if err := vm.Preview(id).Delete(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("host-based with --preview-domain", func(t *testing.T) {
		hu, err := url.Parse(p.HostURL)
		if err != nil || !strings.HasPrefix(hu.Host, "8080-"+f.vm+"."+domain+":") || hu.Query().Get("agentos_preview") == "" {
			t.Fatalf("hostUrl %q", p.HostURL)
		}
		host := http.Header{"Host": {hu.Host}}
		resp, err := f.do(http.MethodGet, "/?"+hu.RawQuery, "", nil, host)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var token *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "agentos_preview" {
				token = c
			}
		}
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || token == nil || !token.HttpOnly {
			t.Fatalf("first request: %d %v", resp.StatusCode, resp.Header)
		}
		h := http.Header{"Host": {hu.Host}, "Cookie": {"agentos_preview=" + token.Value + "; app=1"}}
		resp, g := f.echo(t, http.MethodGet, "/echo?y=2", "", nil, h)
		if g.URL != "/echo?y=2" || g.Headers["cookie"] != "app=1" || resp.Header.Get("Set-Cookie") != "guest=1; Path=/" ||
			resp.Header.Get("Content-Security-Policy") != "" {
			t.Errorf("host-based: the guest saw %+v; headers %v", g, resp.Header)
		}
		// Without the cookie, or for another port, the token opens nothing.
		resp, err = f.do(http.MethodGet, "/echo", "", nil, http.Header{"Host": {hu.Host}})
		f.problem(t, resp, err, http.StatusNotFound)
		other := strings.Replace(hu.Host, "8080-", "8081-", 1)
		resp, err = f.do(http.MethodGet, "/echo", "", nil, http.Header{"Host": {other}, "Cookie": {"agentos_preview=" + token.Value}})
		f.problem(t, resp, err, http.StatusNotFound)
	})

	t.Run("preview traffic counts against the tenant's rate limit", func(t *testing.T) {
		ctx := ctxT(t)
		set := func(rps float64) {
			if _, err := f.e.admin.UpdateTenant(ctx, f.tenant, client.TenantUpdate{Quotas: &client.QuotasUpdate{RequestsPerSecond: &rps}}); err != nil {
				t.Fatal(err)
			}
		}
		set(1)
		defer set(0)
		for i := 0; ; i++ {
			resp, err := f.do(http.MethodGet, u.Path+"echo", "", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode == http.StatusOK {
				resp.Body.Close()
				if i > 50 {
					t.Fatal("50 preview requests at once and none limited at 1 per second")
				}
				continue
			}
			if d := f.problem(t, resp, err, http.StatusTooManyRequests); d["quota"] != "requestsPerSecond" || resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 details %v, Retry-After %q", d, resp.Header.Get("Retry-After"))
			}
			break
		}
	})

	t.Run("the preview outlives a hibernation", func(t *testing.T) {
		if _, err := vm.Hibernate(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// The guest server, a process, ended with the VM's run; started
		// again (which wakes the VM), it answers at the same URL.
		withGuestServer(t, f.e, f.c, f.key, f.vm)
		if _, g := f.echo(t, http.MethodGet, u.Path+"echo?after=wake", "", nil, nil); g.URL != "/echo?after=wake" {
			t.Errorf("through the preview after the wake, the guest saw %+v", g)
		}
	})

	t.Run("the VM's deletion ends its previews", func(t *testing.T) {
		ctx := ctxT(t)
		if _, err := vm.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := f.do(http.MethodGet, u.Path+"echo", "", nil, nil)
		f.problem(t, resp, err, http.StatusNotFound)
	})
}

// TestE2EClusterPorts runs two gateway binaries on one PostgreSQL: a guest
// port and a preview of a VM that runs on node 2 work through node 1 (the
// token resolves there from the shared store, and the request is proxied
// to the owner), an event stream arrives incrementally through the proxy,
// the cluster's signature does not reach the guest, and a revoke on one
// node is seen on the other.
func TestE2EClusterPorts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs two gateway binaries")
	}
	nodes := startCluster(t, 2).nodes
	n1, n2 := nodes[0], nodes[1]
	_, key := n1.e.tenantWithKey("ports", nil)
	c1 := n1.e.client(key)
	// Least-loaded placement puts one of two VMs on each node.
	var remote string
	for range 2 {
		vm := n1.e.vm(c1, client.CreateVMRequest{})
		if vm.Node == "n2" {
			remote = vm.ID
		}
	}
	if remote == "" {
		t.Fatal("no VM was placed on n2")
	}
	f := withGuestServer(t, n1.e, c1, key, remote)
	resp, g := f.echo(t, http.MethodGet, "/v1/vms/"+remote+"/ports/8080/echo", key, nil, nil)
	if resp.Header.Get("X-AgentOS-Node") != "n2" || g.Headers["x-agentos-forwarded-by"] != "" || g.Headers["authorization"] != "" {
		t.Fatalf("through n1: node %q, the guest saw %v", resp.Header.Get("X-AgentOS-Node"), g.Headers)
	}
	p, err := c1.VM(remote).CreatePreview(ctxT(t), client.PreviewRequest{Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(p.URL)
	for _, n := range nodes {
		pf := *f
		pf.e = n.e
		resp, g := pf.echo(t, http.MethodGet, u.Path+"echo", "", nil, nil)
		if resp.Header.Get("X-AgentOS-Node") != "n2" || g.Headers["x-agentos-forwarded-by"] != "" || g.URL != "/echo" {
			t.Fatalf("preview through %s: node %q, the guest saw %+v", n.id, resp.Header.Get("X-AgentOS-Node"), g)
		}
	}
	streamIncrementally(t, f, u.Path+"sse", "")
	if err := n2.e.client(key).VM(remote).Preview(p.ID).Delete(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	resp, err = f.do(http.MethodGet, u.Path+"echo", "", nil, nil)
	f.problem(t, resp, err, http.StatusNotFound)
}

// TestE2EPreviewInBrowserIframe opens the console in Chromium, with a value
// in its sessionStorage (where it keeps the API key) and a cookie, and
// frames a path-based preview: the preview loads in the iframe (nothing the
// gateway sets forbids framing it), its script runs, and it can read
// neither the console's storage nor its cookies (the sandbox gives it an
// opaque origin).
func TestE2EPreviewInBrowserIframe(t *testing.T) {
	t.Parallel()
	f := newPortsFixture(t)
	p, err := f.c.VM(f.vm).CreatePreview(ctxT(t), client.PreviewRequest{Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(p.URL)
	b := newBrowser(t, f.e.gw.URL)
	b.do(t, "open the console", chromedp.Navigate(f.e.gw.URL+"/"))
	evalJS[bool](t, b, `sessionStorage.setItem("probe", "console-secret"); document.cookie = "console=secret; path=/"; `+
		`window.addEventListener("message", e => { window.previewSaw = e.data; }); `+
		`const frame = document.createElement("iframe"); frame.src = `+strconv.Quote(u.Path+"page")+`; document.body.append(frame); true`)
	b.waitJS(t, e2eTimeout, "the framed preview to report", `window.previewSaw !== undefined`)
	if saw := evalJS[string](t, b, `window.previewSaw`); saw != "storage:blocked cookie:blocked" {
		t.Errorf("the framed preview read %q of the console's origin", saw)
	}
}
