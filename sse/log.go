package sse

import (
	"context"
	"encoding/json"
	"strconv"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
)

// FollowLog emits a log's entries after a cursor until it ends: a gap event
// where entries were dropped, each entry, then a final event. onEnd renders
// the final event (nil: a generic "end" or "error").
func FollowLog[T any](ctx context.Context, l *streamlog.Log[T], after uint64, emit func(Event) error, render func(streamlog.Entry[T]) Event, onEnd func(last uint64, err error) []Event) error {
	cursor := after
	for {
		b, err := l.Read(ctx, cursor)
		if err != nil {
			return err
		}
		if cursor, err = emitBatch(b, cursor, emit, render, onEnd); err != nil || b.Done {
			return err
		}
	}
}

// emitBatch emits one batch of a log read after cursor, as FollowLog does,
// and returns the cursor after it.
func emitBatch[T any](b streamlog.Batch[T], cursor uint64, emit func(Event) error, render func(streamlog.Entry[T]) Event, onEnd func(last uint64, err error) []Event) (uint64, error) {
	if b.GapTo > 0 {
		data, _ := json.Marshal(api.GapEvent{From: b.GapFrom, To: b.GapTo})
		if err := emit(Event{ID: strconv.FormatUint(b.GapTo, 10), Event: "gap", Data: data}); err != nil {
			return cursor, err
		}
		cursor = b.GapTo
	}
	for _, e := range b.Entries {
		if err := emit(render(e)); err != nil {
			return cursor, err
		}
		cursor = e.Seq
	}
	if !b.Done {
		return cursor, nil
	}
	var final []Event
	if onEnd != nil {
		final = onEnd(cursor, b.Err)
	} else {
		final = []Event{EndEvent(cursor, b.Err)}
	}
	for _, ev := range final {
		if err := emit(ev); err != nil {
			return cursor, err
		}
	}
	return cursor, nil
}

// EndEvent is the final event of a stream that ends: "end", or "error" with
// the problem when it ended because something failed.
func EndEvent(cursor uint64, err error) Event {
	id := strconv.FormatUint(cursor, 10)
	if err == nil {
		return Event{ID: id, Event: "end", Data: []byte("{}")}
	}
	data, _ := json.Marshal(api.ErrorEvent{Code: gateway.ErrorCode(err), Detail: gateway.ErrorMessage(err)})
	return Event{ID: id, Event: "error", Data: data}
}
