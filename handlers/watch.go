package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/watch"
)

// watchFiles streams the changes of a VM's tree: the changes made through
// the files API at once, the guest's at the scan interval.
func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request) {
	after, resume, err := sse.LastEventID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := queryReader{r: r}
	p := q.path("path")
	recursive := q.bool("recursive")
	ms := q.int("interval", 0, 1, int(watch.MaxInterval.Milliseconds()))
	if q.err != nil {
		writeError(w, r, q.err)
		return
	}
	if s.cfg.Watches == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "file watch does not run on this gateway"))
		return
	}
	wt, err := s.cfg.Watches.Watch(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"), watch.Options{
		Path: p, Recursive: recursive, Interval: time.Duration(ms) * time.Millisecond, After: after, Resume: resume,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer wt.Close()
	s.sse.Serve(w, r, after, func(ctx context.Context, emit func(sse.Event) error) error {
		for {
			b, err := wt.Next(ctx)
			if err != nil {
				return err
			}
			if b.Resync != "" {
				data, _ := json.Marshal(api.WatchResyncEvent{Reason: string(b.Resync)})
				if err := emit(sse.Event{ID: strconv.FormatUint(b.Cursor, 10), Event: "resync", Data: data}); err != nil {
					return err
				}
			}
			for _, e := range b.Events {
				data, _ := json.Marshal(api.WatchEvent{Seq: e.Seq, Type: string(e.V.Op), Path: e.V.Path, From: e.V.From,
					Kind: string(e.V.Kind), Source: string(e.V.Source), Time: e.V.Time})
				if err := emit(sse.Event{ID: strconv.FormatUint(e.Seq, 10), Event: string(e.V.Op), Data: data}); err != nil {
					return err
				}
			}
			if b.Done {
				return emit(sse.EndEvent(b.Cursor, b.Err))
			}
		}
	})
}
