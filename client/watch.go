package client

import (
	"context"
	"iter"
	"strconv"
	"time"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// WatchOptions configure a file watch.
type WatchOptions struct {
	// Recursive watches the whole tree, not only the directory's entries.
	Recursive bool
	// Interval is how often the gateway scans the tree for changes made
	// inside the guest (0: the gateway's default, 2 s). The gateway
	// refuses one below its floor, 500 ms; it is sent in milliseconds,
	// rounded up.
	Interval time.Duration
	// StreamOptions resume the watch (LastEventID) and bound its silence.
	StreamOptions
}

// FileChange is a change of a watched tree: a create, modify, delete or
// rename (Type), with the path that changed (and for a rename the path it
// came From).
type FileChange = api.WatchEvent

// Resync says that a watch lost changes: list the tree again; the
// FileChange events after it are live.
type Resync = api.WatchResyncEvent

// SSE event names of a file watch.
const (
	eventCreate = "create"
	eventModify = "modify"
	eventDelete = "delete"
	eventRename = "rename"
	eventResync = "resync"
)

// Watch opens a stream of the changes of the directory path: *FileChange
// values as changes happen (those made through the API at once, those
// made inside the guest within the scan interval) and *Resync when changes
// were lost. The stream ends with an *Error: conflict when the VM ends,
// resource_exhausted when the watched trees grow past the gateway's bound.
func (v *VMHandle) Watch(ctx context.Context, path string, opts WatchOptions) (*Stream, error) {
	q := pathQuery(path)
	if opts.Recursive {
		q.Set("recursive", "true")
	}
	if opts.Interval > 0 {
		q.Set("interval", strconv.FormatInt(ceilUnit(opts.Interval, time.Millisecond), 10))
	}
	return v.c.openStream(ctx, watchStream, vmPath(v.id, "watch")+"?"+q.Encode(), opts.StreamOptions)
}

// FollowWatch iterates over the changes of the directory path (see
// Watch), reconnecting after a dropped connection without losing or
// repeating one (a *Resync says when the gateway could not resume). It
// ends with the watch; an error, including the VM's end, is yielded last.
func (v *VMHandle) FollowWatch(ctx context.Context, path string, opts WatchOptions) iter.Seq2[Event, error] {
	return v.c.follow(ctx, func(ctx context.Context, so StreamOptions) (*Stream, error) {
		o := opts
		o.StreamOptions = so
		return v.Watch(ctx, path, o)
	}, false)
}
