package watch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// Watcher follows the events of one watched tree.
type Watcher struct {
	s         *Service
	vw        *vmWatch
	sc        *scanner
	root      string
	recursive bool
	interval  time.Duration

	// cursor and resync are only used by the goroutine calling Next.
	cursor    uint64
	resync    ResyncReason
	closeOnce sync.Once
}

// ResyncReason says why a watcher must list its tree again.
type ResyncReason string

// The reasons of a resync.
const (
	// ResyncExpired: the events after the cursor were dropped from the
	// bounded log (the cursor is too old, or the client read too slowly).
	ResyncExpired ResyncReason = "expired"
	// ResyncUnknown: the cursor is no sequence of the log (one from before
	// a gateway restart, or of another VM).
	ResyncUnknown ResyncReason = "unknown"
)

// Batch is what Next returns: events after the watcher's cursor, or a
// resync, or the end.
type Batch struct {
	// Resync is set when events the watcher should have had are lost: its
	// resume cursor is older than the log (or not one of its sequences),
	// or it read too slowly and the bounded log dropped them. The client
	// lists the tree again; the events that follow are live.
	Resync ResyncReason
	Events []streamlog.Entry[Event]
	// Cursor is the sequence the batch ends at (the id to resume after).
	Cursor uint64
	// Done is set at the end of the watch, with its reason in Err.
	Done bool
	Err  error
}

// Next waits for the next batch.
func (w *Watcher) Next(ctx context.Context) (Batch, error) {
	if w.resync != "" {
		r := w.resync
		w.resync = ""
		return Batch{Resync: r, Cursor: w.cursor}, nil
	}
	for {
		b, err := w.read(ctx)
		if err != nil {
			return Batch{}, err
		}
		out := Batch{Cursor: w.cursor, Done: b.Done, Err: b.Err}
		if b.GapTo > 0 {
			out.Resync, out.Cursor = ResyncExpired, b.GapTo
		}
		for _, e := range b.Entries {
			out.Cursor = e.Seq
			if within(e.V.Path, w.root, w.recursive) || within(e.V.From, w.root, w.recursive) {
				out.Events = append(out.Events, e)
			}
		}
		w.cursor = out.Cursor
		if out.Resync != "" || out.Done || len(out.Events) > 0 {
			return out, nil
		}
	}
}

// read reads the log after the cursor until there is something, the
// scanner fails (the watch's end, with its reason) or ctx ends.
func (w *Watcher) read(ctx context.Context) (streamlog.Batch[Event], error) {
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(w.sc.ctx, cancel)
	b, err := w.vw.log.Read(rctx, w.cursor)
	stop()
	cancel()
	if err == nil || ctx.Err() != nil {
		return b, err
	}
	cause := w.sc.failure()
	if errors.Is(cause, errStopped) {
		// Stopped because the VM ended or the gateway shuts down: the
		// log is closed and says so.
		return w.vw.log.Read(ctx, w.cursor)
	}
	return streamlog.Batch[Event]{Done: true, Err: cause}, nil
}

// Close ends the watcher; the last watcher of a tree stops its scanner and
// waits for it.
func (w *Watcher) Close() {
	w.closeOnce.Do(func() {
		vw, sc := w.vw, w.sc
		vw.mu.Lock()
		delete(sc.watchers, w)
		last := len(sc.watchers) == 0
		if last && vw.scanners[sc.key] == sc {
			delete(vw.scanners, sc.key)
		}
		vw.mu.Unlock()
		if !last {
			sc.poke()
			return
		}
		sc.stop()
		if sc.started.Load() {
			<-sc.done
		}
	})
}
