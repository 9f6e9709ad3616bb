package nodeproxy

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestStreamGuard ends a proxied event stream that breaks off: with a lost
// event in place of the event in flight when the owner node turns out dead,
// with the break itself, after the last whole event, when it is alive (the
// client resumes). The break is a reader's error here: the e2e
// cluster test produces the dead owner with a real SIGKILL, but a live owner
// whose connection breaks cannot be produced on loopback on demand.
func TestStreamGuard(t *testing.T) {
	broken := errors.New("unexpected EOF")
	for _, tc := range []struct {
		name     string
		upstream string
		err      error
		dead     bool
		want     string
		wantErr  error
	}{
		{"clean end", "event: exit\ndata: {}\n\n", nil, true, "event: exit\ndata: {}\n\n", nil},
		{"owner dead between events", "event: stdout\ndata: {}\n\n", broken, true,
			"event: stdout\ndata: {}\n\n" + `event: lost` + "\n" + `data: {"code":"conflict","detail":"the VM is lost: its node n2 stopped answering","node":"n2","state":"lost"}` + "\n\n", nil},
		{"owner dead within an event", "event: stdout\ndata: {}\n\nevent: stdout\ndata: {", broken, true,
			"event: stdout\ndata: {}\n\n" + `event: lost` + "\n" + `data: {"code":"conflict","detail":"the VM is lost: its node n2 stopped answering","node":"n2","state":"lost"}` + "\n\n", nil},
		{"owner alive, within an event", "event: stdout\ndata: {}\n\n: heartbeat", broken, false, "event: stdout\ndata: {}\n\n", broken},
		{"owner alive", "event: stdout\ndata: {}\n\n", broken, false, "event: stdout\ndata: {}\n\n", broken},
	} {
		// Whole reads take the direct path, byte by byte the held-back one.
		for _, chunks := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"bytes", iotest.OneByteReader}} {
			t.Run(tc.name+"/"+chunks.name, func(t *testing.T) {
				var up io.Reader = strings.NewReader(tc.upstream)
				if tc.err != nil {
					up = io.MultiReader(up, iotest.ErrReader(tc.err))
				}
				asked := false
				g := &streamGuard{body: io.NopCloser(chunks.wrap(up)), ctx: context.Background(), node: "n2",
					lost: func(context.Context) bool { asked = true; return tc.dead }}
				got, err := io.ReadAll(g)
				if string(got) != tc.want || !errors.Is(err, tc.wantErr) {
					t.Fatalf("read %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
				}
				if asked != (tc.err != nil) {
					t.Errorf("verdict asked: %v", asked)
				}
			})
		}
	}
}

// TestShutdownEventData holds the final event of a proxied stream at
// shutdown to the bytes the gateway's own streams end with.
func TestShutdownEventData(t *testing.T) {
	if want := `{"code":"unavailable","detail":"the gateway is shutting down"}`; shutdownEventData != want {
		t.Fatalf("shutdownEventData = %s, want %s", shutdownEventData, want)
	}
}
