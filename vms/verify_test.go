package vms

import (
	"reflect"
	"testing"
)

func TestImageMismatches(t *testing.T) {
	dir := treeEntry{kind: 'd'}
	file := func(n int64) treeEntry { return treeEntry{kind: 'f', size: n} }
	link := treeEntry{kind: 'l'}
	for _, tc := range []struct {
		name               string
		img, before, after tree
		want               []string
	}{
		{"whole", tree{"/a": dir, "/a/b": file(3)}, tree{"/a": dir, "/a/b": file(3)}, tree{"/a": dir, "/a/b": file(3)}, nil},
		{"an image may hold more", tree{"/a": dir, "/x": link}, tree{"/a": dir}, tree{"/a": dir}, nil},
		{"lost file", tree{"/a": dir}, tree{"/a": dir, "/a/keep.txt": file(8)}, tree{"/a": dir, "/a/keep.txt": file(8)},
			[]string{"/a/keep.txt (file of 8 bytes) is not in the image"}},
		{"short file", tree{"/f": file(2)}, tree{"/f": file(8)}, tree{"/f": file(8)},
			[]string{"/f is a file of 8 bytes, the image has a file of 2 bytes"}},
		{"kind", tree{"/f": link}, tree{"/f": file(0)}, tree{"/f": file(0)},
			[]string{"/f is a file of 0 bytes, the image has a symlink"}},
		{"written meanwhile", tree{"/f": file(2)}, tree{"/f": file(2), "/g": file(1)}, tree{"/f": file(9)}, nil},
		{"made meanwhile", tree{}, tree{}, tree{"/new": file(1)}, nil},
		{"sorted", tree{}, tree{"/b": dir, "/a": dir}, tree{"/a": dir, "/b": dir},
			[]string{"/a (directory) is not in the image", "/b (directory) is not in the image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range imageMismatches(tc.img, tc.before, tc.after) {
				got = append(got, m.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
