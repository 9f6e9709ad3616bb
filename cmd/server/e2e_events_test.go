package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// event is a streamed event as the tests look at it: the raw SSE, which
// they check against openapi.yaml, and the value the client decoded from
// it (V), or, for a final error event, the *client.Error it carried (Err).
type event struct {
	client.RawEvent
	V   client.Event
	Err *client.Error
}

// next reads the next event of s. A final error event is returned as an
// event (with Err set), not as an error, so that a test sees every event
// the gateway sent; io.EOF follows it.
func next(ctx context.Context, s *client.Stream) (event, error) {
	v, err := s.Next(ctx)
	var e *client.Error
	if errors.As(err, &e) && e.Status == 0 {
		// The stream returns its final error again on every later call.
		if _, seen := endedStreams.LoadOrStore(s, true); seen {
			return event{}, io.EOF
		}
		return event{RawEvent: s.Raw(), Err: e}, nil
	}
	if err != nil {
		return event{}, err
	}
	return event{RawEvent: s.Raw(), V: v}, nil
}

// endedStreams holds the streams whose final error event next returned.
var endedStreams sync.Map

// firstEvent parses the first Server-Sent Event of a stream the client
// cannot open itself (a query parameter instead of a header).
func firstEvent(t testing.TB, r io.Reader) client.RawEvent {
	t.Helper()
	var ev client.RawEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		field, value, _ := strings.Cut(sc.Text(), ": ")
		switch field {
		case "":
			if ev.Type != "" || ev.Data != nil {
				return ev
			}
		case "id":
			ev.ID = value
		case "event":
			ev.Type = value
		case "data":
			ev.Data = append(ev.Data, value...)
		}
	}
	t.Fatalf("the stream ended before an event: %v", sc.Err())
	return ev
}

// Final reports whether the event ends its stream.
func (e event) Final() bool {
	return e.Type == "exit" || e.Type == "end" || e.Type == "error" || e.Type == "lost"
}

// Decode unmarshals the raw data into v.
func (e event) Decode(v any) error { return json.Unmarshal(e.Data, v) }

func as[T any](e event) (T, error) {
	v, ok := e.V.(*T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("event %q is a %T, not a %T", e.Type, e.V, zero)
	}
	return *v, nil
}

// Output is the event's *client.Output.
func (e event) Output() (client.Output, error) { return as[client.Output](e) }

// Exit is the event's *client.Exit.
func (e event) Exit() (client.Exit, error) { return as[client.Exit](e) }

// ShellEnd is the exit status of a shell's end event.
func (e event) ShellEnd() (client.ExitStatus, error) {
	x, err := as[client.ShellEnd](e)
	return x.ExitStatus, err
}

// Gap is the event's *client.Gap.
func (e event) Gap() (client.Gap, error) { return as[client.Gap](e) }

// VMEvent is the event's *client.VMEvent.
func (e event) VMEvent() (client.VMEvent, error) { return as[client.VMEvent](e) }

// SessionEvent is the event's *client.SessionEvent.
func (e event) SessionEvent() (client.SessionEvent, error) { return as[client.SessionEvent](e) }

// EphemeralEvent is the event's *client.EphemeralEvent.
func (e event) EphemeralEvent() (client.EphemeralEvent, error) { return as[client.EphemeralEvent](e) }

// Problem is the *client.Error of a final error event.
func (e event) Problem() (*client.Error, error) {
	if e.Err == nil {
		return nil, fmt.Errorf("event %q is not an error event", e.Type)
	}
	return e.Err, nil
}
