// Package audit writes the audit trail off the request's path: a request
// queues its record and answers, and one writer goroutine stores the queued
// records in batches, one transaction each.
//
// Nothing is lost to the queue: a record that finds the queue full, or the
// writer closed, is written on its caller's path instead (and counted), as
// every record was before; a batch the store refuses is retried before it is
// logged and counted as lost. Flush waits for the records queued before it,
// so that a caller reads its own writes.
package audit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Store keeps the records: all of one call's, or none.
type Store interface {
	RecordAudit(ctx context.Context, recs ...gateway.AuditRecord) error
}

// Defaults of Config.
const (
	DefaultQueue        = 4096
	DefaultBatch        = 256
	DefaultWriteTimeout = 5 * time.Second
	// writeAttempts bounds the writes of one batch the store refused.
	writeAttempts = 3
)

// Config tunes a Writer. Zero values take the defaults.
type Config struct {
	// Queue bounds the records waiting for the writer.
	Queue int
	// Batch bounds the records of one transaction.
	Batch int
	// WriteTimeout bounds one write of a batch, or of one record on its
	// caller's path.
	WriteTimeout time.Duration
	Log          zerolog.Logger
	// OnInline counts a record written on its caller's path because the
	// queue was full (or the writer closed); OnLost counts the records of a
	// write that failed for good. Either may be nil.
	OnInline func()
	OnLost   func(n int)
}

// item is one queued record, or a barrier (done set) that Flush waits on.
type item struct {
	rec  gateway.AuditRecord
	done chan struct{}
}

// Writer queues audit records and stores them in the background. Close
// stops it after it stored what was queued.
type Writer struct {
	st  Store
	cfg Config

	// mu is read-held by every send to q and write-held by Close, which
	// closes q: so no send follows the close, and senders do not wait on
	// one another.
	mu     sync.RWMutex
	closed bool
	q      chan item

	done chan struct{} // closed when the writer goroutine returned
}

// New starts a Writer over st.
func New(st Store, cfg Config) *Writer {
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	w := &Writer{st: st, cfg: cfg, q: make(chan item, cfg.Queue), done: make(chan struct{})}
	go w.run()
	return w
}

// Record queues rec and returns at once; when the queue is full, or the
// Writer closed, it writes rec itself, bounded by the write timeout, so
// that a burst slows its requests rather than loses their records.
func (w *Writer) Record(ctx context.Context, rec gateway.AuditRecord) {
	w.mu.RLock()
	if !w.closed {
		select {
		case w.q <- item{rec: rec}:
			w.mu.RUnlock()
			return
		default:
		}
	}
	w.mu.RUnlock()
	if w.cfg.OnInline != nil {
		w.cfg.OnInline()
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WriteTimeout)
	defer cancel()
	if err := w.st.RecordAudit(wctx, rec); err != nil {
		w.lost(err, []gateway.AuditRecord{rec})
	}
}

// Flush waits until every record queued before it was written (or given up
// on), or until ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	b := item{done: make(chan struct{})}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return nil // Close wrote what was queued, or is writing it
	}
	// The writer drains the queue, so this send ends, and with it any
	// Close waiting for the lock.
	select {
	case w.q <- b:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops taking records, and waits, bounded by ctx, for the writer to
// store what was queued. Records that come after are written on their
// callers' paths.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.q)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("audit: records still queued at shutdown"), ctx.Err())
	}
}

// run is the writer: it takes what is queued, up to a batch, writes it in
// one transaction, then releases the barriers it met.
func (w *Writer) run() {
	defer close(w.done)
	batch := make([]gateway.AuditRecord, 0, w.cfg.Batch)
	var barriers []chan struct{}
	for first := range w.q {
		batch, barriers = batch[:0], barriers[:0]
		add := func(it item) {
			if it.done != nil {
				barriers = append(barriers, it.done)
			} else {
				batch = append(batch, it.rec)
			}
		}
		add(first)
	fill:
		for len(batch) < w.cfg.Batch {
			select {
			case it, ok := <-w.q:
				if !ok {
					break fill
				}
				add(it)
			default:
				break fill
			}
		}
		w.write(batch)
		for _, b := range barriers {
			close(b)
		}
	}
}

// write stores one batch, retrying a refused write with a short backoff.
func (w *Writer) write(batch []gateway.AuditRecord) {
	if len(batch) == 0 {
		return
	}
	var err error
	for attempt := range writeAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.WriteTimeout)
		err = w.st.RecordAudit(ctx, batch...)
		cancel()
		if err == nil {
			return
		}
	}
	w.lost(err, batch)
}

// lost logs records the store would not take, with their request ids, and
// counts them.
func (w *Writer) lost(err error, recs []gateway.AuditRecord) {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.RequestID
	}
	w.cfg.Log.Error().Err(err).Int("records", len(recs)).Strs("requestIds", ids).Msg("audit records not written")
	if w.cfg.OnLost != nil {
		w.cfg.OnLost(len(recs))
	}
}
