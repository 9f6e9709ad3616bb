package main

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// TestE2ESessionsSurviveRestart kills the real gateway binary (SIGKILL, so
// nothing is shut down cleanly) in the middle of a session's life and starts
// it again on the same data directory: the session is listed lost with its
// whole history, and a stream resumed with Last-Event-ID gets exactly the
// events the client had not seen, then the session's end.
func TestE2ESessionsSurviveRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary with a real agent")
	}
	bin := buildGateway(t)
	dataDir := t.TempDir()
	mock := mockanthropic.Start(t)
	doc := apispec.MustLoad(t)
	hc := &http.Client{Transport: apispec.Transport(t, doc, nil)}
	e := &e2e{t: t, doc: doc, hc: hc, n: new(atomic.Int64)}
	ctx := ctxFor(t, 4*time.Minute)

	cmd, base, logs := startBinary(t, bin, dataDir)
	c := mustClient(t, base, testAdminKey, client.WithHTTPClient(hc))
	e.gw = &gatewayProc{URL: base}
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Agents: []string{"pi"}, LoopbackExemptPorts: []uint16{uint16(mock.Port())}})
	if err != nil {
		t.Fatal(err)
	}
	const sid = "survivor"
	if _, err := c.VM(vm.ID).OpenSession(ctx, client.OpenSessionRequest{SessionID: sid, Agent: "pi", Env: mock.Env()}); err != nil {
		t.Fatalf("open: %v\n%s", err, logs.String())
	}
	feed := e.follow(t, c, vm.ID, sid, "")
	if _, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")}); err != nil {
		t.Fatal(err)
	}
	feed.durableUntil(t, 30*time.Second, 2)
	feed.close()
	seen := feed.durable(t)
	wantSequence(t, sequences(seen), 1, 2)
	// More happens that the client does not see.
	if _, err := c.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: toolPrompt("bash", "echo x > /tmp/x")}); err != nil {
		t.Fatal(err)
	}
	end := mustSession(t, c, vm.ID, sid).LatestSequence
	if end <= 3 {
		t.Fatalf("latest sequence %d after a tool turn", end)
	}
	killGateway(t, cmd, c)

	_, base2, _ := startBinary(t, bin, dataDir)
	c2 := mustClient(t, base2, testAdminKey, client.WithHTTPClient(hc))
	e.gw = &gatewayProc{URL: base2}
	s := mustSession(t, c2, vm.ID, sid)
	if s.State != client.SessionLost || s.LatestSequence != end {
		t.Fatalf("after the restart: %+v", s)
	}
	list, err := c2.VM(vm.ID).ListSessions(ctx, client.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].State != client.SessionLost {
		t.Fatalf("sessions after the restart: %+v %v", list, err)
	}
	resumed := e.follow(t, c2, vm.ID, sid, itoa(seen[len(seen)-1].Sequence))
	if err := resumed.ended(t, 30*time.Second); !streamEnded(err) {
		t.Fatalf("resumed stream: %v", err)
	}
	union := append(sequences(seen), sequences(resumed.durable(t))...)
	wantSequence(t, union, 1, end)
	if st := endState(t, resumed.events()); st != client.SessionLost {
		t.Fatalf("end state %q", st)
	}
	hist, err := c2.VM(vm.ID).Session(sid).History(ctx, client.HistoryQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	wantSequence(t, sequences(hist.Events), 1, end)
	_, err = c2.VM(vm.ID).Session(sid).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt("hello")})
	if ce := wantCode(t, err, "conflict", 409); ce.Details["state"] != "lost" {
		t.Errorf("details %v", ce.Details)
	}
}
