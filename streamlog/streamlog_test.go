package streamlog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestLogReadFollowsAndReportsGaps(t *testing.T) {
	ctx := context.Background()
	l := New[string](10)
	for _, s := range []string{"aaaa", "bbbb", "cccc"} { // 12 bytes: the first is dropped
		l.Append(0, len(s), s)
	}
	tests := []struct {
		name           string
		after          uint64
		gapFrom, gapTo uint64
		first          uint64
		n              int
	}{
		{"from start sees the gap", 0, 1, 1, 2, 2},
		{"from the dropped entry", 1, 0, 0, 2, 2},
		{"resume mid-way", 2, 0, 0, 3, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := l.Read(ctx, tc.after)
			if err != nil {
				t.Fatal(err)
			}
			if b.GapFrom != tc.gapFrom || b.GapTo != tc.gapTo || len(b.Entries) != tc.n || b.Entries[0].Seq != tc.first {
				t.Fatalf("batch = %+v", b)
			}
		})
	}
	// A reader at the end waits for the next append.
	got := make(chan Batch[string], 1)
	go func() {
		b, _ := l.Read(ctx, 3)
		got <- b
	}()
	time.Sleep(10 * time.Millisecond)
	l.Append(0, 1, "d")
	if b := <-got; len(b.Entries) != 1 || b.Entries[0].V != "d" {
		t.Fatalf("follow = %+v", b)
	}
	// Close ends readers once drained.
	boom := errors.New("boom")
	l.Close(boom)
	b, _ := l.Read(ctx, 4)
	if !b.Done || b.Err != boom || len(b.Entries) != 0 {
		t.Fatalf("after close = %+v", b)
	}
	// A context ends a waiting read.
	l2 := New[string](10)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l2.Read(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestLogExplicitSequences(t *testing.T) {
	l := New[int](100)
	l.Append(5, 1, 5)
	if seq := l.Append(0, 1, 6); seq != 6 {
		t.Fatalf("seq = %d", seq)
	}
	b, _ := l.Read(context.Background(), 0)
	if b.GapFrom != 1 || b.GapTo != 4 || len(b.Entries) != 2 {
		t.Fatalf("batch = %+v", b)
	}
}

func TestCheckResume(t *testing.T) {
	for _, tc := range []struct {
		after, last uint64
		ok          bool
	}{{0, 0, true}, {3, 3, true}, {2, 3, true}, {4, 3, false}, {1, 0, false}, {999, 2, false}} {
		err := CheckResume(tc.after, tc.last, "Last-Event-ID")
		var ge *gateway.Error
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument ||
			ge.Details["latestSequence"] != tc.last || !strings.Contains(ge.Message, "beyond"))) {
			t.Errorf("CheckResume(%d, %d) = %v", tc.after, tc.last, err)
		}
	}
}
