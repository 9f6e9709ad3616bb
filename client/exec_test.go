package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// sink is a writer that logs every write with its stream's name, so that
// the order across stdout and stderr shows.
type sink struct {
	name string
	log  *[]string
	mu   *sync.Mutex
	err  error
}

func (s sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.log = append(*s.log, s.name+":"+string(p))
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

func outputEvent(seq int, stream, data, encoding string) string {
	return fmt.Sprintf("id: %d\nevent: %s\ndata: {\"seq\":%d,\"stream\":%q,\"data\":%q,\"encoding\":%q,\"ts\":\"2025-01-02T03:04:05Z\"}\n\n",
		seq, stream, seq, stream, data, encoding)
}

// TestExecIntoWriters runs Exec with Stdout and Stderr sinks against an
// event stream: the bytes reach them in order, and the exit status is the
// result.
func TestExecIntoWriters(t *testing.T) {
	stream := outputEvent(1, "stdout", "one ", "utf8") + ": heartbeat\n\n" +
		outputEvent(2, "stderr", "warn", "utf8") +
		outputEvent(3, "stdout", "AP8=", "base64") +
		outputEvent(4, "stdout", " two", "utf8") +
		"id: 4\nevent: exit\ndata: {\"exitCode\":3,\"signal\":null,\"truncated\":true,\"durationMs\":1500}\n\n"
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		if r.Header.Get("Accept") != sseCT {
			http.Error(w, "want a stream", http.StatusNotAcceptable)
			return
		}
		send := startSSE(w)
		for _, ev := range strings.SplitAfter(stream, "\n\n") {
			send(ev)
		}
	}))
	defer srv.Close()
	vm := newClient(t, srv.URL).VM("vm")

	for _, tc := range []struct {
		name           string
		stdout, stderr bool
		want           string
	}{
		{"both", true, true, "out:one |err:warn|out:\x00\xff|out: two"},
		{"stdout only: stderr is dropped", true, false, "out:one |out:\x00\xff|out: two"},
		{"stderr only", false, true, "err:warn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log []string
			var mu sync.Mutex
			req := client.ExecRequest{Command: "x", Timeout: time.Second}
			if tc.stdout {
				req.Stdout = sink{name: "out", log: &log, mu: &mu}
			}
			if tc.stderr {
				req.Stderr = sink{name: "err", log: &log, mu: &mu}
			}
			res, err := vm.Exec(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(log, "|"); got != tc.want {
				t.Fatalf("writes %q, want %q", got, tc.want)
			}
			if res.ExitCode != 3 || res.Signal != "" || !res.Truncated || res.Duration != 1500*time.Millisecond || res.Stdout != nil || res.Stderr != nil {
				t.Fatalf("result %+v", res)
			}
			var sent map[string]any
			if err := json.Unmarshal(body, &sent); err != nil || len(sent) != 2 || sent["command"] != "x" || sent["timeoutMs"] != float64(1000) {
				t.Fatalf("request body %s (%v): the writers must not travel", body, err)
			}
		})
	}
}

// TestExecIntoWritersEnds checks how a streamed Exec ends when it cannot
// finish: a writer's error stops the stream, and an error event or a cut
// connection is the call's error.
func TestExecIntoWritersEnds(t *testing.T) {
	broken := errors.New("disk full")
	for _, tc := range []struct {
		name   string
		stream string
		hang   bool // the server keeps the stream open after it
		sink   error
		check  func(error) bool
		writes int
	}{
		{"a writer error stops the stream", outputEvent(1, "stdout", "a", "utf8"), true, broken,
			func(err error) bool { return errors.Is(err, broken) }, 1},
		{"an error event", outputEvent(1, "stdout", "a", "utf8") + "id: 1\nevent: error\ndata: {\"code\":\"deadline_exceeded\",\"detail\":\"the command ran past 1s\"}\n\n", false, nil,
			func(err error) bool { return client.IsCode(err, client.CodeDeadlineExceeded) }, 1},
		{"a cut before the exit", outputEvent(1, "stdout", "a", "utf8"), false, nil,
			func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }, 1},
		{"a bad event", "id: 1\nevent: stdout\ndata: {\"data\":\"!!\",\"encoding\":\"base64\"}\n\n", false, nil,
			func(err error) bool { var e *client.Error; return err != nil && !errors.As(err, &e) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(gone)
				startSSE(w)(tc.stream)
				if tc.hang {
					<-r.Context().Done()
				}
			}))
			defer srv.Close()
			var log []string
			var mu sync.Mutex
			res, err := newClient(t, srv.URL).VM("vm").Exec(context.Background(),
				client.ExecRequest{Command: "x", Stdout: sink{name: "out", log: &log, mu: &mu, err: tc.sink}})
			if res != nil || !tc.check(err) {
				t.Fatalf("result %+v, err %v", res, err)
			}
			if len(log) != tc.writes {
				t.Fatalf("writes %q", log)
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the stream was left open")
			}
		})
	}
}
