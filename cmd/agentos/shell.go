package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// reconnectFor bounds how long a dropped shell connection is retried.
const reconnectFor = 60 * time.Second

func (a *app) shellCommand() *cobra.Command {
	var shell, cwd string
	cmd := &cobra.Command{
		Use:   "shell VM",
		Short: "Open an interactive shell in a VM",
		Long: `shell opens a shell in a VM and attaches this terminal to it (raw mode) over
the gateway's attach WebSocket; the terminal's size follows the window's.
When the connection drops it reconnects and resumes the output where it
stopped. It exits with the shell's exit status (exit N, or Ctrl-D at an empty
prompt).`,
		Args: args(1, "one VM id"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.runShell(cmd.Context(), argv[0], client.ShellRequest{Shell: shell, Cwd: cwd})
		},
	}
	cmd.Flags().StringVar(&shell, "shell", "", "the shell, sh or bash (default sh)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "the shell's working directory")
	return cmd
}

// terminalSize is the size of the first of the files that is a terminal.
func terminalSize(files ...any) (cols, rows uint16, ok bool) {
	for _, f := range files {
		if file, isFile := f.(*os.File); isFile {
			if w, h, err := term.GetSize(int(file.Fd())); err == nil && w > 0 && h > 0 {
				return uint16(min(w, 1000)), uint16(min(h, 1000)), true
			}
		}
	}
	return 0, 0, false
}

func (a *app) runShell(ctx context.Context, vmID string, req client.ShellRequest) error {
	c, key, err := a.client()
	if err != nil {
		return err
	}
	if cols, rows, ok := terminalSize(a.stdout, a.stdin); ok {
		req.Cols, req.Rows = cols, rows
	}
	sh, err := c.VM(vmID).OpenShell(ctx, req)
	if err != nil {
		return fmt.Errorf("open a shell in VM %s: %w", vmID, err)
	}
	s := &shellConn{
		a: a, key: key, vm: vmID, id: sh.ID(),
		input:  make(chan []byte, 64),
		resize: make(chan [2]uint16, 1),
	}
	s.url, err = attachURL(c.BaseURL(), vmID, sh.ID())
	if err != nil {
		return err
	}
	defer func() {
		if !s.ended {
			// The command stops before the shell did (an error, a
			// signal): end it rather than leave it running unseen.
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = sh.Close(cctx)
		}
	}()

	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
		s.raw = true
	}
	go s.readInput()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer func() {
		signal.Stop(winch)
		close(winch)
	}()
	go func() {
		for range winch {
			if cols, rows, ok := terminalSize(a.stdout, a.stdin); ok {
				// Only the latest size matters: replace a pending one.
				select {
				case <-s.resize:
				default:
				}
				s.resize <- [2]uint16{cols, rows}
			}
		}
	}()
	return s.run(ctx)
}

// attachURL is the WebSocket URL of a shell's attach route.
func attachURL(base, vm, shell string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("gateway URL %q: %w", base, err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	return u.String() + "/v1/vms/" + url.PathEscape(vm) + "/shells/" + url.PathEscape(shell) + "/attach", nil
}

// shellConn is the terminal attached to one shell, across reconnections.
type shellConn struct {
	a      *app
	key    string
	vm, id string
	url    string
	raw    bool

	// input carries stdin's chunks; it is closed at the end of stdin.
	input  chan []byte
	resize chan [2]uint16

	// seq is the sequence of the last output frame written out, the
	// resume point of a reconnection.
	seq   uint64
	ended bool
	// stdinEnded is set once the end of stdin was sent as Ctrl-D.
	stdinEnded bool
}

// readInput sends stdin's bytes to input, in chunks the attach route takes.
func (s *shellConn) readInput() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.a.stdin.Read(buf)
		if n > 0 {
			s.input <- append([]byte(nil), buf[:n]...)
		}
		if err != nil {
			close(s.input)
			return
		}
	}
}

// frame is a control frame of the attach protocol.
type frame struct {
	Type     string  `json:"type"`
	Seq      *uint64 `json:"seq,omitempty"`
	From     uint64  `json:"from,omitempty"`
	To       uint64  `json:"to,omitempty"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   string  `json:"signal,omitempty"`
	Code     string  `json:"code,omitempty"`
	Detail   string  `json:"detail,omitempty"`
	Cols     uint16  `json:"cols,omitempty"`
	Rows     uint16  `json:"rows,omitempty"`
}

// errDropped says that the connection dropped before the shell ended.
var errDropped = errors.New("the connection to the shell dropped")

// run attaches, and attaches again after a dropped connection, until the
// shell ends; its exit status comes back as an exitError.
func (s *shellConn) run(ctx context.Context) error {
	var lostAt time.Time
	delay := 200 * time.Millisecond
	for {
		conn, err := s.dial(ctx)
		if err == nil {
			lostAt, delay = time.Time{}, 200*time.Millisecond
			err = s.serve(ctx, conn)
			if !errors.Is(err, errDropped) {
				return err
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else if !retryableDial(err) {
			return err
		}
		if lostAt.IsZero() {
			lostAt = time.Now()
			s.notice("connection lost, reconnecting")
		} else if time.Since(lostAt) > reconnectFor {
			return fmt.Errorf("attach to shell %s: gave up reconnecting after %s: %w", s.id, reconnectFor, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// notice prints a line on stderr, in raw mode too.
func (s *shellConn) notice(msg string) {
	nl := "\n"
	if s.raw {
		nl = "\r\n"
	}
	fmt.Fprint(s.a.stderr, nl+"agentos: "+msg+nl)
}

// dialError is an attach the gateway refused with an HTTP status.
type dialError struct {
	status int
	err    error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("attach to the shell: the gateway answered %d %s", e.status, http.StatusText(e.status))
}

func (e *dialError) Unwrap() error { return e.err }

// retryableDial says whether an attach may succeed later: not when the
// gateway refused it for good (a bad key, a shell that is gone).
func retryableDial(err error) bool {
	if de, ok := errors.AsType[*dialError](err); ok {
		return de.status == http.StatusTooManyRequests || de.status >= 500
	}
	return true
}

func (s *shellConn) dial(ctx context.Context) (*websocket.Conn, error) {
	q := url.Values{}
	if s.seq > 0 {
		q.Set("after", strconv.FormatUint(s.seq, 10))
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, s.url+"?"+q.Encode(), &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + s.key}, "User-Agent": {"agentos-cli/1"}},
		Subprotocols: []string{"agentos-gateway.v1"},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &dialError{status: resp.StatusCode, err: err}
		}
		return nil, fmt.Errorf("attach to shell %s: %w", s.id, err)
	}
	// Output frames are the gateway's chunks of the terminal, small; the
	// limit only guards against a broken peer.
	conn.SetReadLimit(8 << 20)
	return conn, nil
}

// serve runs one connection: output to stdout, stdin and window sizes to
// the shell. It returns the shell's end (an exitError, nil for status 0),
// errDropped when the connection ended first, or another error.
func (s *shellConn) serve(ctx context.Context, conn *websocket.Conn) (err error) {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.readFrames(cctx, conn) }()
	read := false
	defer func() {
		// The reader owns seq and ended until it returns: wait for it, so
		// that a reconnection resumes from its last frame.
		cancel()
		conn.CloseNow()
		if !read {
			<-done
		}
	}()
	// A connection that died silently (a laptop's sleep, a dropped
	// route) is noticed by pings going unanswered.
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(cctx, 10*time.Second)
				err := conn.Ping(pctx)
				pcancel()
				if err != nil {
					conn.CloseNow()
					return
				}
			}
		}
	}()

	input := s.input
	if s.stdinEnded {
		input = nil
	}
	for {
		var werr error
		select {
		case err := <-done:
			read = true
			return err
		case b, ok := <-input:
			if !ok {
				// The end of a non-terminal stdin is the end of the
				// user's input: Ctrl-D ends the shell at its prompt.
				input, s.stdinEnded = nil, true
				b = []byte{4}
			}
			werr = conn.Write(cctx, websocket.MessageBinary, b)
		case sz := <-s.resize:
			msg, _ := json.Marshal(frame{Type: "resize", Cols: sz[0], Rows: sz[1]})
			werr = conn.Write(cctx, websocket.MessageText, msg)
		}
		if werr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The reader tells whether the shell ended meanwhile.
			select {
			case err := <-done:
				read = true
				return err
			case <-time.After(time.Second):
				return fmt.Errorf("%w: %w", errDropped, werr)
			}
		}
	}
}

// readFrames writes the output to stdout and follows the control frames
// until the shell's exit frame or the connection's end.
func (s *shellConn) readFrames(ctx context.Context, conn *websocket.Conn) error {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %w", errDropped, err)
		}
		if typ == websocket.MessageBinary {
			s.seq++
			if _, err := s.a.stdout.Write(b); err != nil {
				return fmt.Errorf("write the shell's output: %w", err)
			}
			continue
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("attach to shell %s: a control frame is not JSON: %w", s.id, err)
		}
		switch f.Type {
		case "hello":
			if f.Seq != nil {
				s.seq = *f.Seq
			}
		case "gap":
			s.seq = f.To
			s.notice(fmt.Sprintf("output %d to %d was lost (the gateway's buffer no longer held it)", f.From, f.To))
		case "error":
			s.notice(fmt.Sprintf("the shell refused input: %s (%s)", f.Detail, f.Code))
		case "exit":
			s.ended = true
			_ = conn.Close(websocket.StatusNormalClosure, "")
			if f.ExitCode == nil {
				return fmt.Errorf("the shell's end is unknown: %s (%s)", f.Detail, f.Code)
			}
			if code := exitStatusCode(client.ExitStatus{ExitCode: *f.ExitCode, Signal: client.Signal(f.Signal)}); code != 0 {
				return exitError{code: code}
			}
			return nil
		}
	}
}
