package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// Deadlines of the operations. A stream that has not ended by its
// deadline, or that went progressTimeout without an event (heartbeats do
// not count), is hung; a buffered call that has not answered by its
// deadline is stalled. They are generous: on a loaded 2-core machine a
// guest command that sleeps half a second may take tens of seconds, and a
// killed sidecar's calls must end within a few seconds anyway.
const (
	callDeadline    = 60 * time.Second
	streamDeadline  = 5 * time.Minute
	progressTimeout = 90 * time.Second
	turnDeadline    = 150 * time.Second
	createDeadline  = 120 * time.Second
)

// The guest commands. The streamed ones print numbered lines a little
// apart, so that a stream is read in several events and a resume has
// something to skip; each sleep is a process launch in the guest, which
// costs tens of milliseconds, so the lines are few. None reads its stdin
// (a process blocked reading stalls its whole sidecar on the pinned
// engine).
const (
	streamLines   = 3
	processLines  = 12
	fileSlots     = 8
	maxFileBytes  = 256 << 10
	vmLostTimeout = 20 * time.Second
)

var (
	execStreamCommand = fmt.Sprintf("sh -c 'i=1; while [ $i -le %d ]; do echo s$i; i=$((i+1)); sleep 0.1; done'", streamLines)
	processCommand    = fmt.Sprintf("sh -c 'i=1; while [ $i -le %d ]; do echo line $i; i=$((i+1)); sleep 0.05; done'", processLines)
)

// numbered is the output of the commands above: prefix and 1..n, a line
// each.
func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

// wrongResult is an answer that was 2xx but not what the operation must
// give.
type wrongResult struct{ what string }

func (e *wrongResult) Error() string { return e.what }

// hungStream is a stream that had not ended by its deadline.
type hungStream struct{ what string }

func (e *hungStream) Error() string { return e.what }

// workerKind is what a worker does with its VM.
type workerKind int

func (k workerKind) String() string {
	switch k {
	case mixedWorker:
		return "mixed"
	case processWorker:
		return "process"
	default:
		return "agent"
	}
}

const (
	// mixedWorker runs buffered and streamed execs and writes files,
	// reading every write back.
	mixedWorker workerKind = iota
	// processWorker spawns processes and follows their output, resuming
	// from the last event id once or more per stream.
	processWorker
	// agentWorker runs pi turns against the mock model.
	agentWorker
)

// worker owns one VM of a tenant at a time and runs operations of its kind
// on it until stop is closed. A VM whose sidecar was killed turns lost:
// the worker counts the failures it caused, forgets what it wrote there
// and creates another VM.
type worker struct {
	r      *run
	name   string
	c      *client.Client
	kind   workerKind
	rng    *rand.Rand
	vm     *client.VMHandle
	sessID string
	// turns counts the worker's pi turns, to name each prompt.
	turns int
	// ledger is what every file slot of the VM holds, by the writes the
	// gateway acknowledged: the SHA-256 of the content.
	ledger map[string][32]byte
}

// loop runs the worker until stop is closed, finishing the operation in
// progress. ctx ends only when the run is abandoned.
func (w *worker) loop(ctx context.Context, stop <-chan struct{}) {
	for !stopped(ctx, stop) {
		// Each step is one operation, so that a stop is noticed between
		// them.
		if w.vm == nil {
			if !w.createVM(ctx) {
				// The pool may be at its limit while killed sidecars are
				// replaced: back off a little.
				sleepCtx(ctx, 500*time.Millisecond)
			}
			continue
		}
		if w.kind == agentWorker && w.sessID == "" {
			w.openSession(ctx)
			continue
		}
		switch w.kind {
		case mixedWorker:
			w.mixed(ctx)
		case processWorker:
			w.processStream(ctx)
		case agentWorker:
			w.piTurn(ctx)
		}
	}
}

// stopped reports whether stop is closed or ctx ended.
func stopped(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// do runs op with a deadline and records it as kind. On failure it finds
// out whether the VM was lost (the expected effect of a kill), and if so
// drops it. It reports whether op succeeded.
func (w *worker) do(ctx context.Context, kind Kind, deadline time.Duration, op func(context.Context) error) bool {
	octx, cancel := context.WithTimeout(ctx, deadline)
	start := time.Now()
	err := op(octx)
	d := time.Since(start)
	timedOut := octx.Err() != nil && ctx.Err() == nil
	cancel()
	if err == nil {
		w.r.rec.succeeded(kind, d)
		return true
	}
	if ctx.Err() != nil {
		return false // the run was abandoned: nothing to learn
	}
	class := classify(err)
	var wrong *wrongResult
	var hung *hungStream
	switch {
	case errors.As(err, &hung):
		class = classHung
	case errors.As(err, &wrong):
		class = classWrong
	case timedOut && class == classStalled && isStream(kind):
		class = classHung
	}
	lost := w.vm != nil && w.vmLost(ctx)
	// A create placed on a sidecar that was killed meanwhile fails with
	// no VM to be lost.
	fromKill := lost || (w.vm == nil && w.r.rec.killedBetween(start, time.Now()))
	w.r.rec.fail(kind, class, fromKill, fmt.Sprintf("%s on %s after %s: %v", w.name, w.vmID(), d.Round(time.Millisecond), err))
	if lost {
		w.r.rec.count(&w.r.rec.vmsLost)
		w.dropVM()
	}
	return false
}

// isStream says whether operations of kind are streams, whose overrun of
// the deadline is a hung stream rather than a stalled call.
func isStream(k Kind) bool {
	return k == KindExecStream || k == KindProcessStream || k == KindStreamResume
}

func (w *worker) vmID() string {
	if w.vm == nil {
		return "no VM"
	}
	return w.vm.ID()
}

// vmLost asks the gateway whether the worker's VM is lost, waiting a
// little for a killed sidecar's VMs to be marked so.
func (w *worker) vmLost(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, vmLostTimeout)
	defer cancel()
	for {
		v, err := w.vm.Get(ctx)
		switch {
		case err == nil && v.State == client.VMLost:
			return true
		case err == nil && v.State == client.VMReady:
			// Ready now and still ready a moment later: the failure was
			// not the VM's loss. (A sidecar that just died may not be
			// noticed at once.)
			if !sleepOr(ctx, 2*time.Second) {
				return false
			}
			v, err = w.vm.Get(ctx)
			if err == nil && v.State == client.VMReady {
				return false
			}
			if err == nil && v.State == client.VMLost {
				return true
			}
		}
		if !sleepOr(ctx, 250*time.Millisecond) {
			return false
		}
	}
}

// sleepOr sleeps d and reports whether ctx is still live.
func sleepOr(ctx context.Context, d time.Duration) bool {
	sleepCtx(ctx, d)
	return ctx.Err() == nil
}

// dropVM forgets the lost VM (its record is deleted at the end with the
// tenant's others) and what was written there.
func (w *worker) dropVM() {
	w.vm, w.sessID, w.ledger = nil, "", nil
}

// createVM creates the worker's VM (with pi and the mock model's port for
// an agent worker) and, for an agent worker, opens its session.
func (w *worker) createVM(ctx context.Context) bool {
	req := client.CreateVMRequest{Labels: map[string]string{"soak": w.name}}
	if w.kind == agentWorker {
		req.Agents = []string{"pi"}
		req.LoopbackExemptPorts = []uint16{uint16(w.r.mock.Port())}
	}
	var id string
	ok := w.do(ctx, KindCreateVM, createDeadline, func(ctx context.Context) error {
		v, err := w.c.CreateVM(ctx, req)
		if err != nil {
			return err
		}
		id = v.ID
		w.r.addVM(w.c, v.ID)
		if v.State != client.VMReady {
			return &wrongResult{fmt.Sprintf("created VM is %s", v.State)}
		}
		return nil
	})
	if !ok {
		return false
	}
	w.vm, w.ledger = w.c.VM(id), map[string][32]byte{}
	return true
}

// openSession opens the agent worker's pi session, pointed at the mock
// model.
func (w *worker) openSession(ctx context.Context) bool {
	return w.do(ctx, KindOpenSession, turnDeadline, func(ctx context.Context) error {
		s, err := w.vm.OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", Env: w.r.mock.Env()})
		if err != nil {
			return err
		}
		w.sessID = s.ID
		return nil
	})
}

// mixed runs one of a buffered exec, a streamed exec and a file write with
// its read-back, and now and then reads back an earlier write.
func (w *worker) mixed(ctx context.Context) {
	switch n := w.rng.IntN(10); {
	case n < 4:
		w.exec(ctx)
	case n < 7:
		w.execStream(ctx)
	default:
		w.writeFile(ctx)
	}
	if w.vm != nil && len(w.ledger) > 0 && w.rng.IntN(4) == 0 {
		w.verifySlot(ctx, w.randomSlot())
	}
}

func (w *worker) exec(ctx context.Context) {
	token := w.token()
	w.do(ctx, KindExec, callDeadline, func(ctx context.Context) error {
		res, err := w.vm.Exec(ctx, client.ExecRequest{Command: "echo " + token})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || string(res.Stdout) != token+"\n" {
			return &wrongResult{fmt.Sprintf("exec echo: exit %d, stdout %q", res.ExitCode, res.Stdout)}
		}
		return nil
	})
}

func (w *worker) execStream(ctx context.Context) {
	w.do(ctx, KindExecStream, streamDeadline, func(ctx context.Context) error {
		s, err := w.vm.ExecStream(ctx, client.ExecRequest{Command: execStreamCommand})
		if err != nil {
			return err
		}
		defer s.Close()
		var out bytes.Buffer
		for {
			ev, err := nextEvent(ctx, s)
			if err != nil {
				return streamErr(ctx, "exec stream", err)
			}
			switch ev := ev.(type) {
			case *client.Output:
				if ev.Stream == client.Stdout {
					out.Write(ev.Data)
				}
			case *client.Exit:
				if want := numbered("s", streamLines); ev.ExitCode != 0 || out.String() != want {
					return &wrongResult{fmt.Sprintf("streamed exec: exit %d, stdout %q, want %q", ev.ExitCode, out.String(), want)}
				}
				return nil
			}
		}
	})
}

// nextEvent is the stream's next event, or a *hungStream error when none
// comes within progressTimeout.
func nextEvent(ctx context.Context, s *client.Stream) (client.Event, error) {
	ectx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	ev, err := s.Next(ectx)
	if err != nil && ectx.Err() != nil && ctx.Err() == nil {
		return nil, &hungStream{fmt.Sprintf("no event for %s: %v", progressTimeout, err)}
	}
	return ev, err
}

// streamErr names a stream that ran past its deadline hung.
func streamErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return &hungStream{fmt.Sprintf("%s did not end by its deadline: %v", what, err)}
	}
	return err
}

func (w *worker) token() string {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(w.rng.Uint32())
	}
	return hex.EncodeToString(b)
}

func slotPath(i int) string { return fmt.Sprintf("/workspace/soak/f%d", i) }

func (w *worker) randomSlot() string {
	for p := range w.ledger { // map order is random enough
		return p
	}
	return ""
}

// writeFile writes random bytes to a slot and reads them back. A write
// the gateway acknowledged enters the ledger; its read-back, now or later,
// must give the same bytes unless the VM was lost.
func (w *worker) writeFile(ctx context.Context) {
	path := slotPath(w.rng.IntN(fileSlots))
	data := make([]byte, 1+w.rng.IntN(maxFileBytes))
	for i := range data {
		data[i] = byte(w.rng.Uint32())
	}
	sum := sha256.Sum256(data)
	ok := w.do(ctx, KindFileWrite, callDeadline, func(ctx context.Context) error {
		// The slot's earlier content is no longer promised once a new
		// write is sent: a write cut by a kill may have left either.
		delete(w.ledger, path)
		_, err := w.vm.WriteFile(ctx, path, bytes.NewReader(data), client.WriteFileOptions{Mkdirs: true})
		return err
	})
	if !ok {
		return
	}
	w.ledger[path] = sum
	w.r.rec.count(&w.r.rec.acked)
	w.verifySlot(ctx, path)
}

// verifySlot reads a slot back and compares it with the ledger. A read
// that fails on a VM that was not lost, or gives other bytes, is a lost
// acknowledged write.
func (w *worker) verifySlot(ctx context.Context, path string) {
	want, ok := w.ledger[path]
	if !ok {
		return
	}
	var got [32]byte
	var n int64
	ok = w.do(ctx, KindFileRead, callDeadline, func(ctx context.Context) error {
		r, err := w.vm.ReadFile(ctx, path)
		if err != nil {
			return err
		}
		defer r.Close()
		h := sha256.New()
		if n, err = io.Copy(h, r); err != nil {
			return err
		}
		copy(got[:], h.Sum(nil))
		return nil
	})
	switch {
	case !ok && w.vm != nil:
		w.r.rec.lostWrite(fmt.Sprintf("%s %s: the read-back of an acknowledged write failed on a VM that is not lost", w.vm.ID(), path))
	case ok && got != want:
		w.r.rec.lostWrite(fmt.Sprintf("%s %s: read back %d bytes that differ from the acknowledged write", w.vm.ID(), path, n))
	case ok:
		w.r.rec.count(&w.r.rec.verified)
	}
}

// verifyAll reads back every slot of the ledger, at the end of the run.
func (w *worker) verifyAll(ctx context.Context) {
	for path := range w.ledger {
		if w.vm == nil {
			return
		}
		w.verifySlot(ctx, path)
	}
}

// processStream spawns a process that prints numbered lines and follows
// its output to the exit, closing the stream and resuming it from the
// last event id one to three times on the way. The lines must arrive each
// once, in order.
func (w *worker) processStream(ctx context.Context) {
	var p *client.ProcessHandle
	if !w.do(ctx, KindProcessStream, callDeadline, func(ctx context.Context) error {
		var err error
		p, err = w.vm.Spawn(ctx, client.SpawnRequest{Command: processCommand})
		return err
	}) {
		return
	}
	resumes := 1 + w.rng.IntN(3)
	w.do(ctx, KindStreamResume, streamDeadline, func(ctx context.Context) error {
		var out bytes.Buffer
		last := ""
		for part := 0; ; part++ {
			s, err := p.Output(ctx, client.StreamOptions{LastEventID: last})
			if err != nil {
				return streamErr(ctx, "process stream", err)
			}
			// Leave this part after a few events, except in the last one.
			budget := -1
			if part < resumes {
				budget = 1 + w.rng.IntN(3)
			}
			done, err := readOutput(ctx, s, &out, budget)
			last = s.LastEventID()
			s.Close()
			if err != nil {
				return streamErr(ctx, "process stream", err)
			}
			if !done {
				continue
			}
			if want := numbered("line ", processLines); out.String() != want {
				return &wrongResult{fmt.Sprintf("process output after %d resumes: %q, want %q", part, out.String(), want)}
			}
			return nil
		}
	})
}

// readOutput reads a process's output events into out until its exit
// (done) or budget events (budget < 0: no bound). A non-zero exit is a
// wrong result.
func readOutput(ctx context.Context, s *client.Stream, out *bytes.Buffer, budget int) (done bool, err error) {
	for n := 0; budget < 0 || n < budget; n++ {
		ev, err := nextEvent(ctx, s)
		if err != nil {
			return false, err
		}
		switch ev := ev.(type) {
		case *client.Output:
			if ev.Stream == client.Stdout {
				out.Write(ev.Data)
			}
		case *client.Gap:
			return false, &wrongResult{fmt.Sprintf("gap in a resumed process stream: %+v", *ev)}
		case *client.Exit:
			if ev.ExitCode != 0 {
				return true, &wrongResult{fmt.Sprintf("process exit %d", ev.ExitCode)}
			}
			return true, nil
		}
	}
	return false, nil
}

// piTurn prompts the worker's pi session and checks the mock model's
// reply. Each prompt names its turn, so that the mock's request log tells
// how many model requests the turn made.
func (w *worker) piTurn(ctx context.Context) {
	w.turns++
	prompt := fmt.Sprintf("hello (turn %d of %s)", w.turns, w.name)
	w.do(ctx, KindPiTurn, turnDeadline, func(ctx context.Context) error {
		res, err := w.vm.Session(w.sessID).Prompt(ctx, client.PromptRequest{Content: client.TextPrompt(prompt)})
		if err != nil {
			return err
		}
		text := messageText(res.Message)
		switch {
		case res.StopReason == "end_turn" && text == mockanthropic.HelloText:
			return nil
		case res.StopReason == "end_turn" && agentRetried(text, w.r.mock.RequestsWithPrompt(prompt)):
			w.r.rec.count(&w.r.rec.agentRetries)
			return nil
		}
		return &wrongResult{fmt.Sprintf("pi turn: stop %q, text %q", res.StopReason, text)}
	})
}

// agentRetried reports whether text is the reply of a turn whose model
// request pi itself retried: the partial replies of failed attempts, then
// the whole reply, with no more attempts than the model received. Pi
// retries a request that fails mid-stream (a network error or timeout,
// such as the engine's bridge call timing out under load), and the engine
// builds the turn's message from every chunk the agent streamed, the
// failed attempt's too.
func agentRetried(text string, attempts int) bool {
	failed, ok := strings.CutSuffix(text, mockanthropic.HelloText)
	if !ok || attempts < 2 {
		return false
	}
	// The reply's first word starts each attempt and appears nowhere
	// else in it, so it splits the failed attempts apart.
	first, _, _ := strings.Cut(mockanthropic.HelloText, " ")
	n := 0
	for failed != "" {
		if !strings.HasPrefix(failed, first) {
			return false
		}
		piece := failed
		if next := strings.Index(failed[len(first):], first); next >= 0 {
			piece = failed[:len(first)+next]
		}
		if !strings.HasPrefix(mockanthropic.HelloText, piece) {
			return false
		}
		failed = failed[len(piece):]
		n++
	}
	return n > 0 && n < attempts
}

// messageText is the text of an ACP message: its text content blocks,
// joined.
func messageText(raw json.RawMessage) string {
	var msg struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &msg) != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range msg.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}
