package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// recorded is what the recording handler saw of one request.
type recorded struct {
	Method      string
	EscapedPath string
	Query       url.Values
	Header      http.Header
	Body        []byte
	ContentLen  int64
}

// canned is the answer the recording handler gives.
type canned struct {
	status int
	ctype  string
	header map[string]string
	body   string
}

type recorder struct {
	mu   sync.Mutex
	got  []recorded
	resp canned
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, recorded{Method: r.Method, EscapedPath: r.URL.EscapedPath(), Query: r.URL.Query(),
		Header: r.Header.Clone(), Body: body, ContentLen: r.ContentLength})
	resp := rc.resp
	rc.mu.Unlock()
	for k, v := range resp.header {
		w.Header().Set(k, v)
	}
	if resp.ctype != "" {
		w.Header().Set("Content-Type", resp.ctype)
	}
	if resp.status == 0 {
		resp.status = http.StatusOK
	}
	w.WriteHeader(resp.status)
	_, _ = io.WriteString(w, resp.body)
}

func (rc *recorder) reset(c canned) {
	rc.mu.Lock()
	rc.got, rc.resp = nil, c
	rc.mu.Unlock()
}

func (rc *recorder) requests() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.got...)
}

const (
	weirdVM            = "vm/ 1?#%"
	weirdVMEsc         = "vm%2F%201%3F%23%25"
	guestPath          = "/tmp/a b&c=d?e#.txt"
	shellID            = "sh 1/x"
	shellIDEsc         = "sh%201%2Fx"
	tenantID           = "t/1"
	tenantIDEsc        = "t%2F1"
	apiKey             = "sekret"
	userAgent          = "test-agent/1"
	jsonCT             = "application/json"
	sseCT              = "text/event-stream"
	vmJSON             = `{"id":"vm_1","state":"ready","labels":{"a":"b"},"sidecarId":"sc_1","loopbackExemptPorts":[],"software":[],"agents":[],"idleTimeoutSeconds":30,"createdAt":"2025-01-02T03:04:05.123Z","updatedAt":"2025-01-02T03:04:06Z"}`
	processJSON        = `{"pid":42,"command":"sleep","args":["10"],"cwd":"/","running":false,"exit":{"exitCode":3,"signal":"SIGTERM"},"startedAt":"2025-01-02T03:04:05Z","exitedAt":"2025-01-02T03:04:07Z"}`
	tenantJSON         = `{"id":"t/1","name":"acme","isolated":true,"quotas":{"maxVms":2,"maxProcesses":0,"requestsPerSecond":1.5},"sessions":{"retentionDays":0},"createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"}`
	outputSSE          = "id: 8\ndata: {\"seq\":8,\"stream\":\"stdout\",\"data\":\"hi\\n\",\"encoding\":\"utf8\",\"ts\":\"2025-01-02T03:04:05Z\"}\nevent: stdout\n\n"
	processTrail       = "/v1/vms/" + weirdVMEsc + "/processes/42"
	sessionID          = "ses 1/x?#"
	sessionIDEsc       = "ses%201%2Fx%3F%23"
	requestID          = "req/1 #"
	requestIDEsc       = "req%2F1%20%23"
	tenantSessionsJSON = `{"id":"t/1","name":"acme","isolated":false,"quotas":{"maxVms":0,"maxProcesses":0,"requestsPerSecond":0},"sessions":{"retentionDays":7,"permissionDefault":{"decision":"reject","timeoutSeconds":60}},"createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"}`
	permissionJSON     = `{"requestId":"req/1 #","options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},{"optionId":"reject-once","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"tc_1","title":"rm -rf /tmp/x","kind":"execute"},"askedAt":"2025-01-02T03:04:05Z","status":"pending","decision":null}`
	sessionJSON        = `{"id":"ses 1/x?#","vmId":"vm/ 1?#%","agent":"claude","cwd":"/work/repo","additionalDirectories":["/data"],"permissionPolicy":"ask","permissionDefault":{"decision":"allow","timeoutSeconds":300},"state":"waiting","pendingPermissions":[` + permissionJSON + `],"latestSequence":12,"createdAt":"2025-01-02T03:04:05.5Z","updatedAt":"2025-01-02T03:04:06Z"}`
	idleSessionJSON    = `{"id":"ses 1/x?#","vmId":"vm/ 1?#%","agent":"pi","cwd":"/home/agentos","additionalDirectories":[],"permissionPolicy":"allow_all","permissionDefault":null,"state":"idle","pendingPermissions":[],"latestSequence":0,"createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"}`
	durableChunkJSON   = `{"sequence":6,"timestamp":"2025-01-02T03:04:05.25Z","type":"agent_message_chunk","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`
	durableAskJSON     = `{"sequence":7,"timestamp":"2025-01-02T03:04:06Z","type":"permission_request","requestId":"req/1 #","options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"}],"toolCall":{"toolCallId":"tc_1"}}`
	durableReplyJSON   = `{"sequence":8,"timestamp":"2025-01-02T03:04:07Z","type":"permission_response","requestId":"req/1 #","status":"accepted","response":{"outcome":{"outcome":"selected","optionId":"allow-once"}},"decision":{"by":"timeout","optionId":"allow-once","status":"accepted","at":"2025-01-02T03:04:07Z"}}`
)

type methodCase struct {
	name     string
	call     func(ctx context.Context, c *client.Client) error
	resp     canned
	method   string
	path     string
	query    url.Values
	accept   string
	headers  map[string]string // must be set
	absent   []string          // must not be set
	bodyJSON string            // expected JSON body ("" = none)
	bodyRaw  []byte            // expected raw body
	ctype    string            // expected request Content-Type
}

func pathQ(extra ...string) url.Values {
	q := url.Values{"path": {guestPath}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Add(extra[i], extra[i+1])
	}
	return q
}

// check fails the test when cond is false; the calls use it on their answers.
func expect(cond bool, format string, args ...any) error {
	if !cond {
		return &checkError{msg: format, args: args}
	}
	return nil
}

type checkError struct {
	msg  string
	args []any
}

func (e *checkError) Error() string {
	b, _ := json.Marshal(e.args)
	return e.msg + " " + string(b)
}

func readOne(ctx context.Context, s *client.Stream, err error, wantType string) error {
	if err != nil {
		return err
	}
	defer s.Close()
	ev, err := s.Next(ctx)
	if err != nil {
		return err
	}
	if ev.Type != wantType || ev.ID != "8" {
		return expect(false, "event", ev.Type, ev.ID)
	}
	o, err := ev.Output()
	if err != nil {
		return err
	}
	return expect(string(o.Data) == "hi\n" && o.Seq == 8 && o.Stream == "stdout" && !o.Time.IsZero(), "output", o)
}

func methodCases() []methodCase {
	vmBase := "/v1/vms/" + weirdVMEsc
	return []methodCase{
		{name: "Health", method: "GET", path: "/healthz", accept: jsonCT, resp: canned{ctype: jsonCT, body: `{"status":"ok"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.Health(ctx) }},
		{name: "Ready", method: "GET", path: "/readyz", accept: jsonCT, resp: canned{ctype: jsonCT, body: `{"status":"ready"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.Ready(ctx) }},
		{name: "OpenAPI", method: "GET", path: "/v1/openapi.yaml", accept: "application/yaml", resp: canned{ctype: "application/yaml", body: "openapi: 3.1.0\n"},
			call: func(ctx context.Context, c *client.Client) error {
				b, err := c.OpenAPI(ctx)
				if err != nil {
					return err
				}
				return expect(string(b) == "openapi: 3.1.0\n", "spec", string(b))
			}},
		{name: "Metrics", method: "GET", path: "/metrics", accept: "text/plain", resp: canned{ctype: "text/plain; version=0.0.4", body: "up 1\n"},
			call: func(ctx context.Context, c *client.Client) error {
				b, err := c.Metrics(ctx)
				if err != nil {
					return err
				}
				return expect(string(b) == "up 1\n", "metrics", string(b))
			}},
		{name: "CreateVM", method: "POST", path: "/v1/vms", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"labels":{"a":"b"},"permissions":{"fs":"allow"},"software":["@agentos-software/pi"],"idleTimeoutSeconds":30}`,
			resp:     canned{status: 201, ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.CreateVM(ctx, client.CreateVMRequest{Labels: map[string]string{"a": "b"}, Permissions: map[string]any{"fs": "allow"},
					Software: []string{"@agentos-software/pi"}, IdleTimeoutSeconds: 30})
				if err != nil {
					return err
				}
				return expect(vm.ID == "vm_1" && vm.State == client.VMReady && vm.Labels["a"] == "b" && vm.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 123e6, time.UTC)), "vm", vm)
			}},
		{name: "GetVM", method: "GET", path: vmBase, accept: jsonCT, resp: canned{ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.GetVM(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(vm.SidecarID == "sc_1" && vm.IdleTimeoutSeconds == 30, "vm", vm)
			}},
		{name: "ListVMs", method: "GET", path: "/v1/vms", accept: jsonCT,
			query: url.Values{"state": {"ready", "lost"}, "label": {"a=1", "b=x:y", "c!=z"}, "cursor": {"c/1"}, "limit": {"10"}},
			resp:  canned{ctype: jsonCT, body: `{"items":[` + vmJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListVMs(ctx, client.ListVMsOptions{State: client.VMReady, States: []client.VMState{client.VMLost},
					Labels: map[string]string{"b": "x:y", "a": "1"}, NotLabels: map[string]string{"c": "z"}, Cursor: "c/1", Limit: 10})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.NextCursor == "c2", "list", l)
			}},
		{name: "ListVMsNoFilter", method: "GET", path: "/v1/vms", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.ListVMs(ctx, client.ListVMsOptions{})
				return err
			}},
		{name: "DeleteVM", method: "DELETE", path: vmBase, accept: jsonCT, resp: canned{ctype: jsonCT, body: strings.Replace(vmJSON, "ready", "disposed", 1)},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.DeleteVM(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(vm.State == client.VMDisposed && vm.State.Final(), "vm", vm)
			}},
		{name: "DeleteVMRecord", method: "DELETE", path: vmBase, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.DeleteVM(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(vm == nil, "vm", vm)
			}},
		{name: "VMEvents", method: "GET", path: vmBase + "/events", accept: sseCT, headers: map[string]string{"Last-Event-ID": "5"},
			resp: canned{ctype: sseCT, body: "id: 6\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"lost\",\"reason\":\"sidecar died\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VMEvents(ctx, weirdVM, client.StreamOptions{LastEventID: "5"})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				v, err := ev.VMEvent()
				if err != nil {
					return err
				}
				return expect(ev.ID == "6" && s.LastEventID() == "6" && v.State == client.VMLost && v.Reason == "sidecar died", "event", ev, v)
			}},
		{name: "Exec", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Idempotency-Key": "k-1", "X-Request-ID": "rid-1"},
			bodyJSON: `{"command":"cat","cwd":"/tmp","env":{"A":"1"},"stdin":"hello","timeoutMs":1000,"maxOutputBytes":10}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"exitCode":0,"stdout":"AP8=","stderr":"ZXJy","encoding":"base64","truncated":true,"durationMs":12}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.Exec(ctx, weirdVM, client.ExecRequest{Command: "cat", Cwd: "/tmp", Env: map[string]string{"A": "1"},
					Stdin: []byte("hello"), TimeoutMs: 1000, MaxOutputBytes: 10}, client.WithIdempotencyKey("k-1"), client.WithRequestID("rid-1"))
				if err != nil {
					return err
				}
				out, err := res.StdoutBytes()
				if err != nil {
					return err
				}
				errb, err := res.StderrBytes()
				if err != nil {
					return err
				}
				return expect(bytes.Equal(out, []byte{0, 0xff}) && string(errb) == "err" && res.Truncated && res.Replayed && res.DurationMs == 12, "result", res)
			}},
		{name: "ExecArgvBinaryStdin", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			absent:   []string{"Idempotency-Key"},
			bodyJSON: `{"argv":["od","-c"],"stdin":"AP8=","stdinEncoding":"base64"}`,
			resp:     canned{ctype: jsonCT, body: `{"exitCode":1,"stdout":"a","stderr":"","encoding":"utf8","truncated":false,"durationMs":1}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.Exec(ctx, weirdVM, client.ExecRequest{Argv: []string{"od", "-c"}, Stdin: []byte{0, 0xff}})
				if err != nil {
					return err
				}
				out, _ := res.StdoutBytes()
				return expect(res.ExitCode == 1 && string(out) == "a" && !res.Replayed, "result", res)
			}},
		{name: "ExecStream", method: "POST", path: vmBase + "/exec", accept: sseCT, ctype: jsonCT, absent: []string{"Idempotency-Key", "Last-Event-ID"},
			bodyJSON: `{"command":"echo hi","stdin":""}`, resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.ExecStream(ctx, weirdVM, client.ExecRequest{Command: "echo hi", Stdin: []byte{}})
				return readOne(ctx, s, err, "stdout")
			}},
		{name: "SpawnProcess", method: "POST", path: vmBase + "/processes", accept: jsonCT, ctype: jsonCT,
			headers: map[string]string{"Idempotency-Key": "spawn-1"}, bodyJSON: `{"argv":["sleep","10"],"cwd":"/"}`,
			resp: canned{status: 201, ctype: jsonCT, body: processJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.SpawnProcess(ctx, weirdVM, client.SpawnRequest{Argv: []string{"sleep", "10"}, Cwd: "/"}, client.WithIdempotencyKey("spawn-1"))
				if err != nil {
					return err
				}
				return expect(p.Pid == 42 && p.Exit != nil && p.Exit.ExitCode == 3 && p.ExitedAt != nil, "process", p)
			}},
		{name: "ListProcesses", method: "GET", path: vmBase + "/processes", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + processJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListProcesses(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].Args[0] == "10", "list", l)
			}},
		{name: "GetProcess", method: "GET", path: processTrail, accept: jsonCT, resp: canned{ctype: jsonCT, body: processJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.GetProcess(ctx, weirdVM, 42)
				if err != nil {
					return err
				}
				return expect(p.Command == "sleep" && p.Exit.Signal == "SIGTERM", "process", p)
			}},
		{name: "ProcessOutput", method: "GET", path: processTrail + "/output", accept: sseCT, headers: map[string]string{"Last-Event-ID": "7", "Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.ProcessOutput(ctx, weirdVM, 42, client.StreamOptions{LastEventID: "7"})
				return readOne(ctx, s, err, "stdout")
			}},
		{name: "WriteStdin", method: "POST", path: processTrail + "/stdin", accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("\x00\x01bin\n"), resp: canned{ctype: jsonCT, body: `{"written":6}`},
			call: func(ctx context.Context, c *client.Client) error {
				return c.WriteStdin(ctx, weirdVM, 42, []byte("\x00\x01bin\n"))
			}},
		{name: "CloseStdin", method: "POST", path: processTrail + "/stdin/close", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.CloseStdin(ctx, weirdVM, 42) }},
		{name: "Signal", method: "POST", path: processTrail + "/signal", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"signal":"SIGTERM"}`,
			resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.Signal(ctx, weirdVM, 42, "SIGTERM") }},
		{name: "WaitProcess", method: "GET", path: processTrail + "/wait", accept: jsonCT, query: url.Values{"timeoutMs": {"1501"}},
			resp: canned{ctype: jsonCT, body: `{"exitCode":3,"signal":"SIGKILL"}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.WaitProcess(ctx, weirdVM, 42, 1500*time.Millisecond+time.Microsecond)
				if err != nil {
					return err
				}
				return expect(st.ExitCode == 3 && st.Signal == "SIGKILL", "status", st)
			}},
		{name: "WaitProcessNoTimeout", method: "GET", path: processTrail + "/wait", accept: jsonCT, query: url.Values{"timeoutMs": {"0"}},
			resp: canned{ctype: jsonCT, body: `{"exitCode":0}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.WaitProcess(ctx, weirdVM, 42, 0)
				return err
			}},
		{name: "OpenShell", method: "POST", path: vmBase + "/shells", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"shell":"bash","cols":100,"rows":30}`,
			resp: canned{status: 201, ctype: jsonCT, body: `{"shellId":"sh 1/x"}`},
			call: func(ctx context.Context, c *client.Client) error {
				id, err := c.OpenShell(ctx, weirdVM, client.ShellRequest{Shell: "bash", Cols: 100, Rows: 30})
				if err != nil {
					return err
				}
				return expect(id == shellID, "shell id", id)
			}},
		{name: "ShellInput", method: "POST", path: vmBase + "/shells/" + shellIDEsc + "/input", accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("ls\r"), resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.ShellInput(ctx, weirdVM, shellID, []byte("ls\r"))
			}},
		{name: "ResizeShell", method: "POST", path: vmBase + "/shells/" + shellIDEsc + "/resize", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"cols":120,"rows":40}`, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.ResizeShell(ctx, weirdVM, shellID, 120, 40)
			}},
		{name: "ShellOutput", method: "GET", path: vmBase + "/shells/" + shellIDEsc + "/output", accept: sseCT, absent: []string{"Last-Event-ID"},
			resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.ShellOutput(ctx, weirdVM, shellID, client.StreamOptions{})
				return readOne(ctx, s, err, "stdout")
			}},
		{name: "ListShells", method: "GET", path: vmBase + "/shells", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"sh 1/x","shell":"sh","state":"running","cols":80,"rows":24,"startedAt":"2026-01-01T00:00:00Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListShells(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].ID == shellID && l.Items[0].State == client.ShellRunning, "shells", l)
			}},
		{name: "GetShell", method: "GET", path: vmBase + "/shells/" + shellIDEsc, accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"id":"sh 1/x","shell":"bash","state":"exited","cols":120,"rows":40,"startedAt":"2026-01-01T00:00:00Z","exitedAt":"2026-01-01T00:00:09Z","exit":{"exitCode":3}}`},
			call: func(ctx context.Context, c *client.Client) error {
				sh, err := c.GetShell(ctx, weirdVM, shellID)
				if err != nil {
					return err
				}
				return expect(sh.State == client.ShellExited && sh.Exit != nil && sh.Exit.ExitCode == 3 && sh.Cols == 120 && sh.ExitedAt != nil, "shell", sh)
			}},
		{name: "CloseShell", method: "DELETE", path: vmBase + "/shells/" + shellIDEsc, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.CloseShell(ctx, weirdVM, shellID) }},
		{name: "ReadFile", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "text/plain", body: "file content"},
			call: func(ctx context.Context, c *client.Client) error {
				rc, err := c.ReadFile(ctx, weirdVM, guestPath)
				if err != nil {
					return err
				}
				defer rc.Close()
				b, err := io.ReadAll(rc)
				if err != nil {
					return err
				}
				return expect(string(b) == "file content", "content", string(b))
			}},
		{name: "StatFileHead", method: "HEAD", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "text/plain; charset=utf-8", header: map[string]string{"Content-Length": "1234", "Last-Modified": "Thu, 02 Jan 2025 03:04:05 GMT"}},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.StatFileHead(ctx, weirdVM, guestPath)
				if err != nil {
					return err
				}
				return expect(h.Size == 1234 && h.ContentType == "text/plain; charset=utf-8" && !h.IsDir &&
					h.ModTime.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)), "head", h)
			}},
		{name: "StatFileHeadDir", method: "HEAD", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "inode/directory", header: map[string]string{"Content-Length": "4096"}},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.StatFileHead(ctx, weirdVM, guestPath)
				if err != nil {
					return err
				}
				return expect(h.IsDir && h.Size == 4096, "head", h)
			}},
		{name: "WriteFile", method: "PUT", path: vmBase + "/files", query: pathQ("mkdirs", "true"), accept: jsonCT, ctype: "application/octet-stream",
			headers: map[string]string{"Content-Length": "7"}, bodyRaw: []byte("payload"),
			resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":7}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.WriteFile(ctx, weirdVM, guestPath, io.MultiReader(strings.NewReader("pay"), strings.NewReader("load")), client.WriteFileOptions{Mkdirs: true, Size: 7})
				if err != nil {
					return err
				}
				return expect(res.Size == 7 && res.Path == "/tmp/x", "result", res)
			}},
		{name: "WriteFileChunked", method: "PUT", path: vmBase + "/files", query: pathQ(), accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("payload"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":7}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.WriteFile(ctx, weirdVM, guestPath, io.MultiReader(strings.NewReader("payload")), client.WriteFileOptions{})
				return err
			}},
		{name: "ReadFileRange", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=10-13", "If-Range": `"e1"`},
			resp:    canned{status: 206, ctype: "text/plain", header: map[string]string{"Content-Range": "bytes 10-13/100", "ETag": `"e1"`}, body: "abcd"},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.ReadFileRange(ctx, weirdVM, guestPath, client.ReadRangeOptions{Offset: 10, Length: 4, IfRange: `"e1"`})
				if err != nil {
					return err
				}
				defer fr.Body.Close()
				b, err := io.ReadAll(fr.Body)
				if err != nil {
					return err
				}
				return expect(string(b) == "abcd" && fr.Partial && fr.Start == 10 && fr.Length == 4 && fr.Size == 100 && fr.ETag == `"e1"`, "range", fr)
			}},
		{name: "ReadFileRangeSuffix", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=-5"},
			resp:    canned{status: 206, ctype: "text/plain", header: map[string]string{"Content-Range": "bytes 95-99/100"}, body: "vwxyz"},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.ReadFileRange(ctx, weirdVM, guestPath, client.ReadRangeOptions{Offset: -5})
				if err != nil {
					return err
				}
				fr.Body.Close()
				return expect(fr.Start == 95 && fr.Length == 5, "range", fr)
			}},
		{name: "ReadFileRangeNotModified", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"If-None-Match": `"e1"`}, absent: []string{"Range"},
			resp: canned{status: 304, header: map[string]string{"ETag": `"e1"`}},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.ReadFileRange(ctx, weirdVM, guestPath, client.ReadRangeOptions{IfNoneMatch: `"e1"`})
				if err != nil {
					return err
				}
				return expect(fr.NotModified && fr.Body == nil && fr.ETag == `"e1"`, "not modified", fr)
			}},
		{name: "DownloadArchive", method: "GET", path: vmBase + "/archive", query: pathQ("format", "tar.gz"), accept: "*/*",
			resp: canned{ctype: "application/gzip", body: "gz bytes"},
			call: func(ctx context.Context, c *client.Client) error {
				rc, err := c.DownloadArchive(ctx, weirdVM, guestPath, client.ArchiveOptions{Gzip: true, Mkdirs: true})
				if err != nil {
					return err
				}
				defer rc.Close()
				b, err := io.ReadAll(rc)
				if err != nil {
					return err
				}
				return expect(string(b) == "gz bytes", "archive", string(b))
			}},
		{name: "UploadArchive", method: "PUT", path: vmBase + "/archive", query: pathQ("mkdirs", "true"), accept: jsonCT, ctype: "application/x-tar",
			bodyRaw: []byte("tar bytes"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","files":2,"dirs":1,"symlinks":1,"bytes":9}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.UploadArchive(ctx, weirdVM, guestPath, strings.NewReader("tar bytes"), client.ArchiveOptions{Mkdirs: true})
				if err != nil {
					return err
				}
				return expect(*res == client.ArchiveResult{Path: "/tmp/x", Files: 2, Dirs: 1, Symlinks: 1, Bytes: 9}, "result", res)
			}},
		{name: "DeleteFile", method: "DELETE", path: vmBase + "/files", query: pathQ("recursive", "true"), accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteFile(ctx, weirdVM, guestPath, true) }},
		{name: "DeleteFileFlat", method: "DELETE", path: vmBase + "/files", query: pathQ(), accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteFile(ctx, weirdVM, guestPath, false) }},
		{name: "ListDir", method: "GET", path: vmBase + "/dirs", query: pathQ("recursive", "true", "maxDepth", "3"), accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"name":"a","path":"/tmp/a","isDirectory":true,"isSymbolicLink":false,"size":0}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListDir(ctx, weirdVM, guestPath, true, 3)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].IsDir && l.Items[0].Path == "/tmp/a", "list", l)
			}},
		{name: "Mkdir", method: "POST", path: vmBase + "/dirs", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"path":"/tmp/a b&c=d?e#.txt"}`,
			resp: canned{status: 201, ctype: jsonCT, body: `{"path":"/tmp/a"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.Mkdir(ctx, weirdVM, guestPath) }},
		{name: "Move", method: "POST", path: vmBase + "/fs/move", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"from":"/a","to":"/b c"}`,
			resp: canned{ctype: jsonCT, body: `{"from":"/a","to":"/b c"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.Move(ctx, weirdVM, "/a", "/b c") }},
		{name: "Stat", method: "GET", path: vmBase + "/fs/stat", query: pathQ(), accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":5,"mode":33188,"isDirectory":false,"isSymbolicLink":false,"mtime":"2025-01-02T03:04:05Z","uid":1,"gid":2}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.Stat(ctx, weirdVM, guestPath)
				if err != nil {
					return err
				}
				return expect(st.Size == 5 && st.Mode == 0o100644 && st.UID == 1 && st.GID == 2 && !st.ModTime.IsZero(), "stat", st)
			}},
		{name: "Agents", method: "GET", path: vmBase + "/agents", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"pi","installed":true},{"id":"claude","installed":false}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Agents(ctx, weirdVM)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 2 && l.Items[0] == client.Agent{ID: "pi", Installed: true} && l.Items[1] == client.Agent{ID: "claude"}, "agents", l)
			}},
		{name: "OpenSession", method: "POST", path: vmBase + "/sessions", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessionId":"fix-flaky-test","agent":"claude","cwd":"/work/repo","env":{"CI":"1"},"additionalDirectories":["/data"],` +
				`"mcpServers":[{"name":"fs","command":"mcp-fs","args":[],"env":[]}],"permissionPolicy":"ask",` +
				`"permissionDefault":{"decision":"allow","timeoutSeconds":300},"additionalInstructions":"Be brief."}`,
			resp: canned{status: 201, ctype: jsonCT, header: map[string]string{"Location": "/v1/vms/" + weirdVMEsc + "/sessions/" + sessionIDEsc},
				body: strings.Replace(sessionJSON, `"state":"waiting"`, `"state":"idle"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.OpenSession(ctx, weirdVM, client.OpenSessionRequest{SessionID: "fix-flaky-test", Agent: "claude", Cwd: "/work/repo",
					Env: map[string]string{"CI": "1"}, AdditionalDirectories: []string{"/data"},
					MCPServers:       json.RawMessage(`[{"name":"fs","command":"mcp-fs","args":[],"env":[]}]`),
					PermissionPolicy: "ask", PermissionDefault: &client.PermissionDefault{Decision: "allow", TimeoutSeconds: 300},
					AdditionalInstructions: "Be brief."})
				if err != nil {
					return err
				}
				return expect(s.ID == sessionID && s.VMID == weirdVM && s.State == client.SessionIdle && s.PermissionPolicy == "ask" &&
					s.PermissionDefault != nil && *s.PermissionDefault == client.PermissionDefault{Decision: "allow", TimeoutSeconds: 300}, "session", s)
			}},
		{name: "OpenSessionMinimal", method: "POST", path: vmBase + "/sessions", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"agent":"pi"}`,
			resp: canned{status: 201, ctype: jsonCT, body: idleSessionJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.OpenSession(ctx, weirdVM, client.OpenSessionRequest{Agent: "pi"})
				if err != nil {
					return err
				}
				return expect(s.Agent == "pi" && s.PermissionDefault == nil && s.AdditionalDirectories != nil && len(s.PendingPermissions) == 0 &&
					s.LatestSequence == 0, "session", s)
			}},
		{name: "GetSession", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc, accept: jsonCT, resp: canned{ctype: jsonCT, body: sessionJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.GetSession(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				if err := expect(s.ID == sessionID && s.Agent == "claude" && s.Cwd == "/work/repo" && reflect.DeepEqual(s.AdditionalDirectories, []string{"/data"}) &&
					s.State == client.SessionWaiting && s.LatestSequence == 12 && s.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 5e8, time.UTC)) &&
					s.UpdatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)) && len(s.PendingPermissions) == 1, "session", s); err != nil {
					return err
				}
				p := s.PendingPermissions[0]
				return expect(p.RequestID == requestID && p.Status == "pending" && p.Decision == nil && p.Option("allow_once") == "allow-once" &&
					p.Option("reject_once") == "reject-once" && p.Option("allow_always") == "" && len(p.Options) == 2 && p.Options[0].Name == "Allow once" &&
					string(p.ToolCall) == `{"toolCallId":"tc_1","title":"rm -rf /tmp/x","kind":"execute"}` && !p.AskedAt.IsZero(), "permission", p)
			}},
		{name: "ListSessions", method: "GET", path: vmBase + "/sessions", accept: jsonCT, query: url.Values{"cursor": {"c/1"}, "limit": {"2"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + idleSessionJSON + `,` + sessionJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListSessions(ctx, weirdVM, client.ListOptions{Cursor: "c/1", Limit: 2})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 2 && l.NextCursor == "c2" && l.Items[0].State == client.SessionIdle && l.Items[1].State == client.SessionWaiting, "list", l)
			}},
		{name: "ListSessionsFirstPage", method: "GET", path: vmBase + "/sessions", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListSessions(ctx, weirdVM, client.ListOptions{})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 0 && l.NextCursor == "", "list", l)
			}},
		{name: "DeleteSession", method: "DELETE", path: vmBase + "/sessions/" + sessionIDEsc, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteSession(ctx, weirdVM, sessionID) }},
		{name: "UnloadSession", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/unload", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: strings.Replace(idleSessionJSON, `"state":"idle"`, `"state":"unloaded"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.UnloadSession(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				return expect(s.State == client.SessionUnloaded, "session", s)
			}},
		{name: "Prompt", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/prompt", accept: jsonCT, ctype: jsonCT, absent: []string{"Prefer"},
			bodyJSON: `{"content":[{"type":"text","text":"Make the tests pass."}],"idempotencyKey":"turn-1"}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"stopReason":"end_turn","message":{"role":"assistant","content":[{"type":"text","text":"done"}]}}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.Prompt(ctx, weirdVM, sessionID, client.PromptRequest{Content: client.TextPrompt("Make the tests pass."), IdempotencyKey: "turn-1"})
				if err != nil {
					return err
				}
				return expect(res.StopReason == "end_turn" && res.Replayed &&
					string(res.Message) == `{"role":"assistant","content":[{"type":"text","text":"done"}]}`, "result", res)
			}},
		{name: "PromptFresh", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/prompt", accept: jsonCT, ctype: jsonCT, absent: []string{"Prefer"},
			bodyJSON: `{"content":[{"type":"text","text":"a"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}]}`,
			resp:     canned{ctype: jsonCT, body: `{"stopReason":"cancelled","message":null}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.Prompt(ctx, weirdVM, sessionID, client.PromptRequest{
					Content: json.RawMessage(`[{"type":"text","text":"a"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}]`)})
				if err != nil {
					return err
				}
				return expect(res.StopReason == "cancelled" && !res.Replayed && string(res.Message) == "null", "result", res)
			}},
		{name: "PromptAsync", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/prompt", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Prefer": "respond-async"},
			bodyJSON: `{"content":[{"type":"text","text":"go"}],"idempotencyKey":"turn-2"}`,
			resp: canned{status: 202, ctype: jsonCT, body: `{"status":"accepted"}`,
				header: map[string]string{"Preference-Applied": "respond-async", "Location": "/v1/vms/" + weirdVMEsc + "/sessions/" + sessionIDEsc}},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.PromptAsync(ctx, weirdVM, sessionID, client.PromptRequest{Content: client.TextPrompt("go"), IdempotencyKey: "turn-2"})
				if err != nil {
					return err
				}
				return expect(res == nil, "result of an accepted turn", res)
			}},
		{name: "PromptAsyncReplayed", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/prompt", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Prefer": "respond-async"},
			bodyJSON: `{"content":[{"type":"text","text":"go"}],"idempotencyKey":"turn-2"}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"stopReason":"max_tokens","message":{"text":"cut"}}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.PromptAsync(ctx, weirdVM, sessionID, client.PromptRequest{Content: client.TextPrompt("go"), IdempotencyKey: "turn-2"})
				if err != nil {
					return err
				}
				return expect(res != nil && res.StopReason == "max_tokens" && res.Replayed && string(res.Message) == `{"text":"cut"}`, "result", res)
			}},
		{name: "CancelPrompt", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/cancel", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"status":"no_active_prompt"}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.CancelPrompt(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				return expect(st == "no_active_prompt", "status", st)
			}},
		{name: "Permissions", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/permissions", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + permissionJSON + `,` +
				`{"requestId":"r2","options":null,"toolCall":null,"askedAt":"2025-01-02T03:04:05Z","status":"answered",` +
				`"decision":{"by":"api","keyId":"key_1","optionId":"allow-once","status":"accepted","at":"2025-01-02T03:04:07Z"}}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Permissions(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				if err := expect(len(l.Items) == 2 && l.Items[0].RequestID == requestID && l.Items[0].Decision == nil, "list", l); err != nil {
					return err
				}
				p := l.Items[1]
				return expect(p.Options == nil && string(p.ToolCall) == "null" && p.Option("allow_once") == "" && p.Decision != nil &&
					*p.Decision == client.PermissionDecision{By: "api", KeyID: "key_1", OptionID: "allow-once", Status: "accepted", At: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC)},
					"permission", p)
			}},
		{name: "AnswerPermission", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/permissions/" + requestIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"optionId":"allow-once"}`, resp: canned{ctype: jsonCT, body: `{"status":"accepted"}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, err := c.AnswerPermission(ctx, weirdVM, sessionID, requestID, "allow-once")
				if err != nil {
					return err
				}
				return expect(*a == client.PermissionAnswer{Status: "accepted"}, "answer", a)
			}},
		{name: "AnswerPermissionNotPending", method: "POST", path: vmBase + "/sessions/" + sessionIDEsc + "/permissions/" + requestIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"optionId":"reject-once"}`, resp: canned{ctype: jsonCT, body: `{"status":"not_pending","reason":"already_resolved"}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, err := c.AnswerPermission(ctx, weirdVM, sessionID, requestID, "reject-once")
				if err != nil {
					return err
				}
				return expect(a.Status == "not_pending" && a.Reason == "already_resolved", "answer", a)
			}},
		{name: "SessionConfig", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/config", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"revision":3,"options":[{"id":"model","name":"Model","type":"select","currentValue":"a"}]}`},
			call: func(ctx context.Context, c *client.Client) error {
				cfg, err := c.SessionConfig(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				return expect(cfg.Revision == 3 && string(cfg.Options) == `[{"id":"model","name":"Model","type":"select","currentValue":"a"}]`, "config", cfg)
			}},
		{name: "SetSessionConfig", method: "PUT", path: vmBase + "/sessions/" + sessionIDEsc + "/config/model%2Fx", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"value":"claude-sonnet-4-5"}`, resp: canned{ctype: jsonCT, body: `{"revision":4,"options":null}`},
			call: func(ctx context.Context, c *client.Client) error {
				cfg, err := c.SetSessionConfig(ctx, weirdVM, sessionID, "model/x", "claude-sonnet-4-5")
				if err != nil {
					return err
				}
				return expect(cfg.Revision == 4 && string(cfg.Options) == "null", "config", cfg)
			}},
		{name: "SetSessionConfigJSON", method: "PUT", path: vmBase + "/sessions/" + sessionIDEsc + "/config/effort", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"value":{"level":2,"fast":true}}`, resp: canned{ctype: jsonCT, body: `{"revision":5,"options":[]}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.SetSessionConfig(ctx, weirdVM, sessionID, "effort", json.RawMessage(`{"level":2,"fast":true}`))
				return err
			}},
		{name: "SessionCapabilities", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/capabilities", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"loadSession":true,"promptCapabilities":{"image":true}}` + "\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.SessionCapabilities(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				return expect(string(raw) == `{"loadSession":true,"promptCapabilities":{"image":true}}`, "capabilities", string(raw))
			}},
		{name: "SessionCapabilitiesNull", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/capabilities", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: "null\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.SessionCapabilities(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				return expect(string(raw) == "null", "capabilities", string(raw))
			}},
		{name: "SessionAgentInfo", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/agent-info", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"name":"pi","version":"1.2.3"}` + "\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.SessionAgentInfo(ctx, weirdVM, sessionID)
				if err != nil {
					return err
				}
				var info struct{ Name, Version string }
				if err := json.Unmarshal(raw, &info); err != nil {
					return err
				}
				return expect(info.Name == "pi" && info.Version == "1.2.3", "agent info", string(raw))
			}},
		{name: "SessionHistory", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/history", accept: jsonCT,
			query: url.Values{"after": {"5"}, "before": {"9"}, "limit": {"3"}},
			resp:  canned{ctype: jsonCT, body: `{"events":[` + durableChunkJSON + `,` + durableAskJSON + `,` + durableReplyJSON + `],"hasMoreBefore":true,"hasMoreAfter":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.SessionHistory(ctx, weirdVM, sessionID, client.HistoryQuery{After: 5, Before: 9, Limit: 3})
				if err != nil {
					return err
				}
				if err := expect(len(h.Events) == 3 && h.HasMoreBefore && !h.HasMoreAfter, "history", h); err != nil {
					return err
				}
				chunk, ask, reply := h.Events[0], h.Events[1], h.Events[2]
				return expect(chunk.Sequence == 6 && chunk.Type == "agent_message_chunk" && chunk.Timestamp.Equal(time.Date(2025, 1, 2, 3, 4, 5, 25e7, time.UTC)) &&
					string(chunk.Update) == `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}` &&
					ask.Type == "permission_request" && ask.RequestID == requestID && len(ask.Options) == 1 && ask.Options[0].Kind == "allow_once" &&
					string(ask.ToolCall) == `{"toolCallId":"tc_1"}` && ask.Decision == nil &&
					reply.Type == "permission_response" && reply.Status == "accepted" && reply.Decision != nil && reply.Decision.By == "timeout" &&
					reply.Decision.OptionID == "allow-once" && string(reply.Response) == `{"outcome":{"outcome":"selected","optionId":"allow-once"}}`, "events", h.Events)
			}},
		{name: "SessionHistoryFromStart", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/history", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"events":[],"hasMoreBefore":false,"hasMoreAfter":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.SessionHistory(ctx, weirdVM, sessionID, client.HistoryQuery{})
				if err != nil {
					return err
				}
				return expect(len(h.Events) == 0 && !h.HasMoreBefore && !h.HasMoreAfter, "history", h)
			}},
		{name: "SessionHistoryBackwards", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/history", accept: jsonCT, query: url.Values{"before": {"100"}},
			resp: canned{ctype: jsonCT, body: `{"events":[` + durableReplyJSON + `],"hasMoreBefore":true,"hasMoreAfter":true}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.SessionHistory(ctx, weirdVM, sessionID, client.HistoryQuery{Before: 100})
				if err != nil {
					return err
				}
				return expect(len(h.Events) == 1 && h.Events[0].Sequence == 8 && h.HasMoreAfter, "history", h)
			}},
		{name: "SessionEvents", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/events", accept: sseCT,
			headers: map[string]string{"Last-Event-ID": "5", "Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: "id: 6\nevent: durable\ndata: " + durableChunkJSON + "\n\n" +
				": heartbeat\n\n" +
				"id: 6\nevent: ephemeral\ndata: {\"afterSequence\":6,\"type\":\"agent_message_chunk\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"h\"}}}\n\n" +
				"id: 6\nevent: agent_stderr\ndata: {\"agentType\":\"pi\",\"processId\":\"p1\",\"text\":\"warn\\n\"}\n\n" +
				"id: 7\nevent: durable\ndata: " + durableAskJSON + "\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.SessionEvents(ctx, weirdVM, sessionID, client.StreamOptions{LastEventID: "5"})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				d, err := ev.SessionEvent()
				if err != nil {
					return err
				}
				if err := expect(ev.Type == client.EventDurable && ev.ID == "6" && d.Sequence == 6 && d.Type == "agent_message_chunk" && len(d.Update) > 0, "durable", ev, d); err != nil {
					return err
				}
				if _, err := ev.EphemeralEvent(); err == nil {
					return expect(false, "a durable event decoded as ephemeral")
				}
				ev, err = s.Next(ctx)
				if err != nil {
					return err
				}
				e, err := ev.EphemeralEvent()
				if err != nil {
					return err
				}
				if err := expect(ev.Type == client.EventEphemeral && ev.ID == "6" && s.LastEventID() == "6" && e.AfterSequence == 6 && e.Type == "agent_message_chunk" &&
					string(e.Update) == `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"h"}}`, "ephemeral", ev, e); err != nil {
					return err
				}
				if _, err := ev.SessionEvent(); err == nil {
					return expect(false, "an ephemeral event decoded as durable")
				}
				ev, err = s.Next(ctx)
				if err != nil {
					return err
				}
				var stderr struct{ AgentType, ProcessID, Text string }
				if err := ev.Decode(&stderr); err != nil {
					return err
				}
				if err := expect(ev.Type == client.EventAgentStderr && ev.ID == "6" && stderr.Text == "warn\n", "stderr", ev); err != nil {
					return err
				}
				ev, err = s.Next(ctx)
				if err != nil {
					return err
				}
				d, err = ev.SessionEvent()
				if err != nil {
					return err
				}
				return expect(ev.ID == "7" && s.LastEventID() == "7" && d.Sequence == 7 && d.RequestID == requestID, "durable", ev, d)
			}},
		{name: "SessionEventsFromStart", method: "GET", path: vmBase + "/sessions/" + sessionIDEsc + "/events", accept: sseCT,
			resp: canned{ctype: sseCT, body: "id: \nevent: end\ndata: {\"state\":\"deleted\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.SessionEvents(ctx, weirdVM, sessionID, client.StreamOptions{})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				var end struct{ State string }
				if err := ev.Decode(&end); err != nil {
					return err
				}
				return expect(ev.Type == client.EventEnd && ev.Final() && ev.ID == "" && end.State == "deleted", "end", ev)
			}},
		{name: "CreateTenant", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"name":"acme","isolated":true,"quotas":{"maxVms":2,"maxProcesses":0,"requestsPerSecond":1.5}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.CreateTenant(ctx, client.TenantCreate{Name: "acme", Isolated: true, Quotas: &client.Quotas{MaxVMs: 2, RequestsPerSecond: 1.5}})
				if err != nil {
					return err
				}
				return expect(t.ID == tenantID && t.Quotas.MaxVMs == 2 && t.Quotas.RequestsPerSecond == 1.5, "tenant", t)
			}},
		{name: "CreateTenantSessions", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"name":"acme","sessions":{"retentionDays":7,"permissionDefault":{"decision":"reject","timeoutSeconds":60}}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: tenantSessionsJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.CreateTenant(ctx, client.TenantCreate{Name: "acme", Sessions: &client.SessionSettingsUpdate{
					RetentionDays: client.Ptr(7), PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.RetentionDays == 7 && t.Sessions.PermissionDefault != nil && t.Sessions.PermissionDefault.Decision == "reject", "tenant", t)
			}},
		{name: "CreateTenantDefaults", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"name":"solo"}`,
			resp: canned{status: 201, ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateTenant(ctx, client.TenantCreate{Name: "solo"})
				return err
			}},
		{name: "ListTenants", method: "GET", path: "/v1/tenants", accept: jsonCT, query: url.Values{"cursor": {"x"}, "limit": {"5"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + tenantJSON + `],"nextCursor":"y"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListTenants(ctx, client.ListOptions{Cursor: "x", Limit: 5})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.NextCursor == "y", "list", l)
			}},
		{name: "GetTenant", method: "GET", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.GetTenant(ctx, tenantID)
				if err != nil {
					return err
				}
				return expect(t.Sessions == client.SessionSettings{} && t.Isolated, "tenant", t)
			}},
		{name: "UpdateTenant", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"isolated":false,"quotas":{"maxVms":0}}`, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Isolated: client.Ptr(false), Quotas: &client.QuotasUpdate{MaxVMs: client.Ptr(0)}})
				return err
			}},
		{name: "UpdateTenantSessions", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"retentionDays":7,"permissionDefault":{"decision":"reject","timeoutSeconds":60}}}`,
			resp:     canned{ctype: jsonCT, body: tenantSessionsJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
					RetentionDays: client.Ptr(7), PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.RetentionDays == 7 && t.Sessions.PermissionDefault != nil &&
					*t.Sessions.PermissionDefault == client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}, "tenant", t)
			}},
		{name: "UpdateTenantClearPermissionDefault", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"permissionDefault":null}}`, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				// Clearing wins over a PermissionDefault set alongside.
				t, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
					ClearPermissionDefault: true, PermissionDefault: &client.PermissionDefault{Decision: "allow", TimeoutSeconds: 1}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.RetentionDays == 0 && t.Sessions.PermissionDefault == nil, "tenant", t)
			}},
		{name: "UpdateTenantRetentionZero", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"retentionDays":0}}`, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{RetentionDays: client.Ptr(0)}})
				return err
			}},
		{name: "CreateKey", method: "POST", path: "/v1/tenants/" + tenantIDEsc + "/keys", accept: jsonCT,
			resp: canned{status: 201, ctype: jsonCT, body: `{"id":"k1","tenantId":"t/1","prefix":"agw_abc","createdAt":"2025-01-02T03:04:05Z","key":"agw_abcdef"}`},
			call: func(ctx context.Context, c *client.Client) error {
				k, err := c.CreateKey(ctx, tenantID)
				if err != nil {
					return err
				}
				return expect(k.Key == "agw_abcdef" && k.TenantID == tenantID, "key", k)
			}},
		{name: "ListKeys", method: "GET", path: "/v1/tenants/" + tenantIDEsc + "/keys", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"k1","tenantId":"t/1","prefix":"agw_abc","createdAt":"2025-01-02T03:04:05Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListKeys(ctx, tenantID)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].Key == "", "keys", l)
			}},
		{name: "DeleteKey", method: "DELETE", path: "/v1/tenants/" + tenantIDEsc + "/keys/k%2F1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteKey(ctx, tenantID, "k/1") }},
		{name: "Sidecars", method: "GET", path: "/v1/sidecars", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"sc_1","pid":99,"state":"ready","vmCount":2,"tenants":["default"],"isolated":false,"rssBytes":1024,"restarts":1,"startedAt":"2025-01-02T03:04:05Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Sidecars(ctx)
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].Pid == 99 && l.Items[0].VMCount == 2 && l.Items[0].RSSBytes == 1024, "sidecars", l)
			}},
	}
}

// TestMethodsWire checks, for every method, the HTTP method, the escaped
// path, the query, the headers and the body it sends, and that it decodes
// the answer.
func TestMethodsWire(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	// A base URL with a path prefix and a trailing slash is kept.
	prefixed := http.StripPrefix("/gw", rec)
	srv2 := httptest.NewServer(prefixed)
	defer srv2.Close()
	c := client.New(srv.URL+"/", apiKey, client.WithUserAgent(userAgent))

	for _, tc := range methodCases() {
		t.Run(tc.name, func(t *testing.T) {
			rec.reset(tc.resp)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tc.call(ctx, c); err != nil {
				t.Fatalf("call: %v", err)
			}
			got := rec.requests()
			if len(got) != 1 {
				t.Fatalf("%d requests, want 1", len(got))
			}
			r := got[0]
			if r.Method != tc.method {
				t.Errorf("method %s, want %s", r.Method, tc.method)
			}
			if r.EscapedPath != tc.path {
				t.Errorf("path %s, want %s", r.EscapedPath, tc.path)
			}
			wantQ := tc.query
			if wantQ == nil {
				wantQ = url.Values{}
			}
			if !reflect.DeepEqual(r.Query, wantQ) {
				t.Errorf("query %v, want %v", r.Query, wantQ)
			}
			if h := r.Header.Get("Authorization"); h != "Bearer "+apiKey {
				t.Errorf("Authorization %q", h)
			}
			if h := r.Header.Get("User-Agent"); h != userAgent {
				t.Errorf("User-Agent %q", h)
			}
			if h := r.Header.Get("Accept"); h != tc.accept {
				t.Errorf("Accept %q, want %q", h, tc.accept)
			}
			for k, v := range tc.headers {
				if k == "Content-Length" {
					if r.ContentLen != 7 {
						t.Errorf("Content-Length %d", r.ContentLen)
					}
					continue
				}
				if h := r.Header.Get(k); h != v {
					t.Errorf("%s %q, want %q", k, h, v)
				}
			}
			if tc.headers["Idempotency-Key"] == "" {
				tc.absent = append(tc.absent, "Idempotency-Key")
			}
			if tc.headers["Last-Event-ID"] == "" {
				tc.absent = append(tc.absent, "Last-Event-ID")
			}
			for _, k := range tc.absent {
				if _, ok := r.Header[k]; ok {
					t.Errorf("header %s sent: %q", k, r.Header.Get(k))
				}
			}
			if h := r.Header.Get("Content-Type"); h != tc.ctype {
				t.Errorf("Content-Type %q, want %q", h, tc.ctype)
			}
			switch {
			case tc.bodyJSON != "":
				var got, want any
				if err := json.Unmarshal(r.Body, &got); err != nil {
					t.Fatalf("body %q: %v", r.Body, err)
				}
				if err := json.Unmarshal([]byte(tc.bodyJSON), &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("body %s, want %s", r.Body, tc.bodyJSON)
				}
			case tc.bodyRaw != nil:
				if !bytes.Equal(r.Body, tc.bodyRaw) {
					t.Errorf("body %q, want %q", r.Body, tc.bodyRaw)
				}
			default:
				if len(r.Body) != 0 {
					t.Errorf("unexpected body %q", r.Body)
				}
			}
		})
	}

	// The same calls through a base URL with a path prefix.
	cp := client.New(srv2.URL+"/gw", apiKey)
	rec.reset(canned{ctype: jsonCT, body: vmJSON})
	if _, err := cp.GetVM(context.Background(), weirdVM); err != nil {
		t.Fatal(err)
	}
	if got := rec.requests(); len(got) != 1 || got[0].EscapedPath != "/v1/vms/"+weirdVMEsc {
		t.Fatalf("prefixed call: %+v", got)
	}
}

// TestMethodsWireCoversEveryMethod keeps the table above complete.
func TestMethodsWireCoversEveryMethod(t *testing.T) {
	elsewhere := map[string]bool{"BaseURL": true, "FollowProcessOutput": true, "FollowShellOutput": true, "FollowVMEvents": true,
		"FollowSessionEvents": true}
	cases := methodCases()
	typ := reflect.TypeOf(&client.Client{})
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if elsewhere[name] {
			continue
		}
		found := false
		for _, tc := range cases {
			if tc.name == name || strings.HasPrefix(tc.name, name) && tc.name[len(name)] >= 'A' && tc.name[len(name)] <= 'Z' {
				found = true
			}
		}
		if !found {
			t.Errorf("method %s has no wire test case", name)
		}
	}
}

func TestNoAPIKeySendsNoAuthorization(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{ctype: jsonCT, body: `{"status":"ok"}`})
	if err := client.New(srv.URL, "").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := rec.requests()[0]
	if _, ok := r.Header["Authorization"]; ok {
		t.Fatal("Authorization sent without a key")
	}
	if r.Header.Get("User-Agent") != client.DefaultUserAgent {
		t.Fatalf("User-Agent %q", r.Header.Get("User-Agent"))
	}
}

func TestWithHTTPClient(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{ctype: jsonCT, body: `{"status":"ok"}`})
	var used bool
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	if err := client.New(srv.URL, apiKey, client.WithHTTPClient(hc), client.WithHTTPClient(nil)).Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !used {
		t.Fatal("the given HTTP client was not used")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestWriteFileDoesNotCloseReader(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{ctype: jsonCT, body: `{"path":"/x","size":3}`})
	r := &closeTracker{Reader: strings.NewReader("abc")}
	if _, err := client.New(srv.URL, apiKey).WriteFile(context.Background(), "vm", "/x", r, client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if r.closed {
		t.Fatal("WriteFile closed the caller's reader")
	}
	if got := rec.requests()[0]; string(got.Body) != "abc" {
		t.Fatalf("body %q", got.Body)
	}
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestStreamRefusesNonEventStream(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{ctype: jsonCT, body: `{"not":"a stream"}`})
	_, err := client.New(srv.URL, apiKey).ProcessOutput(context.Background(), "vm", 1, client.StreamOptions{})
	if !errors.Is(err, client.ErrNotEventStream) {
		t.Fatalf("err %v, want ErrNotEventStream", err)
	}
}
