package mockmodel

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Frame is one server-sent event of a model API's stream, as the mocks
// write it: an event name and one line of JSON data.
type Frame struct {
	Event string
	Data  map[string]any
}

// ReadFrame reads one frame; io.EOF at the end of the stream.
func ReadFrame(r *bufio.Reader) (Frame, error) {
	var f Frame
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && f.Event != "":
			return f, nil
		case strings.HasPrefix(line, "event: "):
			f.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &f.Data); err != nil {
				return f, err
			}
		}
	}
}

// ReadFrames reads the whole stream of resp and closes it. Both APIs repeat
// the event name as the data's "type": a frame whose type differs fails tb.
func ReadFrames(tb testing.TB, resp *http.Response) []Frame {
	tb.Helper()
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var out []Frame
	for {
		f, err := ReadFrame(r)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatalf("read the event stream: %v", err)
		}
		if f.Data["type"] != f.Event {
			tb.Fatalf("frame %q carries type %v", f.Event, f.Data["type"])
		}
		out = append(out, f)
	}
}
