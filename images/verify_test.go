package images

import (
	"reflect"
	"testing"
)

func TestImageMismatches(t *testing.T) {
	dir := listed{kind: 'd'}
	file := func(n int64) listed { return listed{kind: 'f', size: n} }
	link := listed{kind: 'l'}
	for _, tc := range []struct {
		name               string
		img, before, after listing
		want               []string
	}{
		{"whole", listing{"/a": dir, "/a/b": file(3)}, listing{"/a": dir, "/a/b": file(3)}, listing{"/a": dir, "/a/b": file(3)}, nil},
		{"an image may hold more", listing{"/a": dir, "/x": link}, listing{"/a": dir}, listing{"/a": dir}, nil},
		{"lost file", listing{"/a": dir}, listing{"/a": dir, "/a/keep.txt": file(8)}, listing{"/a": dir, "/a/keep.txt": file(8)},
			[]string{"/a/keep.txt (file of 8 bytes) is not in the image"}},
		{"short file", listing{"/f": file(2)}, listing{"/f": file(8)}, listing{"/f": file(8)},
			[]string{"/f is a file of 8 bytes, the image has a file of 2 bytes"}},
		{"kind", listing{"/f": link}, listing{"/f": file(0)}, listing{"/f": file(0)},
			[]string{"/f is a file of 0 bytes, the image has a symlink"}},
		{"written meanwhile", listing{"/f": file(2)}, listing{"/f": file(2), "/g": file(1)}, listing{"/f": file(9)}, nil},
		{"made meanwhile", listing{}, listing{}, listing{"/new": file(1)}, nil},
		{"sorted", listing{}, listing{"/b": dir, "/a": dir}, listing{"/a": dir, "/b": dir},
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
