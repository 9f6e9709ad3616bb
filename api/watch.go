package api

import "time"

// WatchEvent is the data of a file watch's create, modify, delete and
// rename events. The event name is its type.
type WatchEvent struct {
	// Seq is the event's sequence number in its VM's watch log (also the
	// event id).
	Seq  uint64 `json:"seq"`
	Type string `json:"type"`
	// Path is the entry that changed; for a rename its new path, and From
	// its old one.
	Path string `json:"path"`
	From string `json:"from,omitempty"`
	// Kind is file, directory or symlink.
	Kind string `json:"kind"`
	// Source is api for a change made through the files API (told at once)
	// or scan for one a scan of the tree found (made in the guest).
	Source string    `json:"source"`
	Time   time.Time `json:"time"`
}

// WatchResyncEvent is the data of a file watch's resync event: changes
// were lost (the cursor is older than the log, is not one of its
// sequences, or the client read too slowly), so the client lists the tree
// again; the events after it are live.
type WatchResyncEvent struct {
	// Reason is expired (the events after the cursor were dropped from the
	// bounded log) or unknown (the cursor is no sequence of the log, e.g.
	// one from before a gateway restart).
	Reason string `json:"reason"`
}
