// Package terminal keeps a model of a shell's terminal and answers the
// queries a program sends its terminal (cursor position, device status,
// device attributes, mode reports) when no attached terminal emulator does.
//
// The guest shells of agentOS ask the terminal for the cursor position
// before every prompt and keystroke echo, and give up when no answer comes
// within 2 s; a client that is not a terminal emulator (curl, a backend, a
// script) never answers, so the gateway does, from its own model of the
// screen. The model and the answers are those of
// github.com/charmbracelet/x/vt, a full emulator: this package only decides
// when an answer is due and whether a client answered first.
package terminal

import (
	"context"
	"sync"
	"time"

	"github.com/charmbracelet/x/vt"
)

// DefaultGrace is how long an answer waits, while clients are attached, for
// one of them to answer the query itself.
const DefaultGrace = 200 * time.Millisecond

// replyTimeout bounds one write of an answer: the engine may hold input to
// a shell for seconds while it waits (README, known limits).
const replyTimeout = 15 * time.Second

// scrollbackLines is the smallest history the emulator keeps: the model
// exists for the cursor and the size, not for replaying a screen.
const scrollbackLines = 1

// Markers the Terminal writes into the emulator's answer pipe. A read of the
// pipe returns the bytes of exactly one write, and no answer is a single
// control byte, so they cannot be mistaken for answers.
var (
	fence = []byte{0x00} // every answer written before it was queued
	stop  = []byte{0x01} // the reader ends
)

// Config configures a Terminal.
type Config struct {
	// Cols and Rows are the initial size (default 80x24).
	Cols, Rows int
	// Grace is how long an answer waits for an attached client (default
	// DefaultGrace).
	Grace time.Duration
	// Reply writes an answer to the program's input. It is called from one
	// goroutine at a time, in the order the queries came.
	Reply func(ctx context.Context, answer []byte) error
	// Now returns the time (default time.Now); tests set it.
	Now func() time.Time
}

// Terminal models one terminal and answers its queries. Its methods are
// safe for concurrent use.
type Terminal struct {
	cfg Config

	// mu guards the emulator, which is not safe for concurrent use.
	mu     sync.Mutex
	emu    *vt.Emulator
	closed bool

	qmu      sync.Mutex
	pending  []*answer // queries not answered yet, oldest first
	attached int       // clients that may answer for themselves
	sent     int       // answers the Terminal wrote
	wake     chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type answer struct {
	kind byte // the final byte of the reply: 'R', 'n', 'c', 'y', ...
	data []byte
	due  time.Time
}

// New starts a Terminal; Close stops it.
func New(cfg Config) *Terminal {
	if cfg.Cols <= 0 {
		cfg.Cols = 80
	}
	if cfg.Rows <= 0 {
		cfg.Rows = 24
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	emu := vt.NewEmulator(cfg.Cols, cfg.Rows)
	emu.SetScrollbackSize(scrollbackLines)
	ctx, cancel := context.WithCancel(context.Background())
	t := &Terminal{cfg: cfg, emu: emu, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	t.wg.Add(2)
	go t.readAnswers()
	go t.sendAnswers()
	return t
}

// Close stops the Terminal's goroutines and waits for them; answers still
// pending are dropped.
func (t *Terminal) Close() {
	t.cancel()
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		_, _ = t.emu.InputPipe().Write(stop)
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Output feeds the program's output to the model. Queries in it (whole, or
// completed by this chunk) are answered, at once when no client is attached,
// else after the grace unless a client answers first. When Output returns,
// its queries are queued, so a client that answers after seeing this output
// is always matched with them.
func (t *Terminal) Output(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	_, _ = t.emu.Write(p)
	_, _ = t.emu.InputPipe().Write(fence)
}

// Resize changes the model's size.
func (t *Terminal) Resize(cols, rows int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || cols <= 0 || rows <= 0 {
		return
	}
	t.emu.Resize(cols, rows)
	_, _ = t.emu.InputPipe().Write(fence)
}

// Size returns the model's size.
func (t *Terminal) Size() (cols, rows int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.emu.Width(), t.emu.Height()
}

// Cursor returns the cursor position, 1-based as a terminal reports it.
func (t *Terminal) Cursor() (row, col int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.emu.CursorPosition()
	return p.Y + 1, p.X + 1
}

// Attach records a client that answers queries for itself (a terminal
// emulator on a WebSocket) until the returned detach is called.
func (t *Terminal) Attach() (detach func()) {
	t.qmu.Lock()
	t.attached++
	t.qmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.qmu.Lock()
			t.attached--
			t.qmu.Unlock()
			t.poke()
		})
	}
}

// ClientInput notes the replies in what a client typed: each one settles
// the oldest pending query of its kind, which the Terminal then does not
// answer. A reply split across two inputs is not recognised (terminal
// emulators send each reply in one piece), and the query is then answered
// twice, which the shells of agentOS tolerate.
func (t *Terminal) ClientInput(p []byte) {
	kinds := Replies(p)
	if len(kinds) == 0 {
		return
	}
	t.qmu.Lock()
	defer t.qmu.Unlock()
	for _, k := range kinds {
		for i, a := range t.pending {
			if a.kind == k {
				t.pending = append(t.pending[:i], t.pending[i+1:]...)
				break
			}
		}
	}
}

// Answered returns how many answers the Terminal wrote.
func (t *Terminal) Answered() int {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	return t.sent
}

func (t *Terminal) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// readAnswers takes the emulator's answers as it produces them. The
// emulator writes each answer into a synchronous pipe while it parses the
// query, so this goroutine must always be reading.
func (t *Terminal) readAnswers() {
	defer t.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := t.emu.Read(buf)
		if err != nil {
			return
		}
		b := buf[:n]
		switch {
		case n == 1 && b[0] == fence[0]:
			continue
		case n == 1 && b[0] == stop[0]:
			return
		}
		t.queue(append([]byte(nil), b...))
	}
}

func (t *Terminal) queue(data []byte) {
	t.qmu.Lock()
	due := t.cfg.Now()
	if t.attached > 0 {
		due = due.Add(t.cfg.Grace)
	}
	t.pending = append(t.pending, &answer{kind: replyKind(data), data: data, due: due})
	t.qmu.Unlock()
	t.poke()
}

// sendAnswers writes the answers that fell due, oldest first.
func (t *Terminal) sendAnswers() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a, wait := t.next()
		if a != nil {
			ctx, cancel := context.WithTimeout(t.ctx, replyTimeout)
			// An answer that cannot be written (the shell ended, or it has
			// no terminal to answer) is simply lost, and not counted.
			if t.cfg.Reply(ctx, a.data) == nil {
				t.qmu.Lock()
				t.sent++
				t.qmu.Unlock()
			}
			cancel()
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-t.ctx.Done():
			return
		case <-t.wake:
		case <-timer.C:
		}
	}
}

// next pops the oldest answer if it is due, or returns how long to wait
// for it. An answer waiting for clients falls due
// at once when the last one detaches.
func (t *Terminal) next() (*answer, time.Duration) {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	if len(t.pending) == 0 {
		return nil, time.Hour
	}
	a := t.pending[0]
	wait := a.due.Sub(t.cfg.Now())
	if wait > 0 && t.attached > 0 {
		return nil, wait
	}
	t.pending = t.pending[1:]
	return a, 0
}
