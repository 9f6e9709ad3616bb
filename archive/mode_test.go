package archive

import (
	"io/fs"
	"testing"
)

// TestUnixModes: the setuid, setgid and sticky bits survive the trip
// between a Unix mode and an fs.FileMode both ways (a tar header written
// from Perm() alone lost a VM home's setgid bit and /tmp's sticky bit).
func TestUnixModes(t *testing.T) {
	for _, tc := range []struct {
		unix uint32
		want fs.FileMode
	}{
		{0o755, 0o755},
		{0o42755, fs.ModeSetgid | 0o755}, // the type bits are not permission bits
		{0o2755, fs.ModeSetgid | 0o755},
		{0o1777, fs.ModeSticky | 0o777},
		{0o4711, fs.ModeSetuid | 0o711},
		{0o7000, fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky},
	} {
		got := PermFromUnix(tc.unix)
		if got != tc.want {
			t.Errorf("PermFromUnix(%o) = %v, want %v", tc.unix, got, tc.want)
		}
		if back := UnixPerm(got | fs.ModeDir); back != int64(tc.unix&0o7777) {
			t.Errorf("UnixPerm(%v) = %o, want %o", got, back, tc.unix&0o7777)
		}
	}
}
