package agentos

import (
	"sync"
)

// Subscription is a bounded, non-blocking event feed. Publishers never wait
// for a subscriber: one that falls more than its buffer behind is cut off,
// its channel closed and Err set to ErrOutputOverflow, so a slow reader can
// never stall the sidecar's event lane or other subscribers.
type Subscription[T any] struct {
	ch     chan T
	hub    *hub[T]
	mu     sync.Mutex
	err    error
	closed bool
}

// C returns the event channel. It is closed when the subscription ends: by
// Close, by overflow, or because its source (VM, session) ended.
func (s *Subscription[T]) C() <-chan T { return s.ch }

// Err reports why C was closed: nil after Close or a clean end,
// ErrOutputOverflow, or the error that ended the source.
func (s *Subscription[T]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription and frees its buffer. It is idempotent.
func (s *Subscription[T]) Close() {
	s.hub.remove(s)
	s.end(nil)
}

func (s *Subscription[T]) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.err = err
	close(s.ch)
}

// hub fans events out to subscriptions.
type hub[T any] struct {
	mu    sync.Mutex
	subs  map[*Subscription[T]]struct{}
	ended error
	done  bool
}

func (h *hub[T]) subscribe(buffer int) *Subscription[T] {
	if buffer <= 0 {
		buffer = 256
	}
	s := &Subscription[T]{ch: make(chan T, buffer), hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		s.end(h.ended)
		return s
	}
	if h.subs == nil {
		h.subs = make(map[*Subscription[T]]struct{})
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *hub[T]) remove(s *Subscription[T]) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// publish delivers v to every subscriber that has room and cuts off those
// that have none.
func (h *hub[T]) publish(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		// The subscription's own lock orders this send against end().
		s.mu.Lock()
		if !s.closed {
			select {
			case s.ch <- v:
			default:
				s.closed = true
				s.err = ErrOutputOverflow
				close(s.ch)
				delete(h.subs, s)
			}
		}
		s.mu.Unlock()
	}
}

// close ends every subscription with err; later subscribers end at once.
func (h *hub[T]) close(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	h.done, h.ended = true, err
	for s := range h.subs {
		s.end(err)
	}
	h.subs = nil
}

func (h *hub[T]) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
