package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// rawStream is a stream of kind k over r, without a connection, for the
// tests of the parser.
func rawStream(k streamKind, r io.Reader, maxEvent int) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	return newStream(ctx, cancel, k, io.NopCloser(r), maxEvent, "", 0)
}

// readRaw reads raw events until the parser's first error.
func readRaw(s *Stream) ([]RawEvent, error) {
	var evs []RawEvent
	for {
		ev, err := s.next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

type wantEvent struct {
	id, typ, data string
}

func TestSSEParsing(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		want   []wantEvent
		end    error
		lastID string
	}{
		{name: "gateway format: id, data, event", in: "id: 1\ndata: {\"a\":1}\nevent: stdout\n\n",
			want: []wantEvent{{"1", "stdout", `{"a":1}`}}, end: io.EOF, lastID: "1"},
		{name: "event, id, data", in: "event: exit\nid: 2\ndata: {}\n\n", want: []wantEvent{{"2", "exit", "{}"}}, end: io.EOF, lastID: "2"},
		{name: "data, event, id", in: "data: x\nevent: gap\nid: 3\n\n", want: []wantEvent{{"3", "gap", "x"}}, end: io.EOF, lastID: "3"},
		{name: "multi-line data", in: "id: 4\ndata: line1\ndata: line2\ndata\ndata:line4\ndata:  indented\n\n",
			want: []wantEvent{{"4", "message", "line1\nline2\n\nline4\n indented"}}, end: io.EOF, lastID: "4"},
		{name: "comments and heartbeats", in: ": heartbeat\n\n:hb\n\nid: 5\n: in the middle\ndata: a\n\n: heartbeat\n\n",
			want: []wantEvent{{"5", "message", "a"}}, end: io.EOF, lastID: "5"},
		{name: "CRLF", in: "id: 6\r\nevent: stdout\r\ndata: a\r\ndata: b\r\n\r\n: hb\r\n\r\nid: 7\r\ndata: c\r\n\r\n",
			want: []wantEvent{{"6", "stdout", "a\nb"}, {"7", "message", "c"}}, end: io.EOF, lastID: "7"},
		{name: "CR only", in: "id: 8\rdata: a\r\rdata: b\r\r", want: []wantEvent{{"8", "message", "a"}, {"8", "message", "b"}}, end: io.EOF, lastID: "8"},
		{name: "mixed line ends", in: "id: 9\r\ndata: a\rdata: b\n\r\n", want: []wantEvent{{"9", "message", "a\nb"}}, end: io.EOF, lastID: "9"},
		{name: "BOM", in: "\xEF\xBB\xBFdata: bom\n\n", want: []wantEvent{{"", "message", "bom"}}, end: io.EOF},
		{name: "id persists, empty id resets", in: "id: 10\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			want: []wantEvent{{"10", "message", "a"}, {"10", "message", "b"}, {"", "message", "c"}}, end: io.EOF, lastID: ""},
		{name: "id without data moves the last id only", in: "id: 11\nevent: x\n\ndata: y\n\n",
			want: []wantEvent{{"11", "message", "y"}}, end: io.EOF, lastID: "11"},
		{name: "id with NUL ignored", in: "id: 12\ndata: a\n\nid: 1\x003\ndata: b\n\n",
			want: []wantEvent{{"12", "message", "a"}, {"12", "message", "b"}}, end: io.EOF, lastID: "12"},
		{name: "unknown fields and retry", in: "foo: bar\nretry: 1500\nretry: x\nid: 13\ndata: a\n\n",
			want: []wantEvent{{"13", "message", "a"}}, end: io.EOF, lastID: "13"},
		{name: "empty data line dispatches empty data", in: "event: e\ndata\n\n", want: []wantEvent{{"", "e", ""}}, end: io.EOF},
		{name: "incomplete event at EOF is dropped", in: "id: 14\ndata: a\n\nid: 15\ndata: {\"seq\":15,",
			want: []wantEvent{{"14", "message", "a"}}, end: io.ErrUnexpectedEOF, lastID: "14"},
		{name: "terminated lines but no blank line", in: "id: 16\ndata: a\n",
			want: nil, end: io.ErrUnexpectedEOF, lastID: ""},
		{name: "trailing comment without blank line is a clean end", in: "data: a\n\n: bye", want: []wantEvent{{"", "message", "a"}}, end: io.EOF},
		{name: "empty stream", in: "", end: io.EOF},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	}
	for _, tc := range cases {
		for rname, mk := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				s := rawStream(processStream, mk(tc.in), DefaultMaxEventSize)
				defer s.Close()
				evs, err := readRaw(s)
				if err != tc.end {
					t.Fatalf("end %v, want %v", err, tc.end)
				}
				if len(evs) != len(tc.want) {
					t.Fatalf("%d events %+v, want %d", len(evs), evs, len(tc.want))
				}
				for i, w := range tc.want {
					if evs[i].ID != w.id || evs[i].Type != w.typ || string(evs[i].Data) != w.data {
						t.Errorf("event %d = {%q %q %q}, want %+v", i, evs[i].ID, evs[i].Type, evs[i].Data, w)
					}
				}
				if s.LastEventID() != tc.lastID {
					t.Errorf("LastEventID %q, want %q", s.LastEventID(), tc.lastID)
				}
				// The end is the end: reading again says the same.
				if _, err2 := s.next(); err2 != err {
					t.Errorf("second next: %v", err2)
				}
			})
		}
	}
}

// TestStreamNextEnds checks how Next reports each way a stream ends, and
// that the end is sticky.
func TestStreamNextEnds(t *testing.T) {
	exit := "id: 1\nevent: exit\ndata: {\"exitCode\":0}\n\n"
	for _, tc := range []struct {
		name   string
		in     string
		events int
		end    func(error) bool
	}{
		{"a final event is io.EOF", exit + exit, 1, func(err error) bool { return err == io.EOF }},
		{"a clean end without a final event was a cut", "id: 1\ndata: {\"seq\":1,\"data\":\"a\"}\nevent: stdout\n\n", 1,
			func(err error) bool { return err == io.ErrUnexpectedEOF }},
		{"an empty stream was a cut", "", 0, func(err error) bool { return err == io.ErrUnexpectedEOF }},
		{"a cut inside an event", "id: 1\nevent: exit\ndata: {", 0, func(err error) bool { return err == io.ErrUnexpectedEOF }},
		{"data that is not JSON", "event: exit\ndata: nope\n\n" + exit, 0, func(err error) bool { return err != nil && err != io.EOF }},
		{"an event too large", "data: " + strings.Repeat("x", 100) + "\n\n" + exit, 0, func(err error) bool { return errors.Is(err, ErrEventTooLarge) }},
		{"an error event", "event: error\ndata: {\"code\":\"unavailable\",\"detail\":\"bye\"}\n\n" + exit, 0,
			func(err error) bool { return CodeOf(err) == CodeUnavailable }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rawStream(processStream, strings.NewReader(tc.in), 64)
			defer s.Close()
			n := 0
			var err error
			for {
				var ev Event
				if ev, err = s.Next(context.Background()); err != nil {
					break
				}
				if ev == nil {
					t.Fatal("nil event without an error")
				}
				n++
			}
			if n != tc.events || !tc.end(err) {
				t.Fatalf("%d events, end %v", n, err)
			}
			for range 2 {
				if ev, err2 := s.Next(context.Background()); ev != nil || err2 != err {
					t.Fatalf("Next after the end: %v, %v; want %v", ev, err2, err)
				}
			}
		})
	}
}

func TestSSERetryField(t *testing.T) {
	s := rawStream(processStream, strings.NewReader("retry: 1500\ndata: a\n\n"), DefaultMaxEventSize)
	defer s.Close()
	if _, err := s.next(); err != nil {
		t.Fatal(err)
	}
	if s.Retry() != 1500*time.Millisecond {
		t.Fatalf("retry %v", s.Retry())
	}
}

func TestSSEOversizedEvent(t *testing.T) {
	t.Run("one long line", func(t *testing.T) {
		s := rawStream(processStream, strings.NewReader("data: ok\n\ndata: "+strings.Repeat("x", 2000)+"\n\n"), 1024)
		defer s.Close()
		if _, err := s.next(); err != nil {
			t.Fatal(err)
		}
		_, err := s.next()
		if !errors.Is(err, ErrEventTooLarge) || !strings.Contains(err.Error(), "1024") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("many data lines", func(t *testing.T) {
		in := strings.Repeat("data: "+strings.Repeat("y", 100)+"\n", 20) + "\n"
		s := rawStream(processStream, strings.NewReader(in), 1024)
		defer s.Close()
		if _, err := s.next(); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("at the limit passes", func(t *testing.T) {
		in := "data: " + strings.Repeat("z", 1023) + "\n\n"
		s := rawStream(processStream, strings.NewReader(in), 1024)
		defer s.Close()
		ev, err := s.next()
		if err != nil || len(ev.Data) != 1023 {
			t.Fatalf("len %d, err %v", len(ev.Data), err)
		}
	})
}

// FuzzSSE feeds arbitrary bytes to the parser: it never panics, never
// returns an event larger than the limit, with a NUL in its id or a CR in
// its data, and once Next returned an error it returns no more events.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"id: 1\ndata: {\"a\":1}\nevent: stdout\n\n",
		"id: 6\r\nevent: stdout\r\ndata: a\r\ndata: b\r\n\r\n: hb\r\n\r\n",
		"id: 8\rdata: a\r\rdata: b\r\r",
		"\xEF\xBB\xBFdata: bom\n\nid\ndata: c\n\n",
		"id: 1\x003\ndata: b\n\nretry: 1500\nfoo: bar\n",
		"data: " + strings.Repeat("x", 70) + "\n\ndata: y\n\n",
		"event: error\ndata: {\"code\":\"conflict\"}\n\n",
		"event: end\ndata: {\"state\":\"closed\"}\n\ndata: after\n\n",
		"event: durable\ndata: {\"sequence\":1}\n\nevent: overflow\ndata: nope\n\n",
	} {
		f.Add([]byte(s))
	}
	const maxEvent = 64
	f.Fuzz(func(t *testing.T, in []byte) {
		// The raw parser, to its first error.
		s := rawStream(processStream, bytes.NewReader(in), maxEvent)
		for {
			ev, err := s.next()
			if err != nil {
				break
			}
			if len(ev.Data) > maxEvent {
				t.Fatalf("event of %d bytes, limit %d", len(ev.Data), maxEvent)
			}
			if ev.Type == "" || strings.IndexByte(ev.ID, 0) >= 0 || bytes.IndexByte(ev.Data, '\r') >= 0 {
				t.Fatalf("event %+v", ev)
			}
		}
		if strings.IndexByte(s.LastEventID(), 0) >= 0 {
			t.Fatalf("last event id %q", s.LastEventID())
		}
		s.Close()

		// Decoded, as a session stream (whose unknown events need no
		// JSON): no event after an error.
		s = rawStream(sessionStream, bytes.NewReader(in), maxEvent)
		defer s.Close()
		var end error
		for range len(in) + 2 {
			ev, err := s.Next(context.Background())
			switch {
			case end != nil && (ev != nil || err != end):
				t.Fatalf("Next after %v: %v, %v", end, ev, err)
			case end == nil && err != nil:
				end = err
			case end == nil && ev == nil:
				t.Fatal("nil event without an error")
			}
		}
		if end == nil {
			t.Fatal("more events than bytes")
		}
	})
}
