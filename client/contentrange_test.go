package client

import (
	"fmt"
	"testing"
)

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in                string
		first, last, size int64
		ok                bool
	}{
		{"bytes 0-99/10000", 0, 99, 10000, true},
		{"bytes 5-5/6", 5, 5, 6, true},
		{"bytes */10000", 0, 0, 0, false},
		{"bytes 5-4/10", 0, 0, 0, false},
		{"bytes 0-10/10", 0, 0, 0, false},
		{"bytes -1-3/10", 0, 0, 0, false},
		{"bytes +1-3/10", 0, 0, 0, false},
		{"items 0-1/2", 0, 0, 0, false},
		{"bytes 0-1", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		first, last, size, err := parseContentRange(tc.in)
		if (err == nil) != tc.ok || first != tc.first || last != tc.last || size != tc.size {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v", tc.in, first, last, size, err)
		}
	}
}

// FuzzParseContentRange: a header from the network never panics the parser,
// and whatever it accepts is a range inside the size that prints back the
// same.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-99/10000", "bytes */10", "bytes 9-9/10", "bytes 1-2/3/4", "bytes 00-1/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, last, size, err := parseContentRange(s)
		if err != nil {
			return
		}
		if first < 0 || first > last || last >= size {
			t.Fatalf("%q: accepted %d-%d/%d", s, first, last, size)
		}
		if again, _, _, err := parseContentRange(fmt.Sprintf("bytes %d-%d/%d", first, last, size)); err != nil || again != first {
			t.Fatalf("%q: the canonical form does not parse back: %v", s, err)
		}
	})
}
