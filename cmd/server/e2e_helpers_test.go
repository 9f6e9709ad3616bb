package main

// Shared machinery of the end-to-end tests (e2e_*_test.go): a gateway run
// in-process by startGateway on a loopback port with real sidecars, typed
// clients whose every response is validated against api/openapi.yaml, and
// helpers to read Server-Sent Event streams with deadlines.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// e2eTimeout bounds one step of a test (an exec, a stream read...). It is
// generous: the suite must pass on a loaded 2-core machine.
const e2eTimeout = 60 * time.Second

// e2e is one gateway and the means to talk to it.
type e2e struct {
	t     *testing.T
	gw    *gatewayProc
	doc   *openapi3.T
	tr    *http.Transport
	hc    *http.Client
	admin *client.Client
	n     *atomic.Int64
}

// sub returns e for a subtest: its helpers fail t, not the parent (a
// parent's FailNow from a subtest's goroutine is not allowed), and their
// deadlines start anew, so one subtest's spent time does not fail the
// subtests after it.
func (e *e2e) sub(t *testing.T) *e2e {
	s := *e
	s.t = t
	return &s
}

// newE2E starts a gateway with args (flags of the server) and returns an
// admin client. Every response its clients receive is checked against the
// OpenAPI document. The HTTP transport is private to the test, so its idle
// connections are closed at cleanup (before the gateway stops).
func newE2E(t *testing.T, args ...string) *e2e {
	t.Helper()
	gw := startGateway(t, "", args...)
	doc := apispec.MustLoad(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: callBound{apispec.Transport(t, doc, tr)}}
	e := &e2e{t: t, gw: gw, doc: doc, tr: tr, hc: hc, n: new(atomic.Int64)}
	e.admin = e.client(testAdminKey)
	return e
}

// client returns a typed client using key.
func (e *e2e) client(key string, opts ...client.Option) *client.Client {
	return mustClient(e.t, e.gw.URL, key, append([]client.Option{client.WithHTTPClient(e.hc)}, opts...)...)
}

// mustClient is client.New, failing t on an error.
func mustClient(t testing.TB, base, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tenant creates a tenant with quotas (nil: unlimited) and a key, and
// returns the tenant and a client using that key.
func (e *e2e) tenant(name string, q *client.Quotas) (*client.Tenant, *client.Client) {
	e.t.Helper()
	tn, key := e.tenantWithKey(name, q)
	return tn, e.client(key)
}

// tenantWithKey creates a tenant with quotas and a key, and returns the
// tenant and the key, for requests the typed client does not make.
func (e *e2e) tenantWithKey(name string, q *client.Quotas) (*client.Tenant, string) {
	e.t.Helper()
	ctx := ctxT(e.t)
	tn, err := e.admin.CreateTenant(ctx, client.TenantCreate{Name: name, Quotas: q})
	if err != nil {
		e.t.Fatalf("create tenant %s: %v", name, err)
	}
	k, err := e.admin.CreateKey(ctx, tn.ID)
	if err != nil {
		e.t.Fatalf("create key for %s: %v", name, err)
	}
	return tn, k.Key
}

// vm creates a VM that must come up ready.
func (e *e2e) vm(c *client.Client, req client.CreateVMRequest) *client.VM {
	e.t.Helper()
	vm, err := c.CreateVM(ctxT(e.t), req)
	if err != nil {
		e.t.Fatalf("create vm: %v", err)
	}
	if vm.State != client.VMReady {
		e.t.Fatalf("created vm is %s", vm.State)
	}
	return vm
}

// exec runs a command that must exit 0 and returns its stdout.
func (e *e2e) exec(c *client.Client, vm, command string) string {
	e.t.Helper()
	res, err := c.VM(vm).Exec(ctxT(e.t), client.ExecRequest{Command: command})
	if err != nil {
		e.t.Fatalf("exec %q: %v", command, err)
	}
	if res.ExitCode != 0 {
		e.t.Fatalf("exec %q: exit %d, stderr %q", command, res.ExitCode, res.Stderr)
	}
	out := res.Stdout
	return string(out)
}

// execJSON is a buffered exec's answer as it travels, for the tests of its
// encoding, which the client decodes away.
type execJSON struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Encoding  string `json:"encoding"`
	Truncated bool   `json:"truncated"`
}

// stdout is the decoded stdout.
func (r execJSON) stdout(t testing.TB) []byte {
	t.Helper()
	if r.Encoding == "utf8" {
		return []byte(r.Stdout)
	}
	b, err := base64.StdEncoding.DecodeString(r.Stdout)
	if err != nil {
		t.Fatalf("stdout %q: %v", r.Stdout, err)
	}
	return b
}

// execWire runs req on vm with the admin key and returns the answer as it
// travelled.
func (e *e2e) execWire(t testing.TB, vm string, req client.ExecRequest) execJSON {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, b := e.send("POST", "/v1/vms/"+vm+"/exec", testAdminKey, bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("exec %s: %d %s", body, resp.StatusCode, b)
	}
	var out execJSON
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sidecarPid returns the pid of the sidecar hosting vm.
func (e *e2e) sidecarPid(vm *client.VM) int {
	e.t.Helper()
	scs, err := e.admin.Sidecars(ctxT(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, sc := range scs {
		if sc.ID == vm.SidecarID {
			return sc.Pid
		}
	}
	e.t.Fatalf("no sidecar %s in %+v", vm.SidecarID, scs)
	return 0
}

// metric returns the sum of the samples of a metric family whose labels
// contain every one of match (for example `state="ready"`).
func (e *e2e) metric(name string, match ...string) float64 {
	e.t.Helper()
	b, err := e.admin.Metrics(ctxT(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return sumMetric(string(b), name, match...)
}

func sumMetric(text, name string, match ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // a longer name
		}
		for _, m := range match {
			if !strings.Contains(rest, m) {
				continue lines
			}
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// eventReq is a request to an SSE route of the gateway, used to find the
// operation whose x-sse-events document an event.
func (e *e2e) eventReq(method, path string) *http.Request {
	req, err := http.NewRequest(method, e.gw.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

// ctxT is a test's context: every call made with it through an e2e
// client is bounded by e2eTimeout on its own (see callBound), and the
// context as a whole by testBound, a net for a test that waits on ctx
// itself. One deadline shared by all of a test's calls was the suite's
// most common failure on a loaded machine: the first slow steps used it
// up for the last.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testBound)
	t.Cleanup(cancel)
	return context.WithValue(ctx, perCallKey{}, e2eTimeout)
}

// testBound bounds a ctxT as a whole.
const testBound = 5 * time.Minute

// perCallKey marks a context whose calls callBound bounds one by one; its
// value is the bound.
type perCallKey struct{}

// callBound is a RoundTripper bounding each request whose context ctxT
// made by the bound it carries, from the request until its body is read
// and closed. A response that streams (an event stream, a WebSocket's
// 101) is bounded only until its headers: the reader of a stream bounds
// it itself (collect, a test's own timeout).
type callBound struct{ next http.RoundTripper }

func (b callBound) RoundTrip(req *http.Request) (*http.Response, error) {
	d, ok := req.Context().Value(perCallKey{}).(time.Duration)
	if !ok {
		return b.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := b.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel()
		return resp, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the connection (an io.ReadWriteCloser the
		// WebSocket library asserts); it ends with the test's context.
		timer.Stop()
		return resp, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		timer.Stop()
	}
	resp.Body = &boundBody{ReadCloser: resp.Body, done: func() { timer.Stop(); cancel() }}
	return resp, nil
}

// boundBody ends its request's bound when it is closed.
type boundBody struct {
	io.ReadCloser
	done func()
}

func (b *boundBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}

// ctxFor is a context bounded by d.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// within runs fn, one step of a test, with a context of its own bounded by
// d: each step has its whole bound, whatever the steps before it took. If
// the step failed and its bound had run out, the failure names the step,
// after what the call that was waiting said (most often a bare "context
// deadline exceeded").
func within(t testing.TB, what string, d time.Duration, fn func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer func() {
		if ctx.Err() == context.DeadlineExceeded && t.Failed() {
			t.Errorf("step %q: ran out of its %s", what, d)
		}
		cancel()
	}()
	fn(ctx)
}

// step runs fn as a dependent subtest, name: a failure stops the test. The
// step has a context of its own, bounded by e2eTimeout (see within).
func step(t *testing.T, name string, fn func(t *testing.T, ctx context.Context)) {
	t.Helper()
	stepFor(t, name, e2eTimeout, fn)
}

// stepFor is step bounded by d, for a step that waits for longer than one
// call (an agent's turn: turnTimeout).
func stepFor(t *testing.T, name string, d time.Duration, fn func(t *testing.T, ctx context.Context)) {
	t.Helper()
	start := time.Now()
	ok := t.Run(name, func(t *testing.T) {
		within(t, name, d, func(ctx context.Context) { fn(t, ctx) })
	})
	t.Logf("%-14s %v", name, time.Since(start).Round(time.Millisecond))
	if !ok {
		t.FailNow()
	}
}

// wantCode fails t unless err is an *client.Error with code and status.
func wantCode(t testing.TB, err error, code client.Code, status int) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want %s (%d), got %v", code, status, err)
		return nil
	}
	if ce.Code != code || ce.Status != status {
		t.Fatalf("want %s (%d), got %s (%d): %v", code, status, ce.Code, ce.Status, ce)
	}
	return ce
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// collect reads a stream until its final event (returned last), checking
// each event's data against the spec's x-sse-events for req. It fails t if
// the stream ends without a final event, goes on after it, or d passes.
func (e *e2e) collect(s *client.Stream, req *http.Request, d time.Duration) []event {
	e.t.Helper()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var evs []event
	for {
		ev, err := next(ctx, s)
		if err != nil {
			e.t.Fatalf("stream %s ended without a final event after %d events: %v (%s)", req.URL.Path, len(evs), err, summarize(evs))
		}
		apispec.ValidateEvent(e.t, e.doc, req, ev.Type, ev.Data)
		evs = append(evs, ev)
		if ev.Final() {
			// The final event closes the stream.
			if ev2, err := next(ctx, s); err != io.EOF {
				e.t.Fatalf("stream %s: after the final %s event: %s %v", req.URL.Path, ev.Type, ev2.Type, err)
			}
			return evs
		}
	}
}

// validateEvent checks one event's data against the spec.
func validateEvent(e *e2e, req *http.Request, ev event) {
	e.t.Helper()
	apispec.ValidateEvent(e.t, e.doc, req, ev.Type, ev.Data)
}

// output concatenates the data of the stdout (or stderr) events of evs.
func output(t testing.TB, evs []event, stream string) string {
	t.Helper()
	var b bytes.Buffer
	for _, ev := range evs {
		if ev.Type != stream {
			continue
		}
		o, err := ev.Output()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(o.Data)
	}
	return b.String()
}

func summarize(evs []event) string {
	var b strings.Builder
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(ev.Data) > 80 {
			fmt.Fprintf(&b, "%s#%s %s…", ev.Type, ev.ID, ev.Data[:80])
		} else {
			fmt.Fprintf(&b, "%s#%s %s", ev.Type, ev.ID, ev.Data)
		}
	}
	return b.String()
}

// raw sends a request the typed client cannot make (malformed bodies,
// unknown routes) through the validating transport. A non-2xx answer
// becomes a *client.Error from its problem document, which must be
// application/problem+json and carry the request id of X-Request-ID.
func (e *e2e) raw(method, path, key string, body io.Reader, header map[string]string) error {
	e.t.Helper()
	resp, b := e.send(method, path, key, body, header)
	if resp.StatusCode < 300 {
		return nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		e.t.Fatalf("%s %s: %d answered with %q", method, path, resp.StatusCode, ct)
	}
	var p struct {
		Status    int            `json:"status"`
		Code      string         `json:"code"`
		Detail    string         `json:"detail"`
		Instance  string         `json:"instance"`
		RequestID string         `json:"requestId"`
		Details   map[string]any `json:"details"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		e.t.Fatalf("%s %s: problem %q: %v", method, path, b, err)
	}
	if p.Status != resp.StatusCode || p.RequestID == "" || p.RequestID != resp.Header.Get("X-Request-ID") {
		e.t.Fatalf("%s %s: problem %s does not match its response (%d, X-Request-ID %q)", method, path, b, resp.StatusCode, resp.Header.Get("X-Request-ID"))
	}
	return &client.Error{Status: resp.StatusCode, Code: client.Code(p.Code), Detail: p.Detail, Details: p.Details, Instance: p.Instance, RequestID: p.RequestID}
}

// uniq returns a name unique within the test.
func (e *e2e) uniq(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, e.n.Add(1))
}

// settledGoroutines closes the test's idle client connections, collects
// garbage and counts goroutines, less those that run a sidecar process: the
// measure of the streams' leak checks. The pool starts and replaces sidecars
// on its own schedule (a spare once one fills, a new one when the watchdog
// kills a stalled one), each with goroutines of its own; counted, one such
// start between the baseline and the check reads as a leak of seven (seen
// on a loaded CI machine). Sidecar goroutines have their own leak check:
// goleak in TestMain, once every gateway is stopped.
func (e *e2e) settledGoroutines() int {
	e.tr.CloseIdleConnections()
	runtime.GC()
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if !sidecarGoroutine(g) {
			n++
		}
	}
	return n
}

// sidecarGoroutine reports whether a goroutine (its stack as runtime.Stack
// prints it) was started by a sidecar process's supervision: by
// agentos.Sidecar itself, or by os/exec for the child's pipes. A handler's
// goroutine that waits in a sidecar call was started elsewhere and counts.
func sidecarGoroutine(stack string) bool {
	return strings.Contains(stack, "\ncreated by github.com/agentos-gateway/agentos-gateway/agentos.(*Sidecar)") ||
		strings.Contains(stack, "\ncreated by os/exec.(*Cmd)")
}

// baselineGoroutines is settledGoroutines once the gateway is at rest: no
// sidecar is starting and the count held for a second. When a VM takes the
// pool's idle sidecar, the pool starts another in the background, which
// adds its goroutines only once it is ready: a count taken meanwhile is too
// low (seen on a loaded machine, 7 goroutines short).
func (e *e2e) baselineGoroutines(t testing.TB) int {
	t.Helper()
	eventually(t, 60*time.Second, "no sidecar starting", func() bool {
		return e.metric("agentos_gateway_sidecars", `state="starting"`) == 0
	})
	deadline := time.Now().Add(30 * time.Second)
	n, same := e.settledGoroutines(), 0
	for same < 4 && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		m := e.settledGoroutines()
		if m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// goroutinesBack waits until the goroutine count is back near baseline once
// n streams (or connections) that raised it to open have gone, and fails
// with every goroutine's stack if it is not within 15 s.
func (e *e2e) goroutinesBack(t testing.TB, baseline, open, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var now int
	for {
		now = e.settledGoroutines()
		if now <= baseline+3 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d with %d %s, still %d after they left\n%s",
				baseline, open, n, what, now, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("goroutines: %d before, %d with %d %s, %d after they left", baseline, open, n, what, now)
	if open < baseline+n {
		t.Errorf("only %d more goroutines with %d %s: were they there?", open-baseline, n, what)
	}
}

// send makes a request through the validating transport and returns the
// response with its whole body.
func (e *e2e) send(method, path, key string, body io.Reader, header map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctxT(e.t), method, e.gw.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp, b
}
