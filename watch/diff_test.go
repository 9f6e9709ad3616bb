package watch

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/vms"
)

func TestDiff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	file := func(size int64, mtime time.Time) entry { return entry{kind: KindFile, size: size, mtime: mtime} }
	dir := entry{kind: KindDirectory}
	link := func(size int64) entry { return entry{kind: KindSymlink, size: size} }
	deep := snapshot{"/w": dir}
	p := "/w"
	for i := range 20 {
		p = fmt.Sprintf("%s/d%d", p, i)
		deep[p] = dir
	}
	deepFile := p + "/f"
	withDeep := snapshot{deepFile: file(1, t0)}
	for k, v := range deep {
		withDeep[k] = v
	}
	cases := []struct {
		name     string
		old, cur snapshot
		want     []string
	}{
		{"nothing", snapshot{"/w/a": file(1, t0)}, snapshot{"/w/a": file(1, t0)}, nil},
		{"create", snapshot{}, snapshot{"/w/a": file(1, time.Time{})}, []string{"create /w/a file"}},
		{"delete", snapshot{"/w/a": file(1, t0)}, snapshot{}, []string{"delete /w/a file"}},
		{"modify by size", snapshot{"/w/a": file(1, t0)}, snapshot{"/w/a": file(2, time.Time{})}, []string{"modify /w/a file"}},
		{"modify by mtime", snapshot{"/w/a": file(1, t0)}, snapshot{"/w/a": file(1, t1)}, []string{"modify /w/a file"}},
		{"mtime not known yet", snapshot{"/w/a": file(1, time.Time{})}, snapshot{"/w/a": file(1, t1)}, nil},
		{"directory mtime is no modify", snapshot{"/w/d": dir}, snapshot{"/w/d": dir}, nil},
		{"symlink retargeted", snapshot{"/w/l": link(3)}, snapshot{"/w/l": link(5)}, []string{"modify /w/l symlink"}},
		{"rename is delete and create", snapshot{"/w/a": file(1, t0)}, snapshot{"/w/b": file(1, t0)}, []string{"delete /w/a file", "create /w/b file"}},
		{"file becomes directory", snapshot{"/w/x": file(1, t0)}, snapshot{"/w/x": dir, "/w/x/y": file(0, time.Time{})},
			[]string{"delete /w/x file", "create /w/x directory", "create /w/x/y file"}},
		{"directory becomes symlink", snapshot{"/w/x": dir}, snapshot{"/w/x": link(4)}, []string{"delete /w/x directory", "create /w/x symlink"}},
		{"tree removed deepest first", snapshot{"/w/d": dir, "/w/d/e": dir, "/w/d/e/f": file(1, t0)}, snapshot{},
			[]string{"delete /w/d/e/f file", "delete /w/d/e directory", "delete /w/d directory"}},
		{"deep tree created shallowest first", snapshot{"/w": dir}, withDeep, deepCreates(deep, deepFile)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, ev := range diff(c.old, c.cur) {
				got = append(got, fmt.Sprintf("%s %s %s", ev.Op, ev.Path, ev.Kind))
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("diff:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func deepCreates(deep snapshot, file string) []string {
	var out []string
	p := "/w"
	for i := range len(deep) - 1 {
		p = fmt.Sprintf("%s/d%d", p, i)
		out = append(out, "create "+p+" directory")
	}
	return append(out, "create "+file+" file")
}

func TestWithin(t *testing.T) {
	cases := []struct {
		p, root   string
		recursive bool
		want      bool
	}{
		{"/w", "/w", false, true},
		{"/w/a", "/w", false, true},
		{"/w/a/b", "/w", false, false},
		{"/w/a/b", "/w", true, true},
		{"/wx", "/w", true, false},
		{"/anything", "/", true, true},
		{"/a/b", "/", false, false},
		{"", "/w", true, false},
	}
	for _, c := range cases {
		if got := within(c.p, c.root, c.recursive); got != c.want {
			t.Errorf("within(%q, %q, %v) = %v, want %v", c.p, c.root, c.recursive, got, c.want)
		}
	}
}

func TestPendingCovers(t *testing.T) {
	ev := func(op vms.FileOp, p string) Event { return Event{Op: op, Path: p} }
	cases := []struct {
		name string
		p    Event
		scan Event
		want bool
	}{
		{"api create, scan create", ev(vms.FileCreated, "/w/a"), ev(vms.FileCreated, "/w/a"), true},
		{"api write, scan modify", ev(vms.FileModified, "/w/a"), ev(vms.FileModified, "/w/a"), true},
		{"api create, other path", ev(vms.FileCreated, "/w/a"), ev(vms.FileCreated, "/w/b"), false},
		{"api delete of a tree", ev(vms.FileDeleted, "/w/d"), ev(vms.FileDeleted, "/w/d/x"), true},
		{"api delete, scan create", ev(vms.FileDeleted, "/w/d"), ev(vms.FileCreated, "/w/d"), false},
		{"rename source", Event{Op: vms.FileRenamed, From: "/w/a", Path: "/w/b"}, ev(vms.FileDeleted, "/w/a"), true},
		{"rename target tree", Event{Op: vms.FileRenamed, From: "/w/a", Path: "/w/b"}, ev(vms.FileCreated, "/w/b/c"), true},
		{"rename, unrelated delete", Event{Op: vms.FileRenamed, From: "/w/a", Path: "/w/b"}, ev(vms.FileDeleted, "/w/c"), false},
	}
	for _, c := range cases {
		if got := (pending{ev: c.p}).covers(c.scan); got != c.want {
			t.Errorf("%s: covers = %v, want %v", c.name, got, c.want)
		}
	}
}
