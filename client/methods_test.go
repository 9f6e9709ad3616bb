package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

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
	scheduleJSON       = `{"id":"sch_1","vmId":"vm/1","cron":"@every 2s","timezone":"Europe/Paris","overlap":"queue","action":{"exec":{"command":"echo","args":["hi"],"timeoutMs":1500}},"createdAt":"2025-01-02T03:04:05Z"}`
	runJSON            = `{"id":"run_1","scheduleId":"sch_1","startedAt":"2025-01-02T03:04:05Z","endedAt":"2025-01-02T03:04:06Z","outcome":"succeeded","exitCode":0,"stdout":"hi\n","stderr":"","truncated":false}`
	snapshotJSON       = `{"id":"snap/1","tenantId":"t/1","vmId":"vm/1","bytes":1024,"files":3,"dirs":2,"symlinks":1,"node":"n1","createdAt":"2025-01-02T03:04:05Z"}`
	tenantJSON         = `{"id":"t/1","name":"acme","isolated":true,"quotas":{"maxVms":2,"maxProcesses":0,"requestsPerSecond":1.5,"maxSchedules":0,"maxSnapshotBytes":0},"sessions":{"retentionDays":0},"createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"}`
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
	previewJSON        = `{"id":"pvw_1","vmId":"vm/ 1?#%","port":3000,"url":"http://gw/p/pvt_x/","createdAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:05:36Z"}`
	day                = 24 * time.Hour
)

// methodCase is one call and what it must send. name is the method, as
// Type.Method for a handle's ("VM.Exec") and bare for the Client's; variant
// tells apart several cases of one method.
type methodCase struct {
	name     string
	variant  string
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

// readOne reads the outputSSE event from a stream.
func readOne(ctx context.Context, s *client.Stream, err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	ev, err := s.Next(ctx)
	if err != nil {
		return err
	}
	o, ok := ev.(*client.Output)
	if !ok {
		return expect(false, "event", ev)
	}
	return expect(string(o.Data) == "hi\n" && o.Seq == 8 && o.Stream == client.Stdout && !o.Time.IsZero() && s.LastEventID() == "8", "output", o)
}

// follow reads a followed stream to its end into a list of the events'
// Go types.
func follow(seq iter.Seq2[client.Event, error]) ([]string, error) {
	var types []string
	for ev, err := range seq {
		if err != nil {
			return types, err
		}
		types = append(types, reflect.TypeOf(ev).String())
	}
	return types, nil
}

func methodCases() []methodCase {
	const webhookJSON = `{"id":"whk_1","url":"https://hooks.example.com/a","events":["process.exit","exec.done"],"vm":"vm_1","description":"backend","state":"active","createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"}`
	const deliveryJSON = `{"id":"dlv_1","subscriptionId":"whk_1","type":"process.exit","sequence":4,"vm":"vm_1","status":"failed","attempts":3,"lastStatus":500,"lastError":"webhook answered 500","createdAt":"2025-01-02T03:04:05Z","doneAt":"2025-01-02T04:04:05Z","data":{"vmId":"vm_1","pid":3,"command":"true","exitCode":0}}`
	vmBase := "/v1/vms/" + weirdVMEsc
	sesBase := vmBase + "/sessions/" + sessionIDEsc
	shBase := vmBase + "/shells/" + shellIDEsc
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
					Software: []string{"@agentos-software/pi"}, IdleTimeout: 30 * time.Second})
				if err != nil {
					return err
				}
				return expect(vm.ID == "vm_1" && vm.State == client.VMReady && vm.Labels["a"] == "b" && vm.IdleTimeout() == 30*time.Second &&
					vm.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 123e6, time.UTC)), "vm", vm)
			}},
		{name: "CreateVM", variant: "idle timeout rounded up to a second", method: "POST", path: "/v1/vms", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"idleTimeoutSeconds":2}`, resp: canned{status: 201, ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateVM(ctx, client.CreateVMRequest{IdleTimeout: 1200 * time.Millisecond})
				return err
			}},
		{name: "CreateVM", variant: "empty", method: "POST", path: "/v1/vms", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{}`, resp: canned{status: 201, ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateVM(ctx, client.CreateVMRequest{})
				return err
			}},
		{name: "VM.Get", method: "GET", path: vmBase, accept: jsonCT, resp: canned{ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				vm := c.VM(weirdVM)
				if vm.ID() != weirdVM {
					return expect(false, "handle id", vm.ID())
				}
				got, err := vm.Get(ctx)
				if err != nil {
					return err
				}
				return expect(got.SidecarID == "sc_1" && got.IdleTimeout() == 30*time.Second && got.UpdatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)), "vm", got)
			}},
		{name: "ListVMs", method: "GET", path: "/v1/vms", accept: jsonCT,
			query: url.Values{"state": {"ready", "lost"}, "label": {"a=1", "b=x:y", "c!=z"}, "cursor": {"c/1"}, "limit": {"10"}},
			resp:  canned{ctype: jsonCT, body: `{"items":[` + vmJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListVMs(ctx, client.ListVMsOptions{States: []client.VMState{client.VMReady, client.VMLost},
					Labels: map[string]string{"b": "x:y", "a": "1"}, NotLabels: map[string]string{"c": "z"}, Cursor: "c/1", Limit: 10})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].IdleTimeout() == 30*time.Second && l.NextCursor == "c2", "list", l)
			}},
		{name: "ListVMs", variant: "all states", method: "GET", path: "/v1/vms", accept: jsonCT, query: url.Values{"state": {"all"}},
			resp: canned{ctype: jsonCT, body: `{"items":[]}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListVMs(ctx, client.ListVMsOptions{AllStates: true, States: []client.VMState{client.VMReady}})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 0 && l.NextCursor == "", "list", l)
			}},
		{name: "ListVMs", variant: "no filter", method: "GET", path: "/v1/vms", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.ListVMs(ctx, client.ListVMsOptions{})
				return err
			}},
		{name: "VMs", method: "GET", path: "/v1/vms", accept: jsonCT, query: url.Values{"label": {"a=1"}, "limit": {"2"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + vmJSON + `,` + vmJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				n := 0
				// The iterator starts at the first page whatever Cursor says.
				for vm, err := range c.VMs(ctx, client.ListVMsOptions{Labels: map[string]string{"a": "1"}, Limit: 2, Cursor: "ignored"}) {
					if err != nil {
						return err
					}
					if vm.ID != "vm_1" {
						return expect(false, "vm", vm)
					}
					n++
				}
				return expect(n == 2, "count", n)
			}},
		{name: "VM.Delete", method: "DELETE", path: vmBase, accept: jsonCT, resp: canned{ctype: jsonCT, body: strings.Replace(vmJSON, "ready", "disposed", 1)},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.VM(weirdVM).Delete(ctx)
				if err != nil {
					return err
				}
				return expect(vm.State == client.VMDisposed && vm.State.Final(), "vm", vm)
			}},
		{name: "VM.Delete", variant: "record", method: "DELETE", path: vmBase, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.VM(weirdVM).Delete(ctx)
				if err != nil {
					return err
				}
				return expect(vm == nil, "vm", vm)
			}},
		{name: "VM.Update", method: "PATCH", path: vmBase, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"labels":{"a":null,"b":"2"},"idleTimeoutSeconds":2,"onIdle":"dispose"}`,
			resp:     canned{ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				b, onIdle, idle := "2", "dispose", 1500*time.Millisecond
				vm, err := c.VM(weirdVM).Update(ctx, client.UpdateVMRequest{Labels: map[string]*string{"a": nil, "b": &b}, IdleTimeout: &idle, OnIdle: &onIdle})
				if err != nil {
					return err
				}
				return expect(vm.ID == "vm_1", "vm", vm)
			}},
		{name: "VM.Hibernate", method: "POST", path: vmBase + "/hibernate", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: strings.Replace(vmJSON, `"state":"ready"`, `"state":"hibernated","reason":"request","hibernatedAt":"2025-01-02T03:04:05Z"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.VM(weirdVM).Hibernate(ctx)
				if err != nil {
					return err
				}
				return expect(vm.State == client.VMHibernated && !vm.State.Final() && vm.HibernatedAt != nil && vm.HibernatedAt.Year() == 2025, "vm", vm)
			}},
		{name: "VM.Checkpoint", method: "POST", path: vmBase + "/checkpoint", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: strings.Replace(vmJSON, `"state":"ready"`, `"state":"ready","checkpointSeconds":60,"checkpointAt":"2025-01-02T03:04:05Z"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.VM(weirdVM).Checkpoint(ctx)
				if err != nil {
					return err
				}
				return expect(vm.CheckpointSeconds == 60 && vm.CheckpointAt != nil && vm.CheckpointAt.Year() == 2025 && !vm.Restorable, "vm", vm)
			}},
		{name: "VM.Usage", method: "GET", path: vmBase + "/usage", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"vmId":"vm_1","state":"ready","collectedAt":"2025-01-02T03:04:05Z","ownSidecar":true,"memoryBytes":268435456,` +
				`"cpuSeconds":1.25,"filesystemBytes":5428197,"inodes":376,"processes":{"running":1,"exited":2},` +
				`"handles":{"openFds":4,"pipes":1,"ptys":0,"sockets":0,"socketListeners":0,"socketConnections":0},"limits":{"processes":256,"filesystemBytes":67108864}}`},
			call: func(ctx context.Context, c *client.Client) error {
				u, err := c.VM(weirdVM).Usage(ctx)
				if err != nil {
					return err
				}
				return expect(u.VMID == "vm_1" && u.OwnSidecar && *u.MemoryBytes == 256<<20 && *u.CPUSeconds == 1.25 && *u.FilesystemBytes == 5428197 &&
					u.Processes.Running == 1 && u.Handles.OpenFDs == 4 && u.Limits.FilesystemBytes == 64<<20 && u.ImageBytes == nil, "usage", u)
			}},
		{name: "VM.Wake", method: "POST", path: vmBase + "/wake", accept: jsonCT, resp: canned{ctype: jsonCT, body: vmJSON},
			call: func(ctx context.Context, c *client.Client) error {
				vm, err := c.VM(weirdVM).Wake(ctx)
				if err != nil {
					return err
				}
				return expect(vm.State == client.VMReady && vm.HibernatedAt == nil, "vm", vm)
			}},
		{name: "VM.Events", method: "GET", path: vmBase + "/events", accept: sseCT, headers: map[string]string{"Last-Event-ID": "5", "Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: "id: 6\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"lost\",\"reason\":\"sidecar died\"}\n\n" +
				"id: 6\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is lost\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Events(ctx, client.StreamOptions{LastEventID: "5"})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				v, ok := ev.(*client.VMEvent)
				if err := expect(ok && s.LastEventID() == "6" && v.Type == client.VMEventState && v.State == client.VMLost && v.Reason == "sidecar died", "event", ev); err != nil {
					return err
				}
				if raw := s.Raw(); raw.ID != "6" || raw.Type != "state" || !bytes.HasPrefix(raw.Data, []byte(`{"type":"state"`)) {
					return expect(false, "raw event", raw.ID, raw.Type, string(raw.Data))
				}
				ev, err = s.Next(ctx)
				var e *client.Error
				if !errors.As(err, &e) || ev != nil || e.Code != client.CodeConflict || e.Status != 0 {
					return expect(false, "end", ev, err)
				}
				_, err = s.Next(ctx)
				return expect(err == e, "error after the end", err)
			}},
		{name: "VM.FollowEvents", method: "GET", path: vmBase + "/events", accept: sseCT,
			resp: canned{ctype: sseCT, body: "id: 6\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2025-01-02T03:04:05Z\",\"state\":\"disposed\"}\n\n" +
				"id: 6\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is disposed\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				types, err := follow(c.VM(weirdVM).FollowEvents(ctx))
				return expect(err == nil && strings.Join(types, " ") == "*gateway.VMEvent", "events", types, err)
			}},
		{name: "VM.Watch", method: "GET", path: vmBase + "/watch", accept: sseCT,
			query:   url.Values{"path": {"/workspace/a b"}, "recursive": {"true"}, "interval": {"1500"}},
			headers: map[string]string{"Last-Event-ID": "3"},
			resp: canned{ctype: sseCT, body: "id: 4\nevent: resync\ndata: {\"reason\":\"expired\"}\n\n" +
				"id: 5\nevent: rename\ndata: {\"seq\":5,\"type\":\"rename\",\"path\":\"/workspace/a b/y\",\"from\":\"/workspace/a b/x\",\"kind\":\"file\",\"source\":\"api\",\"time\":\"2025-01-02T03:04:05Z\"}\n\n" +
				"id: 5\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM has ended\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Watch(ctx, "/workspace/a b", client.WatchOptions{Recursive: true, Interval: 1499500 * time.Microsecond,
					StreamOptions: client.StreamOptions{LastEventID: "3"}})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if r, ok := ev.(*client.Resync); err != nil || !ok || r.Reason != "expired" {
					return expect(false, "resync", ev, err)
				}
				ev, err = s.Next(ctx)
				if fc, ok := ev.(*client.FileChange); err != nil || !ok || fc.Type != "rename" || fc.From != "/workspace/a b/x" || fc.Seq != 5 || s.LastEventID() != "5" {
					return expect(false, "rename", ev, err)
				}
				_, err = s.Next(ctx)
				var e *client.Error
				return expect(errors.As(err, &e) && e.Code == client.CodeConflict, "end", err)
			}},
		{name: "VM.FollowWatch", method: "GET", path: vmBase + "/watch", accept: sseCT, query: url.Values{"path": {"/w"}},
			resp: canned{ctype: sseCT, body: "id: 1\nevent: create\ndata: {\"seq\":1,\"type\":\"create\",\"path\":\"/w/f\",\"kind\":\"file\",\"source\":\"scan\",\"time\":\"2025-01-02T03:04:05Z\"}\n\n" +
				"id: 1\nevent: error\ndata: {\"code\":\"resource_exhausted\",\"detail\":\"too many entries\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				types, err := follow(c.VM(weirdVM).FollowWatch(ctx, "/w", client.WatchOptions{}))
				var e *client.Error
				return expect(errors.As(err, &e) && e.Code == client.CodeResourceExhausted && strings.Join(types, " ") == "*api.WatchEvent", "events", types, err)
			}},
		{name: "VM.Exec", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Idempotency-Key": "k-1", "X-Request-ID": "rid-1"},
			bodyJSON: `{"command":"cat","cwd":"/tmp","env":{"A":"1"},"stdin":"hello","timeoutMs":1000,"maxOutputBytes":10}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"exitCode":0,"stdout":"AP8=","stderr":"ZXJy","encoding":"base64","truncated":true,"durationMs":12}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Exec(ctx, client.ExecRequest{Command: "cat", Cwd: "/tmp", Env: map[string]string{"A": "1"},
					Stdin: []byte("hello"), Timeout: time.Second, MaxOutputBytes: 10}, client.WithIdempotencyKey("k-1"), client.WithRequestID("rid-1"))
				if err != nil {
					return err
				}
				return expect(bytes.Equal(res.Stdout, []byte{0, 0xff}) && string(res.Stderr) == "err" && res.Truncated && res.Replayed &&
					res.Duration == 12*time.Millisecond, "result", res)
			}},
		{name: "VM.Exec", variant: "timeout rounded up to a millisecond", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"command":"true","timeoutMs":2}`,
			resp:     canned{ctype: jsonCT, body: `{"exitCode":0,"stdout":"","stderr":"","encoding":"utf8","truncated":false,"durationMs":0}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).Exec(ctx, client.ExecRequest{Command: "true", Timeout: 1500 * time.Microsecond})
				return err
			}},
		{name: "VM.Exec", variant: "argv, binary stdin", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"argv":["od","-c"],"stdin":"AP8=","stdinEncoding":"base64"}`,
			resp:     canned{ctype: jsonCT, body: `{"exitCode":1,"signal":"SIGTERM","stdout":"a","stderr":"","encoding":"utf8","truncated":false,"durationMs":1}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Exec(ctx, client.ExecRequest{Argv: []string{"od", "-c"}, Stdin: []byte{0, 0xff}})
				if err != nil {
					return err
				}
				return expect(res.ExitCode == 1 && res.Signal == client.SIGTERM && string(res.Stdout) == "a" && len(res.Stderr) == 0 && !res.Replayed, "result", res)
			}},
		{name: "VM.Exec", variant: "command with args", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"command":"ls","args":["-l","a b"]}`,
			resp:     canned{ctype: jsonCT, body: `{"exitCode":0,"stdout":"","stderr":"","encoding":"utf8","truncated":false,"durationMs":1}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).Exec(ctx, client.ExecRequest{Command: "ls", Args: []string{"-l", "a b"}})
				return err
			}},
		{name: "VM.Exec", variant: "into writers", method: "POST", path: vmBase + "/exec", accept: sseCT, ctype: jsonCT,
			headers: map[string]string{"Idempotency-Key": "k-2"}, bodyJSON: `{"command":"echo hi"}`,
			resp: canned{ctype: sseCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: outputSSE + "id: 8\nevent: exit\ndata: {\"exitCode\":0,\"truncated\":false,\"durationMs\":3}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				var out bytes.Buffer
				res, err := c.VM(weirdVM).Exec(ctx, client.ExecRequest{Command: "echo hi", Stdout: &out}, client.WithIdempotencyKey("k-2"))
				if err != nil {
					return err
				}
				return expect(out.String() == "hi\n" && res.ExitCode == 0 && res.Duration == 3*time.Millisecond && res.Stdout == nil && res.Replayed, "result", res, out.String())
			}},
		{name: "VM.ExecAsync", method: "POST", path: vmBase + "/exec", accept: jsonCT, ctype: jsonCT,
			headers: map[string]string{"Idempotency-Key": "k-9", "Prefer": "respond-async"}, bodyJSON: `{"command":"sleep 1"}`,
			resp: canned{status: 202, ctype: jsonCT, body: `{"idempotencyKey":"k-9","status":"running","location":"/v1/vms/x/exec/k-9"}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, res, err := c.VM(weirdVM).ExecAsync(ctx, "k-9", client.ExecRequest{Command: "sleep 1"})
				if err != nil {
					return err
				}
				return expect(a != nil && res == nil && a.Status == "running", "accepted", a)
			}},
		{name: "VM.ExecOutcome", method: "GET", path: vmBase + "/exec/k%2F9", accept: jsonCT,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"}, body: `{"exitCode":3,"stdout":"hi\n","stderr":"","encoding":"utf8","truncated":false,"durationMs":5}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, res, err := c.VM(weirdVM).ExecOutcome(ctx, "k/9")
				if err != nil {
					return err
				}
				return expect(a == nil && res != nil && res.ExitCode == 3 && string(res.Stdout) == "hi\n" && res.Replayed, "result", res)
			}},
		{name: "VM.ExecStream", method: "POST", path: vmBase + "/exec", accept: sseCT, ctype: jsonCT, headers: map[string]string{"Idempotency-Key": "k-3"},
			bodyJSON: `{"command":"echo hi","stdin":""}`, resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).ExecStream(ctx, client.ExecRequest{Command: "echo hi", Stdin: []byte{}}, client.WithIdempotencyKey("k-3"))
				return readOne(ctx, s, err)
			}},
		{name: "VM.Spawn", method: "POST", path: vmBase + "/processes", accept: jsonCT, ctype: jsonCT,
			headers: map[string]string{"Idempotency-Key": "spawn-1"}, bodyJSON: `{"argv":["sleep","10"],"cwd":"/"}`,
			resp: canned{status: 201, ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"}, body: processJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.VM(weirdVM).Spawn(ctx, client.SpawnRequest{Argv: []string{"sleep", "10"}, Cwd: "/"}, client.WithIdempotencyKey("spawn-1"))
				if err != nil {
					return err
				}
				return expect(p.Pid() == 42 && p.Replayed(), "process", p.Pid(), p.Replayed())
			}},
		{name: "VM.Spawn", variant: "fresh", method: "POST", path: vmBase + "/processes", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"command":"sleep 10","env":{"A":"1"}}`, resp: canned{status: 201, ctype: jsonCT, body: processJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.VM(weirdVM).Spawn(ctx, client.SpawnRequest{Command: "sleep 10", Env: map[string]string{"A": "1"}})
				if err != nil {
					return err
				}
				return expect(p.Pid() == 42 && !p.Replayed(), "process", p.Pid(), p.Replayed())
			}},
		{name: "VM.Processes", method: "GET", path: vmBase + "/processes", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + processJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Processes(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].Args[0] == "10", "list", l)
			}},
		{name: "Process.Get", method: "GET", path: processTrail, accept: jsonCT, resp: canned{ctype: jsonCT, body: processJSON},
			call: func(ctx context.Context, c *client.Client) error {
				h := c.VM(weirdVM).Process(42)
				if h.Pid() != 42 || h.Replayed() {
					return expect(false, "handle", h.Pid(), h.Replayed())
				}
				p, err := h.Get(ctx)
				if err != nil {
					return err
				}
				return expect(p.Pid == 42 && p.Command == "sleep" && p.Exit != nil && p.Exit.ExitCode == 3 && p.Exit.Signal == client.SIGTERM && p.ExitedAt != nil, "process", p)
			}},
		{name: "Process.Output", method: "GET", path: processTrail + "/output", accept: sseCT, headers: map[string]string{"Last-Event-ID": "7", "Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Process(42).Output(ctx, client.StreamOptions{LastEventID: "7"})
				return readOne(ctx, s, err)
			}},
		{name: "Process.Follow", method: "GET", path: processTrail + "/output", accept: sseCT, headers: map[string]string{"Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: outputSSE + "id: 8\nevent: exit\ndata: {\"exitCode\":0,\"signal\":null}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				types, err := follow(c.VM(weirdVM).Process(42).Follow(ctx))
				return expect(err == nil && strings.Join(types, " ") == "*client.Output *client.Exit", "events", types, err)
			}},
		{name: "Process.WriteStdin", method: "POST", path: processTrail + "/stdin", accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("\x00\x01bin\n"), resp: canned{ctype: jsonCT, body: `{"written":6}`},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).Process(42).WriteStdin(ctx, []byte("\x00\x01bin\n"))
			}},
		{name: "Process.CloseStdin", method: "POST", path: processTrail + "/stdin/close", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Process(42).CloseStdin(ctx) }},
		{name: "Process.Signal", method: "POST", path: processTrail + "/signal", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"signal":"SIGTERM"}`,
			resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).Process(42).Signal(ctx, client.SIGTERM)
			}},
		{name: "Process.Wait", method: "GET", path: processTrail + "/wait", accept: jsonCT, query: url.Values{"timeoutMs": {"1501"}},
			resp: canned{ctype: jsonCT, body: `{"exitCode":3,"signal":"SIGKILL"}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.VM(weirdVM).Process(42).Wait(ctx, 1500*time.Millisecond+time.Microsecond)
				if err != nil {
					return err
				}
				return expect(st.ExitCode == 3 && st.Signal == client.SIGKILL, "status", st)
			}},
		{name: "Process.Wait", variant: "no timeout", method: "GET", path: processTrail + "/wait", accept: jsonCT, query: url.Values{"timeoutMs": {"0"}},
			resp: canned{ctype: jsonCT, body: `{"exitCode":0}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).Process(42).Wait(ctx, 0)
				return err
			}},
		{name: "VM.OpenShell", method: "POST", path: vmBase + "/shells", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"shell":"bash","cols":100,"rows":30}`,
			resp: canned{status: 201, ctype: jsonCT, body: `{"shellId":"sh 1/x"}`},
			call: func(ctx context.Context, c *client.Client) error {
				sh, err := c.VM(weirdVM).OpenShell(ctx, client.ShellRequest{Shell: "bash", Cols: 100, Rows: 30})
				if err != nil {
					return err
				}
				return expect(sh.ID() == shellID, "shell id", sh.ID())
			}},
		{name: "Shell.Input", method: "POST", path: shBase + "/input", accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("ls\r"), resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).Shell(shellID).Input(ctx, []byte("ls\r"))
			}},
		{name: "Shell.Resize", method: "POST", path: shBase + "/resize", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"cols":120,"rows":40}`, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).Shell(shellID).Resize(ctx, 120, 40)
			}},
		{name: "Shell.Output", method: "GET", path: shBase + "/output", accept: sseCT,
			resp: canned{ctype: sseCT, body: outputSSE},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Shell(shellID).Output(ctx, client.StreamOptions{})
				return readOne(ctx, s, err)
			}},
		{name: "Shell.Follow", method: "GET", path: shBase + "/output", accept: sseCT,
			resp: canned{ctype: sseCT, body: outputSSE + "id: 8\nevent: end\ndata: {\"exitCode\":0,\"signal\":\"SIGHUP\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				var end *client.ShellEnd
				for ev, err := range c.VM(weirdVM).Shell(shellID).Follow(ctx) {
					if err != nil {
						return err
					}
					if e, ok := ev.(*client.ShellEnd); ok {
						end = e
					}
				}
				return expect(end != nil && end.Signal == client.SIGHUP, "end", end)
			}},
		{name: "VM.Shells", method: "GET", path: vmBase + "/shells", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"sh 1/x","shell":"sh","state":"running","cols":80,"rows":24,"startedAt":"2026-01-01T00:00:00Z","answeredQueries":2}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Shells(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].ID == shellID && l[0].State == client.ShellRunning, "shells", l)
			}},
		{name: "Shell.Get", method: "GET", path: shBase, accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"id":"sh 1/x","shell":"bash","state":"exited","cols":120,"rows":40,"startedAt":"2026-01-01T00:00:00Z","exitedAt":"2026-01-01T00:00:09Z","exit":{"exitCode":3}}`},
			call: func(ctx context.Context, c *client.Client) error {
				h := c.VM(weirdVM).Shell(shellID)
				if h.ID() != shellID {
					return expect(false, "handle id", h.ID())
				}
				sh, err := h.Get(ctx)
				if err != nil {
					return err
				}
				return expect(sh.State == client.ShellExited && sh.Exit != nil && sh.Exit.ExitCode == 3 && sh.Cols == 120 && sh.ExitedAt != nil, "shell", sh)
			}},
		{name: "Shell.Close", method: "DELETE", path: shBase, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Shell(shellID).Close(ctx) }},
		{name: "VM.ReadFile", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "text/plain", body: "file content"},
			call: func(ctx context.Context, c *client.Client) error {
				rc, err := c.VM(weirdVM).ReadFile(ctx, guestPath)
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
		{name: "VM.HeadFile", method: "HEAD", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "text/plain; charset=utf-8", header: map[string]string{"Content-Length": "1234", "Last-Modified": "Thu, 02 Jan 2025 03:04:05 GMT", "ETag": `"e1"`}},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.VM(weirdVM).HeadFile(ctx, guestPath)
				if err != nil {
					return err
				}
				return expect(h.Size == 1234 && h.ContentType == "text/plain; charset=utf-8" && !h.IsDir && h.ETag == `"e1"` &&
					h.ModTime.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)), "head", h)
			}},
		{name: "VM.HeadFile", variant: "directory", method: "HEAD", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			resp: canned{ctype: "inode/directory", header: map[string]string{"Content-Length": "4096"}},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.VM(weirdVM).HeadFile(ctx, guestPath)
				if err != nil {
					return err
				}
				return expect(h.IsDir && h.Size == 4096, "head", h)
			}},
		{name: "VM.WriteFile", method: "PUT", path: vmBase + "/files", query: pathQ("mkdirs", "true"), accept: jsonCT, ctype: "application/octet-stream",
			headers: map[string]string{"Content-Length": "7"}, bodyRaw: []byte("payload"),
			resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":7}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).WriteFile(ctx, guestPath, io.MultiReader(strings.NewReader("pay"), strings.NewReader("load")), client.WriteFileOptions{Mkdirs: true, Size: 7})
				if err != nil {
					return err
				}
				return expect(res.Size == 7 && res.Path == "/tmp/x", "result", res)
			}},
		{name: "VM.WriteFile", variant: "chunked", method: "PUT", path: vmBase + "/files", query: pathQ(), accept: jsonCT, ctype: "application/octet-stream",
			bodyRaw: []byte("payload"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":7}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).WriteFile(ctx, guestPath, io.MultiReader(strings.NewReader("payload")), client.WriteFileOptions{})
				return err
			}},
		{name: "VM.WriteFile", variant: "known length", method: "PUT", path: vmBase + "/files", query: pathQ(), accept: jsonCT, ctype: "application/octet-stream",
			headers: map[string]string{"Content-Length": "7"}, bodyRaw: []byte("payload"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":7}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).WriteFile(ctx, guestPath, bytes.NewReader([]byte("payload")), client.WriteFileOptions{})
				return err
			}},
		{name: "VM.ReadFileRange", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=10-13", "If-Range": `"e1"`},
			resp:    canned{status: 206, ctype: "text/plain", header: map[string]string{"Content-Range": "bytes 10-13/100", "ETag": `"e1"`}, body: "abcd"},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.VM(weirdVM).ReadFileRange(ctx, guestPath, client.ReadRangeOptions{Offset: 10, Length: 4, IfRange: `"e1"`})
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
		{name: "VM.ReadFileRange", variant: "suffix", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=-5"},
			resp:    canned{status: 206, ctype: "text/plain", header: map[string]string{"Content-Range": "bytes 95-99/100"}, body: "vwxyz"},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.VM(weirdVM).ReadFileRange(ctx, guestPath, client.ReadRangeOptions{Offset: -5})
				if err != nil {
					return err
				}
				fr.Body.Close()
				return expect(fr.Start == 95 && fr.Length == 5, "range", fr)
			}},
		{name: "VM.ReadFileRange", variant: "from an offset, whole file sent", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=3-"},
			resp:    canned{ctype: "text/plain", body: "whole"},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.VM(weirdVM).ReadFileRange(ctx, guestPath, client.ReadRangeOptions{Offset: 3})
				if err != nil {
					return err
				}
				defer fr.Body.Close()
				b, err := io.ReadAll(fr.Body)
				if err != nil {
					return err
				}
				return expect(string(b) == "whole" && !fr.Partial && fr.Start == 0 && fr.Size == 5, "range", fr)
			}},
		{name: "VM.ReadFileRange", variant: "not modified", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"If-None-Match": `"e1"`}, absent: []string{"Range"},
			resp: canned{status: 304, header: map[string]string{"ETag": `"e1"`}},
			call: func(ctx context.Context, c *client.Client) error {
				fr, err := c.VM(weirdVM).ReadFileRange(ctx, guestPath, client.ReadRangeOptions{IfNoneMatch: `"e1"`})
				if err != nil {
					return err
				}
				return expect(fr.NotModified && fr.Body == nil && fr.ETag == `"e1"`, "not modified", fr)
			}},
		{name: "VM.ReadFileRange", variant: "not satisfiable", method: "GET", path: vmBase + "/files", query: pathQ(), accept: "*/*",
			headers: map[string]string{"Range": "bytes=1000-"},
			resp:    problem(416, "range_not_satisfiable", "the file has 100 bytes"),
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).ReadFileRange(ctx, guestPath, client.ReadRangeOptions{Offset: 1000})
				return expect(client.IsCode(err, client.CodeRangeNotSatisfiable), "error", err)
			}},
		{name: "VM.DownloadArchive", method: "GET", path: vmBase + "/archive", query: pathQ("format", "tar.gz"), accept: "*/*",
			resp: canned{ctype: "application/gzip", body: "gz bytes"},
			call: func(ctx context.Context, c *client.Client) error {
				rc, err := c.VM(weirdVM).DownloadArchive(ctx, guestPath, client.ArchiveOptions{Gzip: true, Mkdirs: true})
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
		{name: "VM.UploadArchive", method: "PUT", path: vmBase + "/archive", query: pathQ("mkdirs", "true"), accept: jsonCT, ctype: "application/x-tar",
			bodyRaw: []byte("tar bytes"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","files":2,"dirs":1,"symlinks":1,"bytes":9}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).UploadArchive(ctx, guestPath, strings.NewReader("tar bytes"), client.ArchiveOptions{Mkdirs: true})
				if err != nil {
					return err
				}
				return expect(*res == client.ArchiveResult{Path: "/tmp/x", Files: 2, Dirs: 1, Symlinks: 1, Bytes: 9}, "result", res)
			}},
		{name: "VM.UploadArchive", variant: "gzip", method: "PUT", path: vmBase + "/archive", query: pathQ("format", "tar.gz"), accept: jsonCT, ctype: "application/gzip",
			bodyRaw: []byte("gz"), resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","files":0,"dirs":0,"symlinks":0,"bytes":0}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).UploadArchive(ctx, guestPath, io.MultiReader(strings.NewReader("gz")), client.ArchiveOptions{Gzip: true})
				return err
			}},
		{name: "VM.DeleteFile", method: "DELETE", path: vmBase + "/files", query: pathQ("recursive", "true"), accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).DeleteFile(ctx, guestPath, client.DeleteFileOptions{Recursive: true})
			}},
		{name: "VM.DeleteFile", variant: "flat", method: "DELETE", path: vmBase + "/files", query: pathQ(), accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error {
				return c.VM(weirdVM).DeleteFile(ctx, guestPath, client.DeleteFileOptions{})
			}},
		{name: "VM.ListDir", method: "GET", path: vmBase + "/dirs", query: pathQ("recursive", "true", "maxDepth", "3"), accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"name":"a","path":"/tmp/a","isDirectory":true,"isSymbolicLink":false,"size":0}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).ListDir(ctx, guestPath, client.ListDirOptions{Recursive: true, MaxDepth: 3})
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].IsDir && l[0].Path == "/tmp/a", "list", l)
			}},
		{name: "VM.ListDir", variant: "flat", method: "GET", path: vmBase + "/dirs", query: pathQ(), accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).ListDir(ctx, guestPath, client.ListDirOptions{})
				return err
			}},
		{name: "VM.Mkdir", method: "POST", path: vmBase + "/dirs", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"path":"/tmp/a b&c=d?e#.txt"}`,
			resp: canned{status: 201, ctype: jsonCT, body: `{"path":"/tmp/a"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Mkdir(ctx, guestPath) }},
		{name: "VM.Move", method: "POST", path: vmBase + "/fs/move", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"from":"/a","to":"/b c"}`,
			resp: canned{ctype: jsonCT, body: `{"from":"/a","to":"/b c"}`},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Move(ctx, "/a", "/b c") }},
		{name: "VM.Stat", method: "GET", path: vmBase + "/fs/stat", query: pathQ(), accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"path":"/tmp/x","size":5,"mode":33188,"isDirectory":false,"isSymbolicLink":false,"mtime":"2025-01-02T03:04:05Z","uid":1,"gid":2}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.VM(weirdVM).Stat(ctx, guestPath)
				if err != nil {
					return err
				}
				return expect(st.Size == 5 && st.Mode == 0o100644 && st.Uid == 1 && st.Gid == 2 && !st.ModTime.IsZero(), "stat", st)
			}},
		{name: "VM.Agents", method: "GET", path: vmBase + "/agents", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"pi","installed":true},{"id":"claude","installed":false}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Agents(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 2 && l[0] == client.Agent{ID: "pi", Installed: true} && l[1] == client.Agent{ID: "claude"}, "agents", l)
			}},
		{name: "VM.Mounts", method: "GET", path: vmBase + "/mounts", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"path":"/mnt/data","driver":"host_dir","hostPath":"/srv/data","readOnly":true},{"path":"/scratch","driver":"memory","readOnly":false}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Mounts(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 2 && l[0] == client.Mount{Path: "/mnt/data", Driver: client.MountHostDir, HostPath: "/srv/data", ReadOnly: true} &&
					l[1] == client.Mount{Path: "/scratch", Driver: client.MountMemory}, "mounts", l)
			}},
		{name: "VM.Mount", method: "POST", path: vmBase + "/mounts", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"path":"/mnt/data","driver":"host_dir","hostPath":"/srv/data","readOnly":false}`,
			resp:     canned{status: 201, ctype: jsonCT, body: `{"path":"/mnt/data","driver":"host_dir","hostPath":"/srv/data","readOnly":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				m, err := c.VM(weirdVM).Mount(ctx, client.MountRequest{Path: "/mnt/data", Driver: client.MountHostDir, HostPath: "/srv/data", ReadOnly: new(false)})
				if err != nil {
					return err
				}
				return expect(*m == client.Mount{Path: "/mnt/data", Driver: client.MountHostDir, HostPath: "/srv/data"}, "mount", m)
			}},
		{name: "VM.Mount", variant: "memory, default readOnly", method: "POST", path: vmBase + "/mounts", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"path":"/scratch","driver":"memory"}`,
			resp:     canned{status: 201, ctype: jsonCT, body: `{"path":"/scratch","driver":"memory","readOnly":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				m, err := c.VM(weirdVM).Mount(ctx, client.MountRequest{Path: "/scratch", Driver: client.MountMemory})
				if err != nil {
					return err
				}
				return expect(m.Driver == client.MountMemory && !m.ReadOnly, "mount", m)
			}},
		{name: "VM.Unmount", method: "DELETE", path: vmBase + "/mounts", query: pathQ(), accept: jsonCT,
			resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Unmount(ctx, guestPath) }},
		{name: "VM.Software", method: "GET", path: vmBase + "/software", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"name":"coreutils","commands":["ls","cat"]},{"name":"pi","commands":["pi","pi-sdk-acp"]}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Software(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 2 && l[0].Name == "coreutils" && strings.Join(l[0].Commands, ",") == "ls,cat" && l[1].Name == "pi", "software", l)
			}},
		{name: "VM.LinkSoftware", method: "POST", path: vmBase + "/software", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"package":"@agentos-software/pi"}`,
			resp:     canned{status: 201, ctype: jsonCT, body: `{"package":"@agentos-software/pi","name":"pi","commands":["pi","pi-sdk-acp"],"agents":["pi"]}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).LinkSoftware(ctx, "@agentos-software/pi")
				if err != nil {
					return err
				}
				return expect(l.Package == "@agentos-software/pi" && l.Name == "pi" && strings.Join(l.Commands, ",") == "pi,pi-sdk-acp" &&
					strings.Join(l.Agents, ",") == "pi", "linked", l)
			}},
		{name: "VM.OpenSession", method: "POST", path: vmBase + "/sessions", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessionId":"fix-flaky-test","agent":"claude","cwd":"/work/repo","env":{"CI":"1"},"additionalDirectories":["/data"],` +
				`"mcpServers":[{"name":"fs","command":"mcp-fs","args":[],"env":[]}],"permissionPolicy":"ask",` +
				`"permissionDefault":{"decision":"allow","timeoutSeconds":300},"additionalInstructions":"Be brief."}`,
			resp: canned{status: 201, ctype: jsonCT, header: map[string]string{"Location": "/v1/vms/" + weirdVMEsc + "/sessions/" + sessionIDEsc},
				body: strings.Replace(sessionJSON, `"state":"waiting"`, `"state":"idle"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).OpenSession(ctx, client.OpenSessionRequest{SessionID: "fix-flaky-test", Agent: "claude", Cwd: "/work/repo",
					Env: map[string]string{"CI": "1"}, AdditionalDirectories: []string{"/data"},
					MCPServers:       json.RawMessage(`[{"name":"fs","command":"mcp-fs","args":[],"env":[]}]`),
					PermissionPolicy: client.PolicyAsk, PermissionDefault: &client.PermissionDefault{Decision: "allow", TimeoutSeconds: 300},
					AdditionalInstructions: "Be brief."})
				if err != nil {
					return err
				}
				return expect(s.ID == sessionID && s.VMID == weirdVM && s.State == client.SessionIdle && s.PermissionPolicy == client.PolicyAsk &&
					s.PermissionDefault != nil && *s.PermissionDefault == client.PermissionDefault{Decision: "allow", TimeoutSeconds: 300}, "session", s)
			}},
		{name: "VM.OpenSession", variant: "minimal", method: "POST", path: vmBase + "/sessions", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"agent":"pi"}`,
			resp: canned{status: 201, ctype: jsonCT, body: idleSessionJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi"})
				if err != nil {
					return err
				}
				return expect(s.Agent == "pi" && s.PermissionDefault == nil && s.AdditionalDirectories != nil && len(s.PendingPermissions) == 0 &&
					s.PermissionPolicy == client.PolicyAllowAll && s.LatestSequence == 0, "session", s)
			}},
		{name: "VM.OpenSession", variant: "permission default timeout rounded up to a second", method: "POST", path: vmBase + "/sessions", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"agent":"pi","permissionPolicy":"reject_all","permissionDefault":{"decision":"reject","timeoutSeconds":2}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: idleSessionJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", PermissionPolicy: client.PolicyRejectAll,
					PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 2}})
				return err
			}},
		{name: "Session.Get", method: "GET", path: sesBase, accept: jsonCT, resp: canned{ctype: jsonCT, body: sessionJSON},
			call: func(ctx context.Context, c *client.Client) error {
				h := c.VM(weirdVM).Session(sessionID)
				if h.ID() != sessionID {
					return expect(false, "handle id", h.ID())
				}
				s, err := h.Get(ctx)
				if err != nil {
					return err
				}
				if err := expect(s.ID == sessionID && s.Agent == "claude" && s.Cwd == "/work/repo" && reflect.DeepEqual(s.AdditionalDirectories, []string{"/data"}) &&
					s.State == client.SessionWaiting && s.LatestSequence == 12 && s.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 5e8, time.UTC)) &&
					s.UpdatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)) && len(s.PendingPermissions) == 1 &&
					s.PermissionDefault != nil && s.PermissionDefault.Timeout() == 5*time.Minute, "session", s); err != nil {
					return err
				}
				p := s.PendingPermissions[0]
				return expect(p.RequestID == requestID && p.Status == "pending" && p.Decision == nil && option(p.Options, "allow_once") == "allow-once" &&
					option(p.Options, "reject_once") == "reject-once" && option(p.Options, "allow_always") == "" && len(options(p.Options)) == 2 && options(p.Options)[0].Name == "Allow once" &&
					string(p.ToolCall) == `{"toolCallId":"tc_1","title":"rm -rf /tmp/x","kind":"execute"}` && !p.AskedAt.IsZero(), "permission", p)
			}},
		{name: "VM.ListSessions", method: "GET", path: vmBase + "/sessions", accept: jsonCT, query: url.Values{"cursor": {"c/1"}, "limit": {"2"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + idleSessionJSON + `,` + sessionJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).ListSessions(ctx, client.ListOptions{Cursor: "c/1", Limit: 2})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 2 && l.NextCursor == "c2" && l.Items[0].State == client.SessionIdle && l.Items[1].State == client.SessionWaiting, "list", l)
			}},
		{name: "VM.ListSessions", variant: "first page", method: "GET", path: vmBase + "/sessions", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).ListSessions(ctx, client.ListOptions{})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 0 && l.NextCursor == "", "list", l)
			}},
		{name: "VM.Sessions", method: "GET", path: vmBase + "/sessions", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[` + idleSessionJSON + `,` + sessionJSON + `]}`},
			call: func(ctx context.Context, c *client.Client) error {
				var states []client.SessionState
				for s, err := range c.VM(weirdVM).Sessions(ctx) {
					if err != nil {
						return err
					}
					states = append(states, s.State)
				}
				return expect(reflect.DeepEqual(states, []client.SessionState{client.SessionIdle, client.SessionWaiting}), "states", states)
			}},
		{name: "VM.CreateSnapshot", method: "POST", path: vmBase + "/snapshots", accept: jsonCT,
			resp: canned{status: 201, ctype: jsonCT, body: snapshotJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).CreateSnapshot(ctx)
				if err != nil {
					return err
				}
				return expect(s.ID == "snap/1" && s.Bytes == 1024 && s.Files == 3 && s.Symlinks == 1, "snapshot", s)
			}},
		{name: "VM.Fork", method: "POST", path: vmBase + "/fork", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"count":3}`,
			resp: canned{status: 201, ctype: jsonCT, body: `{"vms":[` + vmJSON + `,` + vmJSON + `]}`},
			call: func(ctx context.Context, c *client.Client) error {
				vms, err := c.VM(weirdVM).Fork(ctx, 3)
				if err != nil {
					return err
				}
				return expect(len(vms) == 2 && vms[0].ID == "vm_1", "vms", vms)
			}},
		{name: "ListSnapshots", method: "GET", path: "/v1/snapshots", accept: jsonCT, query: url.Values{"vm": {"vm/1"}, "cursor": {"c/1"}, "limit": {"2"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + snapshotJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.ListSnapshots(ctx, client.ListSnapshotsOptions{VM: "vm/1", Cursor: "c/1", Limit: 2})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.NextCursor == "c2", "list", l)
			}},
		{name: "Snapshots", method: "GET", path: "/v1/snapshots", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[` + snapshotJSON + `,` + snapshotJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				n := 0
				for _, err := range c.Snapshots(ctx, client.ListSnapshotsOptions{}) {
					if err != nil {
						return err
					}
					n++
				}
				return expect(n == 2, "count", n)
			}},
		{name: "GetSnapshot", method: "GET", path: "/v1/snapshots/snap%2F1", accept: jsonCT, resp: canned{ctype: jsonCT, body: snapshotJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.GetSnapshot(ctx, "snap/1")
				if err != nil {
					return err
				}
				return expect(s.VMID == "vm/1", "snapshot", s)
			}},
		{name: "DeleteSnapshot", method: "DELETE", path: "/v1/snapshots/snap%2F1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteSnapshot(ctx, "snap/1") }},
		{name: "VM.CreateSchedule", method: "POST", path: vmBase + "/schedules", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"cron":"@every 2s","timezone":"Europe/Paris","overlap":"queue","action":{"exec":{"command":"echo","args":["hi"],"timeoutMs":1500}}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: scheduleJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).CreateSchedule(ctx, client.ScheduleRequest{Cron: "@every 2s", Timezone: "Europe/Paris", Overlap: client.OverlapQueue,
					Exec: &client.ExecRequest{Command: "echo", Args: []string{"hi"}, Timeout: 1500 * time.Millisecond}})
				if err != nil {
					return err
				}
				return expect(s.ID == "sch_1" && s.Action.Exec != nil && s.Action.Exec.TimeoutMs == 1500 && s.Overlap == client.OverlapQueue, "schedule", s)
			}},
		{name: "VM.ListSchedules", method: "GET", path: vmBase + "/schedules", accept: jsonCT, query: url.Values{"cursor": {"c/1"}, "limit": {"2"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + scheduleJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).ListSchedules(ctx, client.ListOptions{Cursor: "c/1", Limit: 2})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.NextCursor == "c2", "list", l)
			}},
		{name: "VM.Schedules", method: "GET", path: vmBase + "/schedules", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[` + scheduleJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				var ids []string
				for s, err := range c.VM(weirdVM).Schedules(ctx) {
					if err != nil {
						return err
					}
					ids = append(ids, s.ID)
				}
				return expect(reflect.DeepEqual(ids, []string{"sch_1"}), "ids", ids)
			}},
		{name: "Schedule.Get", method: "GET", path: vmBase + "/schedules/sch_1", accept: jsonCT, resp: canned{ctype: jsonCT, body: scheduleJSON},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Schedule("sch_1").Get(ctx)
				if err != nil {
					return err
				}
				return expect(s.Cron == "@every 2s" && s.Timezone == "Europe/Paris", "schedule", s)
			}},
		{name: "VM.CreatePreview", method: "POST", path: vmBase + "/previews", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"port":3000,"ttlSeconds":91}`,
			resp:     canned{status: 201, ctype: jsonCT, body: previewJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.VM(weirdVM).CreatePreview(ctx, client.PreviewRequest{Port: 3000, TTL: 90*time.Second + time.Millisecond})
				if err != nil {
					return err
				}
				return expect(p.ID == "pvw_1" && p.Port == 3000 && p.URL == "http://gw/p/pvt_x/" && !p.ExpiresAt.IsZero(), "preview", p)
			}},
		{name: "VM.Previews", method: "GET", path: vmBase + "/previews", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + previewJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Previews(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].ID == "pvw_1", "previews", l)
			}},
		{name: "Preview.Get", method: "GET", path: vmBase + "/previews/pvw_1", accept: jsonCT, resp: canned{ctype: jsonCT, body: previewJSON},
			call: func(ctx context.Context, c *client.Client) error {
				p, err := c.VM(weirdVM).Preview("pvw_1").Get(ctx)
				if err != nil {
					return err
				}
				return expect(p.Port == 3000 && p.VMID == "vm/ 1?#%", "preview", p)
			}},
		{name: "Preview.Delete", method: "DELETE", path: vmBase + "/previews/pvw_1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Preview("pvw_1").Delete(ctx) }},
		{name: "VM.Fetch", method: "PUT", path: vmBase + "/ports/3000/api/a%20b", query: url.Values{"q": {"1 2"}},
			headers: map[string]string{"X-App": "yes"}, ctype: "text/plain", bodyRaw: []byte("payload"),
			resp: canned{status: 418, ctype: "text/plain", body: "teapot"},
			call: func(ctx context.Context, c *client.Client) error {
				req, err := http.NewRequest(http.MethodPut, "http://ignored/api/a%20b?q=1+2", strings.NewReader("payload"))
				if err != nil {
					return err
				}
				req.Header.Set("X-App", "yes")
				req.Header.Set("Content-Type", "text/plain")
				resp, err := c.VM(weirdVM).Fetch(ctx, 3000, req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					return err
				}
				return expect(resp.StatusCode == 418 && string(b) == "teapot", "guest response", resp.Status)
			}},
		{name: "Schedule.Delete", method: "DELETE", path: vmBase + "/schedules/sch_1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Schedule("sch_1").Delete(ctx) }},
		{name: "Schedule.ListRuns", method: "GET", path: vmBase + "/schedules/sch_1/runs", accept: jsonCT, query: url.Values{"limit": {"5"}},
			resp: canned{ctype: jsonCT, body: `{"items":[` + runJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Schedule("sch_1").ListRuns(ctx, client.ListOptions{Limit: 5})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].Outcome == client.RunSucceeded && *l.Items[0].ExitCode == 0 && l.Items[0].Stdout == "hi\n", "runs", l)
			}},
		{name: "Schedule.Runs", method: "GET", path: vmBase + "/schedules/sch_1/runs", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[` + runJSON + `],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				var outcomes []client.RunOutcome
				for r, err := range c.VM(weirdVM).Schedule("sch_1").Runs(ctx) {
					if err != nil {
						return err
					}
					outcomes = append(outcomes, r.Outcome)
				}
				return expect(reflect.DeepEqual(outcomes, []client.RunOutcome{client.RunSucceeded}), "outcomes", outcomes)
			}},
		{name: "Session.Delete", method: "DELETE", path: sesBase, accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.VM(weirdVM).Session(sessionID).Delete(ctx) }},
		{name: "Session.Unload", method: "POST", path: sesBase + "/unload", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: strings.Replace(idleSessionJSON, `"state":"idle"`, `"state":"unloaded"`, 1)},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Session(sessionID).Unload(ctx)
				if err != nil {
					return err
				}
				return expect(s.State == client.SessionUnloaded, "session", s)
			}},
		{name: "Session.Prompt", method: "POST", path: sesBase + "/prompt", accept: jsonCT, ctype: jsonCT, absent: []string{"Prefer"},
			bodyJSON: `{"content":[{"type":"text","text":"Make the tests pass."}],"idempotencyKey":"turn-1"}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"stopReason":"end_turn","message":{"role":"assistant","content":[{"type":"text","text":"done"}]}}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Session(sessionID).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("Make the tests pass."), IdempotencyKey: "turn-1"})
				if err != nil {
					return err
				}
				return expect(res.StopReason == "end_turn" && res.Replayed &&
					string(res.Message) == `{"role":"assistant","content":[{"type":"text","text":"done"}]}`, "result", res)
			}},
		{name: "Session.Prompt", variant: "fresh", method: "POST", path: sesBase + "/prompt", accept: jsonCT, ctype: jsonCT, absent: []string{"Prefer"},
			bodyJSON: `{"content":[{"type":"text","text":"a"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}]}`,
			resp:     canned{ctype: jsonCT, body: `{"stopReason":"cancelled","message":null}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Session(sessionID).Prompt(ctx, client.PromptRequest{
					Content: json.RawMessage(`[{"type":"text","text":"a"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}]`)})
				if err != nil {
					return err
				}
				return expect(res.StopReason == "cancelled" && !res.Replayed && string(res.Message) == "null", "result", res)
			}},
		{name: "Session.PromptAsync", method: "POST", path: sesBase + "/prompt", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Prefer": "respond-async"},
			bodyJSON: `{"content":[{"type":"text","text":"go"}],"idempotencyKey":"turn-2"}`,
			resp: canned{status: 202, ctype: jsonCT, body: `{"status":"accepted"}`,
				header: map[string]string{"Preference-Applied": "respond-async", "Location": "/v1/vms/" + weirdVMEsc + "/sessions/" + sessionIDEsc}},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Session(sessionID).PromptAsync(ctx, client.PromptRequest{Content: client.TextPrompt("go"), IdempotencyKey: "turn-2"})
				if err != nil {
					return err
				}
				return expect(res == nil, "result of an accepted turn", res)
			}},
		{name: "Session.PromptAsync", variant: "replayed", method: "POST", path: sesBase + "/prompt", accept: jsonCT, ctype: jsonCT,
			headers:  map[string]string{"Prefer": "respond-async"},
			bodyJSON: `{"content":[{"type":"text","text":"go"}],"idempotencyKey":"turn-2"}`,
			resp: canned{ctype: jsonCT, header: map[string]string{"Idempotent-Replayed": "true"},
				body: `{"stopReason":"max_tokens","message":{"text":"cut"}}`},
			call: func(ctx context.Context, c *client.Client) error {
				res, err := c.VM(weirdVM).Session(sessionID).PromptAsync(ctx, client.PromptRequest{Content: client.TextPrompt("go"), IdempotencyKey: "turn-2"})
				if err != nil {
					return err
				}
				return expect(res != nil && res.StopReason == "max_tokens" && res.Replayed && string(res.Message) == `{"text":"cut"}`, "result", res)
			}},
		{name: "Session.Cancel", method: "POST", path: sesBase + "/cancel", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"status":"no_active_prompt"}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.VM(weirdVM).Session(sessionID).Cancel(ctx)
				if err != nil {
					return err
				}
				return expect(st == client.NoActivePrompt, "status", st)
			}},
		{name: "Session.Cancel", variant: "cancelled", method: "POST", path: sesBase + "/cancel", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"status":"cancelled"}`},
			call: func(ctx context.Context, c *client.Client) error {
				st, err := c.VM(weirdVM).Session(sessionID).Cancel(ctx)
				if err != nil {
					return err
				}
				return expect(st == client.Cancelled, "status", st)
			}},
		{name: "Session.Permissions", method: "GET", path: sesBase + "/permissions", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + permissionJSON + `,` +
				`{"requestId":"r2","options":null,"toolCall":null,"askedAt":"2025-01-02T03:04:05Z","status":"answered",` +
				`"decision":{"by":"api","keyId":"key_1","optionId":"allow-once","status":"accepted","at":"2025-01-02T03:04:07Z"}}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.VM(weirdVM).Session(sessionID).Permissions(ctx)
				if err != nil {
					return err
				}
				if err := expect(len(l) == 2 && l[0].RequestID == requestID && l[0].Decision == nil, "list", l); err != nil {
					return err
				}
				p := l[1]
				return expect(options(p.Options) == nil && string(p.ToolCall) == "null" && option(p.Options, "allow_once") == "" && p.Decision != nil &&
					*p.Decision == client.PermissionDecision{By: "api", KeyID: "key_1", OptionID: "allow-once", Status: "accepted", At: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC)},
					"permission", p)
			}},
		{name: "Session.AnswerPermission", method: "POST", path: sesBase + "/permissions/" + requestIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"optionId":"allow-once"}`, resp: canned{ctype: jsonCT, body: `{"status":"accepted"}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, err := c.VM(weirdVM).Session(sessionID).AnswerPermission(ctx, requestID, "allow-once")
				if err != nil {
					return err
				}
				return expect(*a == client.PermissionAnswer{Status: "accepted"}, "answer", a)
			}},
		{name: "Session.AnswerPermission", variant: "not pending", method: "POST", path: sesBase + "/permissions/" + requestIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"optionId":"reject-once"}`, resp: canned{ctype: jsonCT, body: `{"status":"not_pending","reason":"already_resolved"}`},
			call: func(ctx context.Context, c *client.Client) error {
				a, err := c.VM(weirdVM).Session(sessionID).AnswerPermission(ctx, requestID, "reject-once")
				if err != nil {
					return err
				}
				return expect(a.Status == "not_pending" && a.Reason == "already_resolved", "answer", a)
			}},
		{name: "Session.Config", method: "GET", path: sesBase + "/config", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"revision":3,"options":[{"id":"model","name":"Model","type":"select","currentValue":"a"}]}`},
			call: func(ctx context.Context, c *client.Client) error {
				cfg, err := c.VM(weirdVM).Session(sessionID).Config(ctx)
				if err != nil {
					return err
				}
				return expect(cfg.Revision == 3 && string(cfg.Options) == `[{"id":"model","name":"Model","type":"select","currentValue":"a"}]`, "config", cfg)
			}},
		{name: "Session.SetConfig", method: "PUT", path: sesBase + "/config/model%2Fx", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"value":"claude-sonnet-4-5"}`, resp: canned{ctype: jsonCT, body: `{"revision":4,"options":null}`},
			call: func(ctx context.Context, c *client.Client) error {
				cfg, err := c.VM(weirdVM).Session(sessionID).SetConfig(ctx, "model/x", "claude-sonnet-4-5")
				if err != nil {
					return err
				}
				return expect(cfg.Revision == 4 && string(cfg.Options) == "null", "config", cfg)
			}},
		{name: "Session.SetConfig", variant: "JSON value", method: "PUT", path: sesBase + "/config/effort", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"value":{"level":2,"fast":true}}`, resp: canned{ctype: jsonCT, body: `{"revision":5,"options":[]}`},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.VM(weirdVM).Session(sessionID).SetConfig(ctx, "effort", json.RawMessage(`{"level":2,"fast":true}`))
				return err
			}},
		{name: "Session.Capabilities", method: "GET", path: sesBase + "/capabilities", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"loadSession":true,"promptCapabilities":{"image":true}}` + "\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.VM(weirdVM).Session(sessionID).Capabilities(ctx)
				if err != nil {
					return err
				}
				return expect(string(raw) == `{"loadSession":true,"promptCapabilities":{"image":true}}`, "capabilities", string(raw))
			}},
		{name: "Session.Capabilities", variant: "null", method: "GET", path: sesBase + "/capabilities", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: "null\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.VM(weirdVM).Session(sessionID).Capabilities(ctx)
				if err != nil {
					return err
				}
				return expect(string(raw) == "null", "capabilities", string(raw))
			}},
		{name: "Session.AgentInfo", method: "GET", path: sesBase + "/agent-info", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"name":"pi","version":"1.2.3"}` + "\n"},
			call: func(ctx context.Context, c *client.Client) error {
				raw, err := c.VM(weirdVM).Session(sessionID).AgentInfo(ctx)
				if err != nil {
					return err
				}
				var info struct{ Name, Version string }
				if err := json.Unmarshal(raw, &info); err != nil {
					return err
				}
				return expect(info.Name == "pi" && info.Version == "1.2.3", "agent info", string(raw))
			}},
		{name: "Session.History", method: "GET", path: sesBase + "/history", accept: jsonCT,
			query: url.Values{"after": {"5"}, "before": {"9"}, "limit": {"3"}},
			resp:  canned{ctype: jsonCT, body: `{"events":[` + durableChunkJSON + `,` + durableAskJSON + `,` + durableReplyJSON + `],"hasMoreBefore":true,"hasMoreAfter":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.VM(weirdVM).Session(sessionID).History(ctx, client.HistoryQuery{After: 5, Before: 9, Limit: 3})
				if err != nil {
					return err
				}
				if err := expect(len(h.Events) == 3 && h.HasMoreBefore && !h.HasMoreAfter, "history", h); err != nil {
					return err
				}
				chunk, ask, reply := h.Events[0], h.Events[1], h.Events[2]
				return expect(chunk.Sequence == 6 && chunk.Type == "agent_message_chunk" && chunk.Timestamp.Equal(time.Date(2025, 1, 2, 3, 4, 5, 25e7, time.UTC)) &&
					string(chunk.Update) == `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}` &&
					ask.Type == "permission_request" && ask.RequestID == requestID && len(options(ask.Options)) == 1 && options(ask.Options)[0].Kind == "allow_once" &&
					string(ask.ToolCall) == `{"toolCallId":"tc_1"}` && ask.Decision == nil &&
					reply.Type == "permission_response" && reply.Status == "accepted" && reply.Decision != nil && reply.Decision.By == "timeout" &&
					reply.Decision.OptionID == "allow-once" && string(reply.Response) == `{"outcome":{"outcome":"selected","optionId":"allow-once"}}`, "events", h.Events)
			}},
		{name: "Session.History", variant: "from the start", method: "GET", path: sesBase + "/history", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"events":[],"hasMoreBefore":false,"hasMoreAfter":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.VM(weirdVM).Session(sessionID).History(ctx, client.HistoryQuery{})
				if err != nil {
					return err
				}
				return expect(len(h.Events) == 0 && !h.HasMoreBefore && !h.HasMoreAfter, "history", h)
			}},
		{name: "Session.History", variant: "backwards", method: "GET", path: sesBase + "/history", accept: jsonCT, query: url.Values{"before": {"100"}},
			resp: canned{ctype: jsonCT, body: `{"events":[` + durableReplyJSON + `],"hasMoreBefore":true,"hasMoreAfter":true}`},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.VM(weirdVM).Session(sessionID).History(ctx, client.HistoryQuery{Before: 100})
				if err != nil {
					return err
				}
				return expect(len(h.Events) == 1 && h.Events[0].Sequence == 8 && h.HasMoreAfter, "history", h)
			}},
		{name: "Session.Events", method: "GET", path: sesBase + "/events", accept: sseCT,
			headers: map[string]string{"Last-Event-ID": "5", "Cache-Control": "no-cache"},
			resp: canned{ctype: sseCT, body: "id: 6\nevent: durable\ndata: " + durableChunkJSON + "\n\n" +
				": heartbeat\n\n" +
				"id: 6\nevent: ephemeral\ndata: {\"afterSequence\":6,\"type\":\"agent_message_chunk\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"h\"}}}\n\n" +
				"id: 6\nevent: agent_stderr\ndata: {\"agentType\":\"pi\",\"processId\":\"p1\",\"text\":\"warn\\n\"}\n\n" +
				"id: 7\nevent: durable\ndata: " + durableAskJSON + "\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Session(sessionID).Events(ctx, client.StreamOptions{LastEventID: "5"})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				d, ok := ev.(*client.SessionEvent)
				if err := expect(ok && s.LastEventID() == "6" && d.Sequence == 6 && d.Type == "agent_message_chunk" && len(d.Update) > 0, "durable", ev); err != nil {
					return err
				}
				if ev, err = s.Next(ctx); err != nil {
					return err
				}
				e, ok := ev.(*client.EphemeralEvent)
				if err := expect(ok && s.LastEventID() == "6" && e.AfterSequence == 6 && e.Type == "agent_message_chunk" &&
					string(e.Update) == `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"h"}}`, "ephemeral", ev); err != nil {
					return err
				}
				if ev, err = s.Next(ctx); err != nil {
					return err
				}
				st, ok := ev.(*client.AgentStderr)
				if err := expect(ok && s.LastEventID() == "6" && *st == client.AgentStderr{AgentType: "pi", ProcessID: "p1", Text: "warn\n"}, "stderr", ev); err != nil {
					return err
				}
				if ev, err = s.Next(ctx); err != nil {
					return err
				}
				d, ok = ev.(*client.SessionEvent)
				return expect(ok && s.LastEventID() == "7" && d.Sequence == 7 && d.RequestID == requestID, "durable", ev)
			}},
		{name: "Session.Events", variant: "from the start", method: "GET", path: sesBase + "/events", accept: sseCT,
			resp: canned{ctype: sseCT, body: "id: \nevent: end\ndata: {\"state\":\"deleted\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				s, err := c.VM(weirdVM).Session(sessionID).Events(ctx, client.StreamOptions{})
				if err != nil {
					return err
				}
				defer s.Close()
				ev, err := s.Next(ctx)
				if err != nil {
					return err
				}
				end, ok := ev.(*client.SessionEnd)
				if err := expect(ok && end.State == client.SessionDeleted && s.LastEventID() == "", "end", ev); err != nil {
					return err
				}
				_, err = s.Next(ctx)
				return expect(err == io.EOF, "after the final event", err)
			}},
		{name: "Session.Follow", method: "GET", path: sesBase + "/events", accept: sseCT,
			resp: canned{ctype: sseCT, body: "id: 6\nevent: durable\ndata: " + durableChunkJSON + "\n\n" + "id: 6\nevent: end\ndata: {\"state\":\"closed\"}\n\n"},
			call: func(ctx context.Context, c *client.Client) error {
				types, err := follow(c.VM(weirdVM).Session(sessionID).Follow(ctx))
				return expect(err == nil && strings.Join(types, " ") == "*gateway.SessionEventData *gateway.SessionEndEvent", "events", types, err)
			}},
		{name: "CreateTenant", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"name":"acme","isolated":true,"quotas":{"maxVms":2,"maxProcesses":0,"requestsPerSecond":1.5,"maxSchedules":0,"maxSnapshotBytes":0}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.CreateTenant(ctx, client.TenantCreate{Name: "acme", Isolated: true, Quotas: &client.Quotas{MaxVMs: 2, RequestsPerSecond: 1.5}})
				if err != nil {
					return err
				}
				return expect(t.ID == tenantID && t.Quotas.MaxVMs == 2 && t.Quotas.RequestsPerSecond == 1.5, "tenant", t)
			}},
		{name: "CreateTenant", variant: "sessions", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"name":"acme","sessions":{"retentionDays":7,"permissionDefault":{"decision":"reject","timeoutSeconds":60}}}`,
			resp:     canned{status: 201, ctype: jsonCT, body: tenantSessionsJSON},
			call: func(ctx context.Context, c *client.Client) error {
				t, err := c.CreateTenant(ctx, client.TenantCreate{Name: "acme", Sessions: &client.SessionSettingsUpdate{
					Retention: client.Ptr(7 * day), PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.Retention() == 7*day && t.Sessions.PermissionDefault != nil && t.Sessions.PermissionDefault.Decision == "reject", "tenant", t)
			}},
		{name: "CreateTenant", variant: "defaults", method: "POST", path: "/v1/tenants", accept: jsonCT, ctype: jsonCT, bodyJSON: `{"name":"solo"}`,
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
		{name: "Tenants", method: "GET", path: "/v1/tenants", accept: jsonCT, query: url.Values{},
			resp: canned{ctype: jsonCT, body: `{"items":[` + tenantJSON + `]}`},
			call: func(ctx context.Context, c *client.Client) error {
				var ids []string
				for t, err := range c.Tenants(ctx) {
					if err != nil {
						return err
					}
					ids = append(ids, t.ID)
				}
				return expect(len(ids) == 1 && ids[0] == tenantID, "tenants", ids)
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
		{name: "UpdateTenant", variant: "sessions", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"retentionDays":7,"permissionDefault":{"decision":"reject","timeoutSeconds":60}}}`,
			resp:     canned{ctype: jsonCT, body: tenantSessionsJSON},
			call: func(ctx context.Context, c *client.Client) error {
				// A retention is rounded up to whole days.
				t, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
					Retention: client.Ptr(6*day + time.Hour), PermissionDefault: &client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.Retention() == 7*day && t.Sessions.PermissionDefault != nil &&
					*t.Sessions.PermissionDefault == client.PermissionDefault{Decision: "reject", TimeoutSeconds: 60}, "tenant", t)
			}},
		{name: "UpdateTenant", variant: "clear permission default", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"permissionDefault":null}}`, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				// Clearing wins over a PermissionDefault set alongside.
				t, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{
					ClearPermissionDefault: true, PermissionDefault: &client.PermissionDefault{Decision: "allow", TimeoutSeconds: 1}}})
				if err != nil {
					return err
				}
				return expect(t.Sessions.Retention() == 0 && t.Sessions.PermissionDefault == nil, "tenant", t)
			}},
		{name: "UpdateTenant", variant: "retention zero", method: "PATCH", path: "/v1/tenants/" + tenantIDEsc, accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"sessions":{"retentionDays":0}}`, resp: canned{ctype: jsonCT, body: tenantJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.UpdateTenant(ctx, tenantID, client.TenantUpdate{Sessions: &client.SessionSettingsUpdate{Retention: client.Ptr(time.Duration(0))}})
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
		{name: "Keys", method: "GET", path: "/v1/tenants/" + tenantIDEsc + "/keys", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"k1","tenantId":"t/1","prefix":"agw_abc","createdAt":"2025-01-02T03:04:05Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Keys(ctx, tenantID)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].Key == "" && l[0].Prefix == "agw_abc", "keys", l)
			}},
		{name: "DeleteKey", method: "DELETE", path: "/v1/tenants/" + tenantIDEsc + "/keys/k%2F1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteKey(ctx, tenantID, "k/1") }},
		{name: "CreateToken", method: "POST", path: "/v1/tokens", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"scopes":["vm:read","shells"],"vm":"vm_1","ttlSeconds":900,"origins":["https://app.example.com"]}`,
			resp:     canned{status: 201, ctype: jsonCT, body: `{"id":"tok_1","scopes":["vm:read","shells"],"vm":"vm_1","origins":["https://app.example.com"],"createdAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z","token":"agt_secret"}`},
			call: func(ctx context.Context, c *client.Client) error {
				tok, err := c.CreateToken(ctx, client.TokenRequest{Scopes: []string{client.ScopeVMRead, client.ScopeShells}, VM: "vm_1", TTL: 900 * time.Second, Origins: []string{"https://app.example.com"}})
				if err != nil {
					return err
				}
				return expect(tok.Secret == "agt_secret" && tok.ID == "tok_1" && tok.VM == "vm_1" && len(tok.Scopes) == 2 && tok.ExpiresAt.Minute() == 19, "token", tok)
			}},
		{name: "Tokens", method: "GET", path: "/v1/tokens", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"tok_1","scopes":["exec"],"origins":[],"createdAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Tokens(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].ID == "tok_1" && l[0].Scopes[0] == "exec", "tokens", l)
			}},
		{name: "Audit", method: "GET", path: "/v1/audit", query: url.Values{"after": {"2025-01-02T03:04:05Z"}, "cursor": {"7"}, "limit": {"2"}, "tenant": {"t1"}, "vm": {"vm_1"}}, accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":8,"at":"2025-01-02T03:04:06Z","tenant":"t1","key":"key_1","method":"POST","route":"/v1/vms/{vm}/exec","vm":"vm_1","status":200}],"nextCursor":"8"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Audit(ctx, client.AuditOptions{VM: "vm_1", Tenant: "t1", After: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), ListOptions: client.ListOptions{Limit: 2, Cursor: "7"}})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].ID == 8 && l.Items[0].Route == "/v1/vms/{vm}/exec" && l.NextCursor == "8", "audit", l)
			}},
		{name: "CreateWebhook", method: "POST", path: "/v1/webhooks", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"url":"https://hooks.example.com/a","events":["process.exit","exec.done"],"vm":"vm_1","description":"backend"}`,
			resp:     canned{status: 201, ctype: jsonCT, body: webhookJSON},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: "https://hooks.example.com/a", Events: []string{client.EventProcessExit, client.EventExecDone}, VM: "vm_1", Description: "backend"})
				if err != nil {
					return err
				}
				return expect(h.ID == "whk_1" && h.State == "active" && len(h.Events) == 2, "webhook", h)
			}},
		{name: "Webhooks", method: "GET", path: "/v1/webhooks", query: url.Values{"limit": {"5"}}, accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + webhookJSON + `],"nextCursor":"c2"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Webhooks(ctx, client.ListOptions{Limit: 5})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].URL == "https://hooks.example.com/a" && l.NextCursor == "c2", "webhooks", l)
			}},
		{name: "Webhook", method: "GET", path: "/v1/webhooks/whk%2F1", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: webhookJSON},
			call: func(ctx context.Context, c *client.Client) error {
				h, err := c.Webhook(ctx, "whk/1")
				if err != nil {
					return err
				}
				return expect(h.VM == "vm_1", "webhook", h)
			}},
		{name: "UpdateWebhook", method: "PATCH", path: "/v1/webhooks/whk_1", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"events":["*"],"enabled":true}`,
			resp:     canned{ctype: jsonCT, body: webhookJSON},
			call: func(ctx context.Context, c *client.Client) error {
				_, err := c.UpdateWebhook(ctx, "whk_1", client.WebhookUpdate{Events: []string{client.EventAll}, Enabled: client.Ptr(true)})
				return err
			}},
		{name: "DeleteWebhook", method: "DELETE", path: "/v1/webhooks/whk_1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.DeleteWebhook(ctx, "whk_1") }},
		{name: "Deliveries", method: "GET", path: "/v1/webhooks/whk_1/deliveries", query: url.Values{"status": {"failed"}, "after": {"2025-01-02T03:04:05Z"}, "cursor": {"3"}}, accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[` + deliveryJSON + `],"nextCursor":"4"}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Deliveries(ctx, "whk_1", client.DeliveryOptions{Status: "failed", After: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), ListOptions: client.ListOptions{Cursor: "3"}})
				if err != nil {
					return err
				}
				return expect(len(l.Items) == 1 && l.Items[0].Attempts == 3 && l.Items[0].LastStatus == 500, "deliveries", l)
			}},
		{name: "Redeliver", method: "POST", path: "/v1/webhooks/whk_1/deliveries/dlv_1/redeliver", accept: jsonCT,
			resp: canned{status: 202, ctype: jsonCT, body: deliveryJSON},
			call: func(ctx context.Context, c *client.Client) error {
				d, err := c.Redeliver(ctx, "whk_1", "dlv_1")
				if err != nil {
					return err
				}
				return expect(d.ID == "dlv_1", "delivery", d)
			}},
		{name: "RevokeToken", method: "DELETE", path: "/v1/tokens/tok%2F1", accept: jsonCT, resp: canned{status: 204},
			call: func(ctx context.Context, c *client.Client) error { return c.RevokeToken(ctx, "tok/1") }},
		{name: "Sidecars", method: "GET", path: "/v1/sidecars", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"items":[{"id":"sc_1","pid":99,"state":"ready","vmCount":2,"tenants":["default"],"isolated":false,"rssBytes":1024,"restarts":1,"startedAt":"2025-01-02T03:04:05Z"}],"nextCursor":""}`},
			call: func(ctx context.Context, c *client.Client) error {
				l, err := c.Sidecars(ctx)
				if err != nil {
					return err
				}
				return expect(len(l) == 1 && l[0].Pid == 99 && l[0].VMCount == 2 && l[0].RSSBytes == 1024, "sidecars", l)
			}},
		{name: "VM.Bindings", method: "GET", path: vmBase + "/bindings", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: bindingsJSON},
			call: func(ctx context.Context, c *client.Client) error {
				b, err := c.VM(weirdVM).Bindings(ctx)
				if err != nil {
					return err
				}
				return expect(len(b.Collections) == 1 && b.Collections[0].Bindings[0].TimeoutMs == 5000 && b.PermissionWebhookURL == "https://hooks.example.com/p", "bindings", b)
			}},
		{name: "VM.PutBindings", method: "PUT", path: vmBase + "/bindings", accept: jsonCT, ctype: jsonCT,
			bodyJSON: `{"collections":[]}`,
			resp:     canned{ctype: jsonCT, body: `{"collections":[]}`},
			call: func(ctx context.Context, c *client.Client) error {
				b, err := c.VM(weirdVM).PutBindings(ctx, client.Bindings{})
				if err != nil {
					return err
				}
				return expect(b.Collections != nil && len(b.Collections) == 0 && b.PermissionWebhookURL == "", "bindings", b)
			}},
		{name: "WebhookSecret", method: "GET", path: "/v1/webhook-secret", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"secret":"whsec_ab","signatureHeader":"Agentos-Webhook-Signature","timestampHeader":"Agentos-Webhook-Timestamp"}`},
			call: func(ctx context.Context, c *client.Client) error {
				w, err := c.WebhookSecret(ctx)
				if err != nil {
					return err
				}
				return expect(w.Secret == "whsec_ab" && w.SignatureHeader == client.WebhookSignatureHeader && w.TimestampHeader == client.WebhookTimestampHeader, "secret", w)
			}},
		{name: "Me", method: "GET", path: "/v1/me", accept: jsonCT,
			resp: canned{ctype: jsonCT, body: `{"tenant":{"id":"acme","name":"Acme","isolated":false,"quotas":{"maxVms":2,"maxProcesses":0,"requestsPerSecond":0},"sessions":{"retentionDays":30},"createdAt":"2025-01-02T03:04:05Z","updatedAt":"2025-01-02T03:04:05Z"},"keyId":"key_1","admin":false}`},
			call: func(ctx context.Context, c *client.Client) error {
				me, err := c.Me(ctx)
				if err != nil {
					return err
				}
				return expect(me.Tenant.Name == "Acme" && me.Tenant.Quotas.MaxVMs == 2 && me.KeyID == "key_1" && !me.Admin, "me", me)
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
	// A base URL with a trailing slash is kept.
	c := newClient(t, srv.URL+"/", client.WithUserAgent(userAgent))

	for _, tc := range methodCases() {
		t.Run(tc.name+"/"+tc.variant, func(t *testing.T) {
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
			for _, k := range []string{"Idempotency-Key", "Last-Event-ID", "X-Request-ID", "Range", "If-Range", "If-None-Match", "Prefer"} {
				if tc.headers[k] == "" {
					tc.absent = append(tc.absent, k)
				}
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
}

// TestBaseURLPrefix checks that a base URL's path prefix is kept.
func TestBaseURLPrefix(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(http.StripPrefix("/gw", rec))
	defer srv.Close()
	for _, base := range []string{srv.URL + "/gw", srv.URL + "/gw/"} {
		c := newClient(t, base)
		if c.BaseURL() != srv.URL+"/gw" {
			t.Fatalf("BaseURL %q", c.BaseURL())
		}
		rec.reset(canned{ctype: jsonCT, body: vmJSON})
		if _, err := c.VM(weirdVM).Get(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := rec.requests(); len(got) != 1 || got[0].EscapedPath != "/v1/vms/"+weirdVMEsc {
			t.Fatalf("prefixed call: %+v", got)
		}
	}
}

// bindingsJSON is a VM's bindings as the gateway answers them.
const bindingsJSON = `{"collections":[{"name":"weather","description":"Weather","bindings":[{"name":"get","description":"A forecast",` +
	`"inputSchema":{"type":"object"},"examples":[{"description":"Paris","input":{"city":"Paris"}}],"timeoutMs":5000,"webhookUrl":"https://hooks.example.com/w"}]}],` +
	`"permissionWebhookUrl":"https://hooks.example.com/p"}`

// TestMethodsWireCoversEveryMethod keeps the table above complete: every
// method of the Client and of its handles that makes a call has a case.
func TestMethodsWireCoversEveryMethod(t *testing.T) {
	// Accessors and handle constructors make no call.
	noCall := map[string]bool{"BaseURL": true, "VM": true, "VM.ID": true, "VM.Process": true, "VM.Shell": true, "VM.Session": true, "VM.Schedule": true, "Schedule.ID": true,
		"VM.Preview": true, "Preview.ID": true, "VM.PortURL": true,
		"Process.Pid": true, "Process.Replayed": true, "Shell.ID": true, "Session.ID": true}
	have := map[string]bool{}
	for _, tc := range methodCases() {
		have[tc.name] = true
	}
	for prefix, v := range map[string]any{"": &client.Client{}, "VM.": &client.VMHandle{}, "Process.": &client.ProcessHandle{},
		"Shell.": &client.ShellHandle{}, "Session.": &client.SessionHandle{}, "Schedule.": &client.ScheduleHandle{},
		"Preview.": &client.PreviewHandle{}} {
		typ := reflect.TypeOf(v)
		if typ.NumMethod() < 3 {
			t.Fatalf("%s has %d methods", typ, typ.NumMethod())
		}
		for i := range typ.NumMethod() {
			name := prefix + typ.Method(i).Name
			if !noCall[name] && !have[name] {
				t.Errorf("method %s (%s) has no wire test case", name, typ)
			}
			delete(have, name)
		}
	}
	for name := range have {
		t.Errorf("wire test case %s names no method", name)
	}
}

func TestNoAPIKeySendsNoAuthorization(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	rec.reset(canned{ctype: jsonCT, body: `{"status":"ok"}`})
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil {
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
	if err := newClient(t, srv.URL, client.WithHTTPClient(hc), client.WithHTTPClient(nil)).Health(context.Background()); err != nil {
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
	if _, err := newClient(t, srv.URL).VM("vm").WriteFile(context.Background(), "/x", r, client.WriteFileOptions{}); err != nil {
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
	_, err := newClient(t, srv.URL).VM("vm").Process(1).Output(context.Background(), client.StreamOptions{})
	if !errors.Is(err, client.ErrNotEventStream) {
		t.Fatalf("err %v, want ErrNotEventStream", err)
	}
}
