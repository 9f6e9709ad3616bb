package agentmcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tools against a gateway that answers as the real one does on the
// wire (its problem documents and event streams), so that each mapping of
// an answer to a tool result is checked; the real gateway, with the
// official TypeScript client, is cmd/agentos's TestMCPOfficialClient.

// problem answers a problem document as the gateway writes it.
func problem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

// sse writes events, flushing each, with a pause between them.
func sse(w http.ResponseWriter, pause time.Duration, events ...[2]string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i, ev := range events {
		if i > 0 {
			time.Sleep(pause)
		}
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", i+1, ev[0], ev[1])
		w.(http.Flusher).Flush()
	}
}

func output(stream, text string, seq int) [2]string {
	return [2]string{stream, fmt.Sprintf(`{"seq":%d,"stream":%q,"data":%q,"encoding":"utf8","ts":"2026-01-01T00:00:00Z"}`, seq, stream, text)}
}

// fakeGateway is the gateway's wire for the routes the tests call.
func fakeGateway(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/vms/vm_1/exec", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "text/event-stream" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"exitCode":0,"stdout":"hi\n","stderr":"","encoding":"utf8","durationMs":3,"truncated":false}`))
			return
		}
		sse(w, 20*time.Millisecond, output("stdout", "one\n", 1), output("stderr", "two\n", 2), output("stdout", "three\n", 3),
			[2]string{"exit", `{"exitCode":4,"signal":null,"durationMs":60,"truncated":false}`})
	})
	mux.HandleFunc("POST /v1/vms/vm_lost/exec", func(w http.ResponseWriter, r *http.Request) {
		sse(w, 0, output("stdout", "partial\n", 1), [2]string{"error", `{"code":"conflict","detail":"vm vm_lost was lost while the command ran"}`})
	})
	mux.HandleFunc("POST /v1/vms/vm_ro/exec", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusForbidden, "permission_denied", "token tok_1 lacks the scope exec")
	})
	mux.HandleFunc("GET /v1/vms/vm_1/files", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "/text":
			_, _ = w.Write([]byte("hello\n"))
		case "/binary":
			_, _ = w.Write([]byte{0xff, 0x00, 0xfe})
		case "/big":
			_, _ = w.Write(make([]byte, maxReadFile+1))
		default:
			problem(w, http.StatusNotFound, "not_found", "path "+r.URL.Query().Get("path")+" does not exist")
		}
	})
	mux.HandleFunc("GET /v1/vms/vm_1/processes/7/output", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") == "1" {
			sse(w, 0, output("stdout", "second\n", 2), [2]string{"exit", `{"exitCode":0,"signal":null}`})
			return
		}
		sse(w, 0, output("stdout", "first\n", 1), output("stdout", "second\n", 2), [2]string{"exit", `{"exitCode":0,"signal":null}`})
	})
	mux.HandleFunc("GET /v1/vms/vm_1/processes/8/output", func(w http.ResponseWriter, r *http.Request) {
		// A process that runs on: its output so far, then nothing.
		sse(w, 0, output("stdout", "serving\n", 1))
		<-r.Context().Done()
	})
	mux.HandleFunc("GET /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":[{"id":"vm_1","state":"ready","labels":{"a":"b"},"idleTimeoutSeconds":0,"createdAt":"2026-01-01T00:00:00Z"}],"nextCursor":""}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// session connects an MCP client, through in-memory transports, to the
// tools over a client of the fake gateway; progress notifications are
// gathered in the returned func's answer.
func session(t *testing.T) (*mcp.ClientSession, func() []*mcp.ProgressNotificationParams) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := client.New(fakeGateway(t).URL, "agk_test")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var progress []*mcp.ProgressNotificationParams
	mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params)
		},
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewServer(c, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mc.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs, func() []*mcp.ProgressNotificationParams {
		mu.Lock()
		defer mu.Unlock()
		return append([]*mcp.ProgressNotificationParams(nil), progress...)
	}
}

func TestTools(t *testing.T) {
	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		progress bool
		// wantError is the text of a tool error; else want are fields
		// of the structured result.
		wantError string
		want      map[string]any
	}{
		{name: "exec buffered", tool: "exec", args: map[string]any{"vm": "vm_1", "command": "echo hi"},
			want: map[string]any{"exitCode": 0.0, "stdout": "hi\n", "stderr": ""}},
		{name: "exec streamed, as progress", tool: "exec", args: map[string]any{"vm": "vm_1", "command": "x"}, progress: true,
			want: map[string]any{"exitCode": 4.0, "stdout": "one\nthree\n", "stderr": "two\n", "durationMs": 60.0}},
		{name: "a refusal is the gateway's sentence", tool: "exec", args: map[string]any{"vm": "vm_ro", "command": "echo hi"},
			wantError: "token tok_1 lacks the scope exec"},
		{name: "a stream's final error is the gateway's sentence", tool: "exec", args: map[string]any{"vm": "vm_lost", "command": "x"}, progress: true,
			wantError: "vm vm_lost was lost while the command ran"},
		{name: "a text file", tool: "read_file", args: map[string]any{"vm": "vm_1", "path": "/text"},
			want: map[string]any{"content": "hello\n", "encoding": "utf-8", "size": 6.0}},
		{name: "a binary file in base64", tool: "read_file", args: map[string]any{"vm": "vm_1", "path": "/binary"},
			want: map[string]any{"content": "/wD+", "encoding": "base64", "size": 3.0}},
		{name: "a file too large", tool: "read_file", args: map[string]any{"vm": "vm_1", "path": "/big"},
			wantError: "/big is larger than read_file's 1048576 bytes; read a part with exec (head, tail, sed -n)"},
		{name: "a missing file", tool: "read_file", args: map[string]any{"vm": "vm_1", "path": "/nope"},
			wantError: "path /nope does not exist"},
		{name: "a bad encoding is refused before the gateway", tool: "write_file", args: map[string]any{"vm": "vm_1", "path": "/x", "content": "x", "encoding": "rot13"},
			wantError: `encoding "rot13" is neither utf-8 nor base64`},
		{name: "an exited process's log", tool: "read_process_log", args: map[string]any{"vm": "vm_1", "pid": 7},
			want: map[string]any{"stdout": "first\nsecond\n", "running": false, "exitCode": 0.0, "next": "3"}},
		{name: "a process's log after a cursor", tool: "read_process_log", args: map[string]any{"vm": "vm_1", "pid": 7, "after": "1"},
			want: map[string]any{"stdout": "second\n", "running": false}},
		{name: "a running process's log ends with the wait", tool: "read_process_log", args: map[string]any{"vm": "vm_1", "pid": 8, "waitSeconds": 1},
			want: map[string]any{"stdout": "serving\n", "running": true, "next": "1"}},
		{name: "list_vms", tool: "list_vms", args: map[string]any{},
			want: map[string]any{"vms": []any{map[string]any{"id": "vm_1", "state": "ready", "labels": map[string]any{"a": "b"}, "idleTimeoutSeconds": 0.0, "createdAt": "2026-01-01T00:00:00Z"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs, progress := session(t)
			params := &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args}
			if tt.progress {
				params.SetProgressToken("p1")
			}
			res, err := cs.CallTool(t.Context(), params)
			if err != nil {
				t.Fatalf("protocol error: %v", err)
			}
			if tt.wantError != "" {
				if !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != tt.wantError {
					t.Fatalf("got %+v, want the tool error %q", res, tt.wantError)
				}
				return
			}
			if res.IsError {
				t.Fatalf("tool error: %v", res.Content[0].(*mcp.TextContent).Text)
			}
			b, _ := json.Marshal(res.StructuredContent)
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if g, _ := json.Marshal(got[k]); string(g) != mustJSON(v) {
					t.Errorf("%s = %s, want %s", k, g, mustJSON(v))
				}
			}
			if tt.tool == "exec" && tt.progress {
				checkProgress(t, progress())
			}
		})
	}
}

// checkProgress: a notification as the command starts, then one per
// chunk, in order, carrying the output, with a progress that grows.
func checkProgress(t *testing.T, got []*mcp.ProgressNotificationParams) {
	t.Helper()
	want := []string{"started", "stdout: one\n", "stderr: two\n", "stdout: three\n"}
	if len(got) != len(want) {
		t.Fatalf("%d progress notifications, want %d: %+v", len(got), len(want), got)
	}
	for i, p := range got {
		if p.Message != want[i] || p.ProgressToken != "p1" || (i > 0 && p.Progress <= got[i-1].Progress) {
			t.Errorf("notification %d: %+v, want message %q, token p1, growing progress", i, p, want[i])
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestToolList: every tool is there with an output schema, so that each
// result is structured content a client can check.
func TestToolList(t *testing.T) {
	cs, _ := session(t)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
		}
	}
	want := "create_vm,delete_file,delete_vm,exec,hibernate_vm,list_files,list_vms,open_preview,read_file,read_process_log,spawn_process,write_file"
	if got := strings.Join(slices.Sorted(slices.Values(names)), ","); got != want {
		t.Errorf("tools %s, want %s", got, want)
	}
}
