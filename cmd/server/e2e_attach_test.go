package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// wsFrame is a control frame of the attach protocol, as a client reads it.
type wsFrame struct {
	Type     string  `json:"type"`
	Seq      *uint64 `json:"seq"`
	From     uint64  `json:"from"`
	To       uint64  `json:"to"`
	ExitCode *int    `json:"exitCode"`
	Signal   *string `json:"signal"`
	Code     string  `json:"code"`
	Detail   string  `json:"detail"`
}

// attachClient is one WebSocket attached to a shell or a process, read in
// the background: it tracks the sequence of every binary frame as the
// protocol defines it and keeps the output by stream.
type attachClient struct {
	t       testing.TB
	conn    *websocket.Conn
	process bool // binary frames start with a stream byte

	mu       sync.Mutex
	seq      uint64
	hello    *wsFrame
	out      map[byte]*bytes.Buffer // stream (0 for a shell) -> bytes
	frames   []wsFrame
	closeErr error
	done     chan struct{}
	wg       sync.WaitGroup
}

// wsURL is the WebSocket URL of a gateway path.
func (e *e2e) wsURL(path string) string { return "ws" + strings.TrimPrefix(e.gw.URL, "http") + path }

// dialAttach dials an attach route with the key as a subprotocol.
func (e *e2e) dialAttach(t testing.TB, path, key string) (*websocket.Conn, *http.Response, error) {
	ctx := ctxT(t)
	return websocket.Dial(ctx, e.wsURL(path), &websocket.DialOptions{
		HTTPClient:   &http.Client{Transport: e.tr},
		Subprotocols: []string{"agentos-gateway.v1", "bearer.agentos-gateway." + key},
	})
}

// attach dials path and reads it in the background.
func (e *e2e) attach(t testing.TB, path string, process bool) *attachClient {
	t.Helper()
	conn, resp, err := e.dialAttach(t, path, testAdminKey)
	if err != nil {
		t.Fatalf("attach %s: %v (%v)", path, err, resp)
	}
	if conn.Subprotocol() != "agentos-gateway.v1" {
		t.Fatalf("subprotocol %q", conn.Subprotocol())
	}
	a := &attachClient{t: t, conn: conn, process: process, out: map[byte]*bytes.Buffer{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(a.done)
		for {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				a.mu.Lock()
				a.closeErr = err
				a.mu.Unlock()
				return
			}
			a.mu.Lock()
			if typ == websocket.MessageText {
				var f wsFrame
				if err := json.Unmarshal(b, &f); err != nil {
					a.closeErr = fmt.Errorf("bad control frame %q: %w", b, err)
					a.mu.Unlock()
					return
				}
				a.frames = append(a.frames, f)
				switch f.Type {
				case "hello":
					a.hello = &f
					a.seq = *f.Seq
				case "gap":
					a.seq = f.To
				}
				a.mu.Unlock()
				continue
			}
			a.seq++
			stream := byte(0)
			if process {
				stream, b = b[0], b[1:]
			}
			if a.out[stream] == nil {
				a.out[stream] = &bytes.Buffer{}
			}
			a.out[stream].Write(b)
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		conn.CloseNow()
		a.wg.Wait()
	})
	return a
}

// output returns the bytes of a stream and the sequence of the last one.
func (a *attachClient) output(stream byte) (string, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.out[stream] == nil {
		return "", a.seq
	}
	return a.out[stream].String(), a.seq
}

// waitFor waits until want shows in stream.
func (a *attachClient) waitFor(stream byte, want string) {
	a.t.Helper()
	deadline := time.After(e2eTimeout)
	for {
		got, _ := a.output(stream)
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-a.done:
			// Everything the client received is in by now.
			if got, _ := a.output(stream); strings.Contains(got, want) {
				return
			}
			a.t.Fatalf("the connection closed (%v) before %q showed; %s", a.err(), want, a.summary())
		case <-deadline:
			a.t.Fatalf("%q did not show in time; got %q", want, got)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitHello waits for the hello frame and returns its sequence.
func (a *attachClient) waitHello() uint64 {
	a.t.Helper()
	eventually(a.t, e2eTimeout, "hello", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.hello != nil || a.closeErr != nil
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hello == nil {
		a.t.Fatalf("closed before hello: %v", a.closeErr)
	}
	return *a.hello.Seq
}

// waitFrame waits for a control frame of type typ.
func (a *attachClient) waitFrame(typ string) wsFrame {
	a.t.Helper()
	deadline := time.After(e2eTimeout)
	for {
		a.mu.Lock()
		for _, f := range a.frames {
			if f.Type == typ {
				a.mu.Unlock()
				return f
			}
		}
		a.mu.Unlock()
		select {
		case <-a.done:
			a.mu.Lock()
			for _, f := range a.frames {
				if f.Type == typ {
					a.mu.Unlock()
					return f
				}
			}
			a.mu.Unlock()
			a.t.Fatalf("closed (%v) without a %s frame", a.err(), typ)
		case <-deadline:
			a.t.Fatalf("no %s frame in time", typ)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// closed waits for the server to close the connection and returns how.
func (a *attachClient) closed() (websocket.StatusCode, string) {
	a.t.Helper()
	select {
	case <-a.done:
	case <-time.After(e2eTimeout):
		a.t.Fatal("the server did not close the connection")
	}
	var ce websocket.CloseError
	if !errors.As(a.err(), &ce) {
		a.t.Fatalf("connection ended without a close frame: %v", a.err())
	}
	return ce.Code, ce.Reason
}

// summary describes what the client received, for failure messages.
func (a *attachClient) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d, frames %+v, output", a.seq, a.frames)
	for k, v := range a.out {
		fmt.Fprintf(&b, " %d:%q", k, v.String())
	}
	return b.String()
}

func (a *attachClient) err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closeErr
}

// send writes a binary frame.
func (a *attachClient) send(b string) {
	a.t.Helper()
	if err := a.conn.Write(ctxT(a.t), websocket.MessageBinary, []byte(b)); err != nil {
		a.t.Fatal(err)
	}
}

// control writes a text frame.
func (a *attachClient) control(v any) {
	a.t.Helper()
	b, _ := json.Marshal(v)
	if err := a.conn.Write(ctxT(a.t), websocket.MessageText, b); err != nil {
		a.t.Fatal(err)
	}
}

// drop closes the connection from the client's side, as a client that goes
// away does, and waits for its reader.
func (a *attachClient) drop() {
	a.conn.CloseNow()
	<-a.done
}

// TestE2EAttachAuth: the key comes as a subprotocol (as is or base64url) or
// in Authorization; the server answers agentos-gateway.v1 only; a missing or
// wrong key, a foreign origin, a request that is no upgrade, or a resume
// point beyond the end are refused before the upgrade with a problem; at
// shutdown attached clients are closed with 1001.
func TestE2EAttachAuth(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	p, err := c.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/v1/vms/%s/processes/%d/attach", vm.ID, p.Pid())

	refused := []struct {
		name      string
		protocols []string
		header    http.Header
		status    int
	}{
		{"no key", []string{"agentos-gateway.v1"}, nil, http.StatusUnauthorized},
		{"wrong key", []string{"agentos-gateway.v1", "bearer.agentos-gateway.agk_wrong"}, nil, http.StatusUnauthorized},
		{"empty key", []string{"agentos-gateway.v1", "bearer.agentos-gateway."}, nil, http.StatusUnauthorized},
		{"wrong Authorization wins over a right subprotocol", []string{"agentos-gateway.v1", "bearer.agentos-gateway." + testAdminKey},
			http.Header{"Authorization": {"Bearer agk_wrong"}}, http.StatusUnauthorized},
		{"foreign origin", []string{"agentos-gateway.v1", "bearer.agentos-gateway." + testAdminKey},
			http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			e, ctx := e.sub(t), ctxT(t)
			conn, resp, err := websocket.Dial(ctx, e.wsURL(path), &websocket.DialOptions{
				HTTPClient: &http.Client{Transport: e.tr}, Subprotocols: tt.protocols, HTTPHeader: tt.header})
			if err == nil {
				conn.CloseNow()
				t.Fatal("upgraded")
			}
			if resp == nil || resp.StatusCode != tt.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("refusal: %v %+v", err, resp)
			}
		})
	}

	accepted := []struct {
		name      string
		protocols []string
		header    http.Header
		want      string
	}{
		{"key as a subprotocol", []string{"agentos-gateway.v1", "bearer.agentos-gateway." + testAdminKey}, nil, "agentos-gateway.v1"},
		{"key base64url", []string{"agentos-gateway.v1", "bearer.agentos-gateway." + base64.RawURLEncoding.EncodeToString([]byte(testAdminKey))}, nil, "agentos-gateway.v1"},
		{"Authorization, no subprotocol", nil, http.Header{"Authorization": {"Bearer " + testAdminKey}}, ""},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			e, ctx := e.sub(t), ctxT(t)
			conn, resp, err := websocket.Dial(ctx, e.wsURL(path), &websocket.DialOptions{
				HTTPClient: &http.Client{Transport: e.tr}, Subprotocols: tt.protocols, HTTPHeader: tt.header})
			if err != nil {
				t.Fatalf("%v %+v", err, resp)
			}
			defer conn.CloseNow()
			if conn.Subprotocol() != tt.want {
				t.Fatalf("subprotocol %q, want %q", conn.Subprotocol(), tt.want)
			}
			if got := resp.Header.Values("Sec-WebSocket-Protocol"); strings.Contains(strings.Join(got, ","), "bearer") {
				t.Fatalf("the server echoed the key: %q", got)
			}
			typ, b, err := conn.Read(ctx)
			var hello wsFrame
			if err != nil || typ != websocket.MessageText || json.Unmarshal(b, &hello) != nil || hello.Type != "hello" || hello.Seq == nil || *hello.Seq != 0 {
				t.Fatalf("first frame %v %q %v", typ, b, err)
			}
			conn.Close(websocket.StatusNormalClosure, "")
		})
	}

	// Refusals before the upgrade go through the validating transport.
	err = e.raw("GET", path, testAdminKey, nil, nil)
	ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
	if ce.Details["reason"] != "websocket_required" {
		t.Fatalf("plain GET: %+v", ce)
	}
	err = e.raw("GET", path+"?after=99", testAdminKey, nil, map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
	wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
	err = e.raw("GET", "/v1/vms/"+vm.ID+"/shells/sh_nope/attach", "", nil, map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
	wantCode(t, err, client.CodeUnauthenticated, http.StatusUnauthorized)

	// Shutdown tells attached clients, and waits for them.
	a := e.attach(t, path, true)
	a.waitHello()
	e.gw.stop(t)
	if code, reason := a.closed(); code != websocket.StatusGoingAway || reason != "the gateway is shutting down" {
		t.Fatalf("at shutdown: closed with %d %q", code, reason)
	}
}

// TestE2EAttachShell: type, read and resize over a WebSocket; drop the
// connection and resume with after=<last seq> without losing output (the
// concatenation equals the SSE output); two clients at once; the end comes
// as an exit frame and a normal close.
func TestE2EAttachShell(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true")
	var (
		id string
		sc *screen
	)
	e.attachShellScenario(t, c, vm.ID, &id, &sc)
}

// attachShellScenario attaches to a new shell of vm and drives it through
// typing, resizing, dropping, resuming and two clients at once, to its end.
// It hands the shell and its screen out through shellID and shellScreen as
// soon as they exist, so that a failed run can be told apart from an engine
// that lost an answer.
func (e *e2e) attachShellScenario(t testing.TB, c *client.Client, vm string, shellID *string, shellScreen **screen) {
	ctx := ctxFor(t, 5*e2eTimeout)
	id, sc := e.openLiveShell(t, c, vm, client.ShellRequest{Shell: "bash", Cols: 100, Rows: 30})
	*shellID, *shellScreen = id, sc
	path := "/v1/vms/" + vm + "/shells/" + id + "/attach"

	a := e.attach(t, path, false)
	if seq := a.waitHello(); seq != 0 {
		t.Fatalf("hello seq %d, want 0", seq)
	}
	a.waitFor(0, prompt) // the output so far, replayed
	a.send("echo attach-$((2*3))\r")
	a.waitFor(0, "attach-6")
	a.control(map[string]any{"type": "resize", "cols": 90, "rows": 20})
	eventually(t, e2eTimeout, "the resize", func() bool {
		sh, err := c.VM(vm).Shell(id).Get(ctx)
		return err == nil && sh.Cols == 90 && sh.Rows == 20
	})

	// Drop the connection; meanwhile output goes on; resume after the last
	// sequence received.
	a.drop()
	gotA, lastA := a.output(0)
	if err := c.VM(vm).Shell(id).Input(ctx, []byte("echo offline-$((3*3))\r")); err != nil {
		t.Fatal(err)
	}
	if !sc.waitFor("offline-9") {
		t.Fatalf("the shell ended; screen %q", sc.String())
	}
	b := e.attach(t, fmt.Sprintf("%s?after=%d", path, lastA), false)
	if seq := b.waitHello(); seq != lastA {
		t.Fatalf("hello seq %d after resuming at %d", seq, lastA)
	}
	b.waitFor(0, "offline-9")
	gotB, lastB := b.output(0)
	if want := e.shellOutputUpTo(t, c, vm, id, lastB); gotA+gotB != string(want) {
		t.Fatalf("attached output up to #%d differs from the SSE output:\nws  %q\nsse %q", lastB, gotA+gotB, want)
	}
	if strings.Contains(gotA, "offline-9") {
		t.Fatal("the dropped client saw output after it left")
	}

	// A second client: both see all output, both can type.
	d := e.attach(t, fmt.Sprintf("%s?after=%d", path, lastB), false)
	d.waitHello()
	b.send("echo one-$((5+5))\r")
	b.waitFor(0, "one-10")
	d.waitFor(0, "one-10")
	d.send("echo two-$((10+10))\r")
	b.waitFor(0, "two-20")
	d.waitFor(0, "two-20")

	// The second client can type alone once the first leaves.
	b.drop()
	d.send("echo loud-$((5*5))\r")
	d.waitFor(0, "loud-25")
	d.send("exit 4\r")
	f := d.waitFrame("exit")
	if f.ExitCode == nil || *f.ExitCode != 4 || f.Signal != nil || f.Seq == nil {
		t.Fatalf("exit frame %+v", f)
	}
	if _, last := d.output(0); *f.Seq != last {
		t.Fatalf("exit frame seq %d, last binary frame %d", *f.Seq, last)
	}
	if code, reason := d.closed(); code != websocket.StatusNormalClosure || reason != "the shell exited" {
		t.Fatalf("closed with %d %q", code, reason)
	}
	// Attaching to the ended shell replays what is buffered and the end.
	late := e.attach(t, path, false)
	late.waitFrame("exit")
	if code, _ := late.closed(); code != websocket.StatusNormalClosure {
		t.Fatalf("late attach closed with %d", code)
	}
}

// TestE2EAttachProcess: stdin in, stdout and stderr out (told apart by the
// stream byte), resume without loss, close_stdin, signal, refused frames,
// and no goroutine left once the connections closed.
func TestE2EAttachProcess(t *testing.T) {
	e := newE2E(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true")
	procPath := func(pid uint32) string { return fmt.Sprintf("/v1/vms/%s/processes/%d/attach", vm.ID, pid) }
	spawn := func(argv ...string) uint32 {
		t.Helper()
		p, err := c.VM(vm.ID).Spawn(ctxT(t), client.SpawnRequest{Argv: argv})
		if err != nil {
			t.Fatal(err)
		}
		return p.Pid()
	}

	t.Run("stdin, stdout, stderr, resume", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		pid := spawn("sh", "-c", `read a; echo "out $a"; read b; echo "err $b" >&2; exit 5`)
		a := e.attach(t, procPath(pid), true)
		a.waitHello()
		a.send("one\n")
		a.waitFor(1, "out one")
		a.drop()
		outA, lastA := a.output(1)
		b := e.attach(t, fmt.Sprintf("%s?after=%d", procPath(pid), lastA), true)
		if seq := b.waitHello(); seq != lastA {
			t.Fatalf("hello seq %d, want %d", seq, lastA)
		}
		b.send("two\n")
		b.waitFor(2, "err two")
		f := b.waitFrame("exit")
		if f.ExitCode == nil || *f.ExitCode != 5 {
			t.Fatalf("exit frame %+v", f)
		}
		if code, reason := b.closed(); code != websocket.StatusNormalClosure || reason != "the process exited" {
			t.Fatalf("closed with %d %q", code, reason)
		}
		outB, _ := b.output(1)
		errB, _ := b.output(2)
		s, err := c.VM(vm.ID).Process(pid).Output(ctx, client.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.collect(s, e.eventReq("GET", "/v1/vms/"+vm.ID+"/processes/"+fmt.Sprint(pid)+"/output"), e2eTimeout)
		if got, want := outA+outB, output(t, evs, "stdout"); got != want {
			t.Fatalf("stdout over the WebSocket %q, over SSE %q", got, want)
		}
		if got, want := errB, output(t, evs, "stderr"); got != want || want != "err two\n" {
			t.Fatalf("stderr over the WebSocket %q, over SSE %q", got, want)
		}
	})

	t.Run("close_stdin", func(t *testing.T) {
		e := e.sub(t)
		pid := spawn("cat")
		a := e.attach(t, procPath(pid), true)
		a.waitHello()
		a.send("abc\n")
		a.control(map[string]string{"type": "close_stdin"})
		a.waitFor(1, "abc")
		if f := a.waitFrame("exit"); f.ExitCode == nil || *f.ExitCode != 0 {
			t.Fatalf("exit frame %+v", f)
		}
	})

	t.Run("signal", func(t *testing.T) {
		e := e.sub(t)
		pid := spawn("sleep", "600")
		a := e.attach(t, procPath(pid), true)
		a.waitHello()
		a.control(map[string]string{"type": "signal", "signal": "SIGBOGUS"})
		if f := a.waitFrame("error"); f.Code != string(client.CodeInvalidArgument) {
			t.Fatalf("error frame %+v", f)
		}
		a.control(map[string]string{"type": "signal", "signal": "SIGTERM"})
		f := a.waitFrame("exit")
		if f.Signal == nil || *f.Signal != "SIGTERM" {
			t.Fatalf("exit frame %+v", f)
		}
	})

	t.Run("refused frames", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		pid := spawn("sleep", "600")
		tests := []struct {
			name string
			send func(a *attachClient)
			code websocket.StatusCode
		}{
			{"input over 64 KiB", func(a *attachClient) { a.send(strings.Repeat("x", 64<<10+1)) }, websocket.StatusMessageTooBig},
			{"unknown control frame", func(a *attachClient) { a.control(map[string]string{"type": "resize"}) }, websocket.StatusUnsupportedData},
			{"control frame that is not JSON", func(a *attachClient) {
				_ = a.conn.Write(ctxT(t), websocket.MessageText, []byte("SIGTERM"))
			}, websocket.StatusUnsupportedData},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				a := e.attach(t, procPath(pid), true)
				a.waitHello()
				tt.send(a)
				if code, reason := a.closed(); code != tt.code || reason == "" {
					t.Fatalf("closed with %d %q, want %d and a reason", code, reason, tt.code)
				}
			})
		}
		// The process is untouched.
		if p, err := c.VM(vm.ID).Process(pid).Get(ctx); err != nil || !p.Running {
			t.Fatalf("%+v %v", p, err)
		}
	})

	t.Run("goroutines", func(t *testing.T) {
		e := e.sub(t)
		ctx := ctxT(t)
		pid := spawn("sh", "-c", "while true; do echo tick; sleep 0.05; done")
		shell, err := c.VM(vm.ID).OpenShell(ctx, client.ShellRequest{})
		if err != nil {
			t.Fatal(err)
		}
		warm := e.attach(t, procPath(pid), true)
		warm.waitHello()
		warm.drop()
		time.Sleep(200 * time.Millisecond)
		baseline := e.baselineGoroutines(t)
		const n = 10
		var conns []*attachClient
		for i := range n {
			p := procPath(pid)
			if i%2 == 1 {
				p = "/v1/vms/" + vm.ID + "/shells/" + shell.ID() + "/attach"
			}
			a := e.attach(t, p, i%2 == 0)
			a.waitHello()
			conns = append(conns, a)
		}
		conns[0].waitFor(1, "tick")
		open := runtime.NumGoroutine()
		for _, a := range conns {
			a.drop()
		}
		e.goroutinesBack(t, baseline, open, n, "attached")
	})
}
