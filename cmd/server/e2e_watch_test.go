package main

// File watch end to end, with the real gateway and sidecar: changes made
// through the files API are told at once (source api), a guest process's
// within the scan interval (source scan); Last-Event-ID resumes exactly, a
// cursor too old or unknown gets a resync; another tenant's VM is 404; bad
// input is 400; the entry bound is 429; no goroutine outlives the streams.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// watchNext reads the next event of a watch stream, checked against the
// spec, within d.
func watchNext(t *testing.T, e *e2e, s *client.Stream, req *http.Request, d time.Duration) event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := next(ctx, s)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	validateEvent(e, req, ev)
	return ev
}

// change describes a watch event as "type path source" (with "from>" for
// a rename).
func change(t *testing.T, ev event) string {
	t.Helper()
	fc, ok := ev.V.(*client.FileChange)
	if !ok {
		t.Fatalf("want a file change, got %s#%s %s", ev.Type, ev.ID, ev.Data)
	}
	if ev.ID != strconv.FormatUint(fc.Seq, 10) || fc.Type != ev.Type {
		t.Fatalf("event %s#%s carries seq %d, type %s", ev.Type, ev.ID, fc.Seq, fc.Type)
	}
	p := fc.Path
	if fc.From != "" {
		p = fc.From + ">" + p
	}
	return fc.Type + " " + p + " " + fc.Source
}

func tarOf(t *testing.T, name, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte(body))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestE2EWatch(t *testing.T) {
	e := newE2E(t, "--watch-log-bytes=4096", "--watch-max-entries=200")
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(c, client.CreateVMRequest{})
	h := c.VM(vm.ID)
	e.exec(c, vm.ID, "mkdir -p /workspace/w/old")
	req := e.eventReq("GET", "/v1/vms/"+vm.ID+"/watch")
	baseline := e.baselineGoroutines(t)

	s, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{Recursive: true, Interval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// API changes: each is the next event, from the API hook (not a
	// scan), and no scan tells it again.
	apiChanges := []struct {
		do   func() error
		want []string
	}{
		{func() error {
			_, err := h.WriteFile(ctx, "/workspace/w/a", strings.NewReader("1"), client.WriteFileOptions{})
			return err
		},
			[]string{"create /workspace/w/a api"}},
		{func() error {
			_, err := h.WriteFile(ctx, "/workspace/w/a", strings.NewReader("22"), client.WriteFileOptions{})
			return err
		},
			[]string{"modify /workspace/w/a api"}},
		{func() error { return h.Mkdir(ctx, "/workspace/w/d/e") },
			[]string{"create /workspace/w/d api", "create /workspace/w/d/e api"}},
		{func() error { return h.Move(ctx, "/workspace/w/a", "/workspace/w/d/b") },
			[]string{"rename /workspace/w/a>/workspace/w/d/b api"}},
		{func() error { return h.DeleteFile(ctx, "/workspace/w/d/b", client.DeleteFileOptions{}) },
			[]string{"delete /workspace/w/d/b api"}},
		{func() error {
			_, err := h.UploadArchive(ctx, "/workspace/w/d", bytes.NewReader(tarOf(t, "x.txt", "x")), client.ArchiveOptions{})
			return err
		}, []string{"create /workspace/w/d/x.txt api"}},
	}
	for _, ac := range apiChanges {
		if err := ac.do(); err != nil {
			t.Fatal(err)
		}
		for _, want := range ac.want {
			if got := change(t, watchNext(t, e, s, req, 10*time.Second)); got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		}
	}
	// A guest process's write: found by the next scans.
	e.exec(c, vm.ID, "sh -c 'echo x > /workspace/w/old/f'")
	if got := change(t, watchNext(t, e, s, req, 10*time.Second)); got != "create /workspace/w/old/f scan" {
		t.Fatalf("guest write: %q", got)
	}
	e.exec(c, vm.ID, "rm /workspace/w/old/f")
	if got := change(t, watchNext(t, e, s, req, 10*time.Second)); got != "delete /workspace/w/old/f scan" {
		t.Fatalf("guest removal: %q", got)
	}
	last := s.LastEventID()
	s.Close()

	t.Run("resume", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		// Changes while nobody watches are kept; the resumed stream starts
		// exactly after the last event seen.
		if _, err := h.WriteFile(ctx, "/workspace/w/g", strings.NewReader("g"), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
		r, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{Recursive: true, StreamOptions: client.StreamOptions{LastEventID: last}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ev := watchNext(t, e, r, req, 10*time.Second)
		if got := change(t, ev); got != "create /workspace/w/g api" || ev.ID != fmt.Sprint(mustAtoi(t, last)+1) {
			t.Fatalf("resumed after %s: %s#%s", last, got, ev.ID)
		}
		last = ev.ID
	})

	t.Run("resync", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		// A cursor the log never had, and one older than its 4 KiB.
		for i := range 60 {
			if err := h.Mkdir(ctx, fmt.Sprintf("/workspace/w/m%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct{ cursor, reason string }{{"1", "expired"}, {"999999", "unknown"}} {
			r, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{Recursive: true, StreamOptions: client.StreamOptions{LastEventID: c.cursor}})
			if err != nil {
				t.Fatal(err)
			}
			ev := watchNext(t, e, r, req, 10*time.Second)
			r.Close()
			if rs, ok := ev.V.(*client.Resync); !ok || rs.Reason != c.reason {
				t.Fatalf("cursor %s: %s#%s %s, want resync %s", c.cursor, ev.Type, ev.ID, ev.Data, c.reason)
			}
		}
	})

	t.Run("shared scans, another watcher's tree", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		// Two watchers of overlapping trees see a guest change once each.
		all, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{Recursive: true, Interval: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer all.Close()
		dir, err := h.Watch(ctx, "/workspace/w/old", client.WatchOptions{Interval: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		e.exec(c, vm.ID, "sh -c 'echo y > /workspace/w/old/y'")
		for _, st := range []*client.Stream{all, dir} {
			if got := change(t, watchNext(t, e, st, req, 10*time.Second)); got != "create /workspace/w/old/y scan" {
				t.Fatalf("guest write: %q", got)
			}
		}
		e.exec(c, vm.ID, "sh -c 'echo z > /workspace/w/old/z'")
		if got := change(t, watchNext(t, e, all, req, 10*time.Second)); got != "create /workspace/w/old/z scan" {
			t.Fatalf("after it, the next change: %q (the first told twice?)", got)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		e := e.sub(t)
		cases := []struct {
			query string
			field string
		}{
			{"path=workspace", "path"},
			{"", "path"},
			{"path=/workspace/w&interval=499", "interval"},
			{"path=/workspace/w&interval=soon", "interval"},
			{"path=/workspace/w&recursive=maybe", "recursive"},
			{"path=/workspace/w/g", "path"},
		}
		for _, bc := range cases {
			err := e.raw("GET", "/v1/vms/"+vm.ID+"/watch?"+bc.query, testAdminKey, nil, map[string]string{"Accept": "text/event-stream"})
			ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
			if ce.Details["field"] != bc.field {
				t.Errorf("%s: details %v, want field %s", bc.query, ce.Details, bc.field)
			}
		}
		err := e.raw("GET", "/v1/vms/"+vm.ID+"/watch?path=/workspace/w", testAdminKey, nil, map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "x"})
		wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest)
		err = e.raw("GET", "/v1/vms/"+vm.ID+"/watch?path=/nope", testAdminKey, nil, map[string]string{"Accept": "text/event-stream"})
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})

	t.Run("entry bound", func(t *testing.T) {
		// The 210 directories are made by a guest process: made through
		// the files API, each would slow every later stat of the VM
		// (README, Known limits), and the subtests after this one with it.
		e, ctx := e.sub(t), ctxT(t)
		names := make([]string, 210)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
		e.exec(c, vm.ID, "mkdir -p /workspace/big && cd /workspace/big && mkdir "+strings.Join(names, " "))
		_, err := h.Watch(ctx, "/workspace/big", client.WatchOptions{})
		wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
	})

	t.Run("tenant isolation", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		_, other := e.tenant(e.uniq("watch-other"), nil)
		_, err := other.VM(vm.ID).Watch(ctx, "/workspace/w", client.WatchOptions{})
		wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	})

	t.Run("goroutines", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		var streams []*client.Stream
		for i := range 4 {
			st, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{Recursive: i%2 == 0})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, st)
		}
		open := e.settledGoroutines()
		for _, st := range streams {
			st.Close()
		}
		e.goroutinesBack(t, baseline, open, len(streams), "watch streams")
	})

	t.Run("the VM's end ends the watch", func(t *testing.T) {
		e, ctx := e.sub(t), ctxT(t)
		st, err := h.Watch(ctx, "/workspace/w", client.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		evs := e.collect(st, req, 30*time.Second)
		if end := evs[len(evs)-1]; end.Err == nil || end.Err.Code != client.CodeConflict {
			t.Fatalf("after the VM's deletion: %s", summarize(evs))
		}
	})
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
