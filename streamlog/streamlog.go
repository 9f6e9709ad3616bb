// Package streamlog provides Log, the bounded, sequence-numbered record behind
// every stream the gateway serves: a process's or shell's output, a VM's
// events, a VM's file changes. Producers append without ever waiting for
// consumers; each consumer follows with its own cursor and learns exactly which
// entries it missed when it fell too far behind. The sequence numbers are what
// SSE's Last-Event-ID and the attach protocol's resume point name.
//
// It lives on its own, below the services and the HTTP layer, because both
// sides use it: vms and watch produce into logs, and the SSE and attach
// servers read them, without either having to import the other.
package streamlog

import (
	"context"
	"sync"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Entry is one item of a log: a sequence number and a payload with its size.
type Entry[T any] struct {
	Seq  uint64
	Size int
	V    T
}

// Log is a bounded, sequence-numbered record that readers follow with a
// cursor. Writers never wait for readers: the log drops its oldest entries
// past maxBytes, and a reader that fell behind learns exactly which
// sequence numbers it missed (a gap) instead of slowing anyone down. This is
// what makes resuming with Last-Event-ID possible and keeps memory bounded
// however slow a client is.
type Log[T any] struct {
	mu       sync.Mutex
	maxBytes int
	entries  []Entry[T]
	bytes    int
	next     uint64 // sequence of the next append; starts at 1
	closed   bool
	final    error
	changed  chan struct{} // closed and replaced on every change
}

// New returns a log that keeps about maxBytes of payload.
func New[T any](maxBytes int) *Log[T] {
	return &Log[T]{maxBytes: maxBytes, next: 1, changed: make(chan struct{})}
}

// Append adds v with an explicit sequence (from the producer, e.g. the
// process output sequence) or, when seq is 0, the next one.
func (l *Log[T]) Append(seq uint64, size int, v T) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0
	}
	if seq == 0 || seq < l.next {
		seq = l.next
	}
	l.next = seq + 1
	l.entries = append(l.entries, Entry[T]{Seq: seq, Size: size, V: v})
	l.bytes += size
	// Keep at least the newest entry, however large.
	for l.bytes > l.maxBytes && len(l.entries) > 1 {
		l.bytes -= l.entries[0].Size
		l.entries[0] = Entry[T]{}
		l.entries = l.entries[1:]
	}
	l.broadcastLocked()
	return seq
}

// Close marks the end of the log; readers drain it and then get err (nil for
// a normal end).
func (l *Log[T]) Close(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed, l.final = true, err
	l.broadcastLocked()
}

func (l *Log[T]) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// LastSeq returns the sequence of the newest entry (0 if none).
func (l *Log[T]) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Batch is what a reader gets: entries after its cursor, and a gap when some
// it asked for were dropped.
type Batch[T any] struct {
	// GapFrom..GapTo (inclusive) were dropped before the reader got them.
	GapFrom, GapTo uint64
	Entries        []Entry[T]
	// Done is set once the log is closed and the reader has everything;
	// Err is the reason it was closed.
	Done bool
	Err  error
}

// Read returns the entries with a sequence above after, waiting until there
// is at least one, the log closes, or ctx ends.
func (l *Log[T]) Read(ctx context.Context, after uint64) (Batch[T], error) {
	for {
		b, changed := l.peek(after)
		if len(b.Entries) > 0 || b.GapTo > 0 || b.Done {
			return b, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Batch[T]{}, ctx.Err()
		}
	}
}

// Peek returns what Read would return now, without waiting: possibly an
// empty batch.
func (l *Log[T]) Peek(after uint64) Batch[T] {
	b, _ := l.peek(after)
	return b
}

// peek returns the batch after a cursor and the channel closed at the log's
// next change.
func (l *Log[T]) peek(after uint64) (Batch[T], <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b Batch[T]
	if len(l.entries) > 0 && after+1 < l.entries[0].Seq {
		b.GapFrom, b.GapTo = after+1, l.entries[0].Seq-1
	} else if len(l.entries) == 0 && after+1 < l.next {
		b.GapFrom, b.GapTo = after+1, l.next-1
	}
	for i := range l.entries {
		if l.entries[i].Seq > after {
			b.Entries = append(b.Entries, l.entries[i:]...)
			break
		}
	}
	if l.closed {
		b.Done, b.Err = true, l.final
	}
	return b, l.changed
}

// CheckResume refuses a resume position (from field: Last-Event-ID, or an
// attach's after) past last, the last sequence a stream has produced: no
// event ever had that id, so resuming there would silently skip output (a
// running stream) or invent an id (an ended one). Every stream over a log
// refuses with these words, which match the session streams' refusal.
func CheckResume(after, last uint64, field string) error {
	if after <= last {
		return nil
	}
	return gateway.Errorf(gateway.CodeInvalidArgument, "%s %d is beyond the stream's latest sequence %d", field, after, last).
		WithDetail("field", field).WithDetail("latestSequence", last)
}
