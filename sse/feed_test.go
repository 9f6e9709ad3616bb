package sse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// feedServer serves a shared feed of l on a real loopback server: each
// entry is a "line" event, the end is EndEvent's. It returns the hub and
// the server's address; counts tells how many clients are open and how
// many releases ran.
type feedServer struct {
	hub      *Hub
	addr     string
	open     atomic.Int64
	released atomic.Int64
}

func newFeedServer(t *testing.T, l *streamlog.Log[string], heartbeat time.Duration) *feedServer {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	fs := &feedServer{}
	fs.hub = NewHub(Config{Heartbeat: heartbeat, OnCount: func(d int) { fs.open.Add(int64(d)) }, Refuse: refuse, Log: zerolog.Nop()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after, _, err := LastEventID(r)
		if err != nil {
			refuse(w, r, err)
			return
		}
		fs.hub.ServeFeed(w, r, after, LogFeed[string]{Log: l, Render: func(e streamlog.Entry[string]) Event {
			return Event{ID: strconv.FormatUint(e.Seq, 10), Event: "line", Data: []byte(strconv.Quote(e.V))}
		}}, func() { fs.released.Add(1) })
	}))
	fs.addr = srv.Listener.Addr().String()
	t.Cleanup(func() {
		srv.Close()
		fs.hub.Close()
		if n := fs.open.Load(); n != 0 {
			t.Errorf("%d clients still open after close", n)
		}
		// Every goroutine of the hub, of r3labs and of the clients' reads
		// is gone (the test's own connections are closed before this).
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines after close, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
		}
	})
	return fs
}

// refuse writes a refusal as the handlers' problem documents do, by its
// code: 503 for a stream refused while the gateway shuts down, 400 for a
// malformed Last-Event-ID.
func refuse(w http.ResponseWriter, _ *http.Request, err error) {
	status := http.StatusInternalServerError
	switch gateway.ErrorCode(err) {
	case gateway.CodeUnavailable:
		status = http.StatusServiceUnavailable
	case gateway.CodeInvalidArgument:
		status = http.StatusBadRequest
	}
	http.Error(w, gateway.ErrorMessage(err), status)
}

// feedClient is one client's raw HTTP/1.1 connection to a feed.
type feedClient struct {
	conn net.Conn
	body *bufio.Reader // the response body, unchunked
}

func (fs *feedServer) dial(t *testing.T, proto, lastEventID string) *feedClient {
	t.Helper()
	conn, err := net.Dial("tcp", fs.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := "GET /events " + proto + "\r\nHost: x\r\n"
	if lastEventID != "" {
		req += "Last-Event-ID: " + lastEventID + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
	}
	return &feedClient{conn: conn, body: bufio.NewReader(resp.Body)}
}

// feedFrame is one event as a client read it.
type feedFrame struct{ id, event, data string }

// readAll reads frames until the stream ends; heartbeats are skipped.
func (c *feedClient) readAll(t *testing.T) (frames []feedFrame, raw []byte) {
	t.Helper()
	raw, err := io.ReadAll(c.body)
	if err != nil {
		t.Fatalf("body: %v (so far %q)", err, raw)
	}
	return parseFrames(raw), raw
}

// next reads one frame; heartbeats are skipped.
func (c *feedClient) next() (feedFrame, error) {
	var block []byte
	for {
		line, err := c.body.ReadBytes('\n')
		if err != nil {
			return feedFrame{}, err
		}
		if len(line) == 1 && len(block) > 0 {
			if frames := parseFrames(block); len(frames) == 1 {
				return frames[0], nil
			}
			block = block[:0]
			continue
		}
		block = append(block, line...)
	}
}

func parseFrames(raw []byte) []feedFrame {
	var frames []feedFrame
	for block := range strings.SplitSeq(string(raw), "\n\n") {
		var f feedFrame
		for line := range strings.SplitSeq(block, "\n") {
			switch k, v, _ := strings.Cut(line, ": "); k {
			case "id":
				f.id = v
			case "event":
				f.event = v
			case "data":
				f.data = v
			}
		}
		if f.id != "" || f.event != "" {
			frames = append(frames, f)
		}
	}
	return frames
}

// wantLines is what a client resuming after `after` must read of a log of
// entries 1..n: each entry once, in order, then the end.
func wantLines(after, n int) []feedFrame {
	var want []feedFrame
	for i := after + 1; i <= n; i++ {
		want = append(want, feedFrame{strconv.Itoa(i), "line", strconv.Quote("line " + strconv.Itoa(i))})
	}
	return append(want, feedFrame{strconv.Itoa(n), "end", "{}"})
}

func appendLines(l *streamlog.Log[string], from, to int) {
	for i := from; i <= to; i++ {
		l.Append(0, 8, "line "+strconv.Itoa(i))
	}
}

func sameFrames(t *testing.T, who string, got, want []feedFrame) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s read\n%v\nwant\n%v", who, got, want)
	}
}

// TestSharedFeedResume: clients that join before, during and after the
// events, resuming from anywhere, each read every event after their point
// exactly once and in order, then the end; HTTP/1.0 clients get the same
// from a stream of their own.
func TestSharedFeedResume(t *testing.T) {
	l := streamlog.New[string](1 << 20)
	fs := newFeedServer(t, l, time.Hour)
	early := fs.dial(t, "HTTP/1.1", "")
	appendLines(l, 1, 3)
	resumed := fs.dial(t, "HTTP/1.1", "2")
	old := fs.dial(t, "HTTP/1.0", "1")
	appendLines(l, 4, 5)
	l.Close(nil)
	late := fs.dial(t, "HTTP/1.1", "4")
	for _, c := range []struct {
		name   string
		client *feedClient
		after  int
	}{{"early", early, 0}, {"resumed", resumed, 2}, {"HTTP/1.0", old, 1}, {"late", late, 4}} {
		got, _ := c.client.readAll(t)
		sameFrames(t, c.name, got, wantLines(c.after, 5))
	}
	eventually(t, func() bool { return fs.open.Load() == 0 && fs.released.Load() == 4 })
	fs.hub.mu.Lock()
	defer fs.hub.mu.Unlock()
	if len(fs.hub.topics) != 0 || len(fs.hub.conns) != 0 {
		t.Errorf("after the end: %d topics, %d clients", len(fs.hub.topics), len(fs.hub.conns))
	}
}

// TestSharedFeedConcurrentJoins: clients joining at random points while
// entries are appended never miss or repeat one (the backlog and the live
// events meet without a gap or an overlap).
func TestSharedFeedConcurrentJoins(t *testing.T) {
	const n, clients = 300, 24
	l := streamlog.New[string](1 << 20)
	fs := newFeedServer(t, l, time.Hour)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= n; i++ {
			l.Append(0, 8, "line "+strconv.Itoa(i))
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		l.Close(nil)
	})
	for i := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
			after := 0
			if i%2 == 1 {
				after = min(int(l.LastSeq()), rand.IntN(n))
			}
			c := fs.dial(t, "HTTP/1.1", strconv.Itoa(after))
			got, _ := c.readAll(t)
			sameFrames(t, fmt.Sprintf("client %d after %d", i, after), got, wantLines(after, n))
		})
	}
	wg.Wait()
	eventually(t, func() bool { return fs.open.Load() == 0 && fs.released.Load() == clients })
}

// TestSharedFeedBacklogWire: an event a client gets from its backlog is
// byte for byte the frame r3labs writes for it live.
func TestSharedFeedBacklogWire(t *testing.T) {
	l := streamlog.New[string](1 << 20)
	fs := newFeedServer(t, l, time.Hour)
	live := fs.dial(t, "HTTP/1.1", "")
	time.Sleep(100 * time.Millisecond)
	appendLines(l, 1, 2)
	eventually(t, func() bool { return l.LastSeq() == 2 })
	backlog := fs.dial(t, "HTTP/1.1", "")
	l.Close(nil)
	_, a := live.readAll(t)
	_, b := backlog.readAll(t)
	if !bytes.Equal(a, b) || !bytes.HasPrefix(a, []byte("id: 1\ndata: \"line 1\"\nevent: line\n\n")) {
		t.Errorf("live\n%q\nbacklog\n%q", a, b)
	}
}

// TestSharedFeedSlowClient: a client that reads nothing never holds the
// others back. Once its queue is full it falls behind and follows the log
// at its own pace: when it reads again it gets every event still in the
// log, in order, with a gap event for those the log dropped, and the end.
func TestSharedFeedSlowClient(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	const n, step = 256, 8 // 16 MiB: past the queue and the socket buffers
	for _, c := range []struct {
		name    string
		logSize int
		gap     bool
		drain   bool // the gateway drains instead of the log ending
	}{
		{"log keeps all", 64 << 20, false, false},
		{"log drops", 4 << 20, true, false},
		{"gateway drains", 64 << 20, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := streamlog.New[string](c.logSize)
			fs := newFeedServer(t, l, time.Hour)
			slow := fs.dial(t, "HTTP/1.1", "")
			fast := fs.dial(t, "HTTP/1.1", "")
			// The fast client reads each step before the next, so only the
			// slow one falls behind.
			read := make(chan int, n+1)
			done := make(chan []feedFrame, 1)
			go func() {
				var frames []feedFrame
				for {
					f, err := fast.next()
					if err != nil {
						done <- frames
						return
					}
					frames = append(frames, f)
					read <- len(frames)
				}
			}()
			for i := 0; i < n; i += step {
				for range step {
					l.Append(0, len(big), big)
				}
				for got := 0; got < i+step; {
					select {
					case got = <-read:
					case <-time.After(20 * time.Second):
						t.Fatalf("the fast client read %d frames of %d", got, i+step)
					}
				}
			}
			// The slow client fell behind; its writer waits for it.
			eventually(t, func() bool {
				fs.hub.mu.Lock()
				defer fs.hub.mu.Unlock()
				behind := 0
				for c := range fs.hub.conns {
					c.mu.Lock()
					if c.behind {
						behind++
					}
					c.mu.Unlock()
				}
				return behind == 1
			})
			end := "end"
			if c.drain {
				end = "error"
				fs.hub.Drain()
			} else {
				l.Close(nil)
			}
			if frames := <-done; len(frames) != n+1 || frames[n].event != end {
				t.Fatalf("the fast client read %d frames, want %d and %s", len(frames), n+1, end)
			}
			frames, _ := slow.readAll(t)
			next, gaps := 1, 0
			for _, f := range frames[:len(frames)-1] {
				id, _ := strconv.Atoi(f.id)
				switch {
				case f.event == "gap" && id >= next:
					gaps++
					next = id + 1
				case f.event == "line" && id == next:
					next++
				default:
					t.Fatalf("the slow client read %+v after %d", f, next-1)
				}
			}
			if last := frames[len(frames)-1]; last.event != end || next != n+1 || (gaps > 0) != c.gap || (c.drain && last.data != shutdownEventData) {
				t.Fatalf("the slow client ended with %+v at %d, %d gaps; want %s at %d, gap %v", last, next-1, gaps, end, n, c.gap)
			}
			eventually(t, func() bool { return fs.open.Load() == 0 && fs.released.Load() == 2 })
		})
	}
}

// TestSharedFeedHangUpAndDrain: a client that hangs up is forgotten at once
// (its release runs, the topic goes with its last client); draining ends
// every stream with the shutdown event; heartbeats reach idle clients.
func TestSharedFeedHangUpAndDrain(t *testing.T) {
	l := streamlog.New[string](1 << 20)
	fs := newFeedServer(t, l, 50*time.Millisecond)
	gone := fs.dial(t, "HTTP/1.1", "")
	stays := fs.dial(t, "HTTP/1.1", "")
	eventually(t, func() bool { return fs.open.Load() == 2 })
	gone.conn.Close()
	eventually(t, func() bool { return fs.open.Load() == 1 && fs.released.Load() == 1 })
	line, err := stays.body.ReadString('\n')
	if err != nil || line != ": heartbeat\n" {
		t.Fatalf("first line %q, %v; want a heartbeat", line, err)
	}
	appendLines(l, 1, 1)
	eventually(t, func() bool { return l.LastSeq() == 1 })
	time.Sleep(100 * time.Millisecond)
	fs.hub.Drain()
	frames, _ := stays.readAll(t)
	last := frames[len(frames)-1]
	if last.event != "error" || last.data != shutdownEventData || last.id != "1" {
		t.Errorf("last frame %+v; want the shutdown error with id 1", last)
	}
	eventually(t, func() bool { return fs.open.Load() == 0 && fs.released.Load() == 2 })
	rec := httptest.NewRecorder()
	fs.hub.ServeFeed(rec, httptest.NewRequest("GET", "/events", nil), 0, LogFeed[string]{Log: l}, func() {})
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a stream after drain: %d, want 503", rec.Code)
	}
}

// TestSharedFeedCloseAtOnce: Close right after streams opened, without a
// Drain before it (a gateway whose HTTP server had no request to wait
// for), still ends every stream with the shutdown event and the chunked
// body's end. It once cut the clients' sockets while their final events
// were being written, and a stream being set up as Close began was closed
// with nothing on it (the gateway's SIGTERM test saw an empty body).
func TestSharedFeedCloseAtOnce(t *testing.T) {
	const clients = 16
	for round := range 8 {
		l := streamlog.New[string](1 << 20)
		fs := newFeedServer(t, l, time.Hour)
		appendLines(l, 1, 2)
		conns := make([]*feedClient, clients)
		for i := range conns {
			conns[i] = fs.dial(t, "HTTP/1.1", "")
		}
		eventually(t, func() bool { return fs.open.Load() == clients })
		fs.hub.Close()
		for i, c := range conns {
			frames, _ := c.readAll(t)
			if len(frames) == 0 || frames[len(frames)-1].event != "error" || frames[len(frames)-1].data != shutdownEventData {
				t.Fatalf("round %d, client %d read %v; want the shutdown event last", round, i, frames)
			}
		}
		if n := fs.open.Load(); n != 0 {
			t.Fatalf("round %d: %d clients open after Close", round, n)
		}
	}
}

func TestNewLiveFrame(t *testing.T) {
	for _, c := range []struct {
		e     Event
		frame string
		id    uint64
		event string
		ok    bool
	}{
		{Event{ID: "42", Event: "exit", Data: []byte("{}")}, "id: 42\ndata: {}\nevent: exit\n\n", 42, "exit", true},
		{Event{ID: "7", Data: []byte(`{"a":"event: end"}`)}, "id: 7\ndata: {\"a\":\"event: end\"}\n\n", 7, "", true},
		{Event{Data: []byte("{}")}, "id: \ndata: {}\n\n", 0, "", false},
		{Event{ID: "18446744073709551615", Event: "line", Data: []byte("x")}, "id: 18446744073709551615\ndata: x\nevent: line\n\n", 1<<64 - 1, "line", true},
	} {
		f := newLiveFrame(c.e)
		if string(f.b) != c.frame || f.id != c.id || f.event != c.event || f.hasID != c.ok {
			t.Errorf("newLiveFrame(%+v) = %q %d %q %v, want %q %d %q %v", c.e, f.b, f.id, f.event, f.hasID, c.frame, c.id, c.event, c.ok)
		}
	}
	if heartbeatFrame.hasID {
		t.Error("a heartbeat frame has an id")
	}
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
