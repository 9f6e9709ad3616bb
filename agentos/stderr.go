package agentos

import (
	"fmt"
	"io"
	"sync"
)

// stderrLog keeps the first headMax and the last tailMax bytes written to it, so
// a sidecar that logs for hours holds a bounded amount of memory while its
// start-up lines and its last words both survive for error messages.
type stderrLog struct {
	mu      sync.Mutex
	headMax int
	tailMax int
	head    []byte
	tail    []byte // ring buffer once full
	tailPos int
	dropped int64
}

func newStderrLog(headMax, tailMax int) *stderrLog {
	return &stderrLog{headMax: headMax, tailMax: tailMax}
}

// Write implements io.Writer and never fails.
func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if room := l.headMax - len(l.head); room > 0 {
		k := min(room, len(p))
		l.head = append(l.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if len(l.tail) < l.tailMax {
			k := min(l.tailMax-len(l.tail), len(p))
			l.tail = append(l.tail, p[:k]...)
			p = p[k:]
			continue
		}
		// The ring is full: overwrite the oldest bytes.
		k := min(l.tailMax-l.tailPos, len(p))
		copy(l.tail[l.tailPos:], p[:k])
		l.dropped += int64(k)
		l.tailPos = (l.tailPos + k) % l.tailMax
		p = p[k:]
	}
	return n, nil
}

// Tail returns up to max of the most recent bytes.
func (l *stderrLog) Tail(max int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := append(append([]byte(nil), l.head...), l.orderedLocked()...)
	if len(all) > max {
		all = all[len(all)-max:]
	}
	return string(all)
}

// String renders head and tail with a marker where bytes were dropped.
func (l *stderrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped == 0 {
		return string(l.head) + string(l.orderedLocked())
	}
	return fmt.Sprintf("%s\n[... %d bytes dropped ...]\n%s", l.head, l.dropped, l.orderedLocked())
}

func (l *stderrLog) orderedLocked() []byte {
	if len(l.tail) < l.tailMax || l.tailPos == 0 {
		return append([]byte(nil), l.tail...)
	}
	out := make([]byte, 0, len(l.tail))
	out = append(out, l.tail[l.tailPos:]...)
	return append(out, l.tail[:l.tailPos]...)
}

var _ io.Writer = (*stderrLog)(nil)
