package vmspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// hostTree makes base/{ro,rw,ro/sub,outside} with links ro/escape →
// outside and ro/inner → ro/sub, and returns base with its links resolved.
func hostTree(t testing.TB) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ro", "ro/sub", "rw", "outside"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "ro", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"ro/escape": filepath.Join(base, "outside"), "ro/inner": filepath.Join(base, "ro", "sub"), "ro/up": ".."} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func TestParseMountAllow(t *testing.T) {
	base := hostTree(t)
	if err := os.Symlink(filepath.Join(base, "rw"), filepath.Join(base, "rw-link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		values  []string
		want    []MountRule
		wantErr string
	}{
		{name: "none", values: nil, want: nil},
		{name: "empty", values: []string{""}, want: nil},
		{name: "read-only by default", values: []string{base + "/ro"}, want: []MountRule{{Path: base + "/ro"}}},
		{name: "modes", values: []string{base + "/ro:ro," + base + "/rw:rw"}, want: []MountRule{{Path: base + "/ro"}, {Path: base + "/rw", ReadWrite: true}}},
		{name: "repeated, spaces, empty entries", values: []string{" " + base + "/ro ,", base + "/rw:rw"}, want: []MountRule{{Path: base + "/ro"}, {Path: base + "/rw", ReadWrite: true}}},
		{name: "resolved", values: []string{base + "/rw-link:rw", base + "/ro/../rw"}, want: []MountRule{{Path: base + "/rw", ReadWrite: true}, {Path: base + "/rw"}}},
		{name: "relative", values: []string{"data:rw"}, wantErr: "absolute"},
		{name: "missing", values: []string{base + "/nope"}, wantErr: "no such file"},
		{name: "a file", values: []string{base + "/ro/file"}, wantErr: "not a directory"},
		{name: "unknown mode is part of the path", values: []string{base + "/ro:rx"}, wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMountAllow(tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--mount-allow") {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

func TestMatchMountRule(t *testing.T) {
	rules := []MountRule{{Path: "/srv", ReadWrite: true}, {Path: "/srv/secret"}, {Path: "/"}}
	tests := []struct {
		p      string
		want   string
		rw, ok bool
	}{
		{"/srv", "/srv", true, true},
		{"/srv/a/b", "/srv", true, true},
		{"/srv/secret", "/srv/secret", false, true},
		{"/srv/secret/x", "/srv/secret", false, true},
		{"/srv/secretary", "/srv", true, true},
		{"/etc", "/", false, true},
	}
	for _, tc := range tests {
		r, ok := MatchMountRule(rules, tc.p)
		if ok != tc.ok || r.Path != tc.want || r.ReadWrite != tc.rw {
			t.Errorf("%s: %+v %v, want %s rw=%v", tc.p, r, ok, tc.want, tc.rw)
		}
	}
	if _, ok := MatchMountRule(rules[:2], "/srvx"); ok {
		t.Error("/srvx matched /srv")
	}
	if _, ok := MatchMountRule(nil, "/srv"); ok {
		t.Error("no rules matched")
	}
}

func TestAllowHostDir(t *testing.T) {
	base := hostTree(t)
	rules := []MountRule{{Path: base + "/ro"}, {Path: base + "/rw", ReadWrite: true}}
	tests := []struct {
		hostPath string
		want     string // resolved, when allowed
		rw       bool
		code     gateway.Code
	}{
		{hostPath: base + "/ro", want: base + "/ro"},
		{hostPath: base + "/ro/", want: base + "/ro"},
		{hostPath: base + "/ro/./sub", want: base + "/ro/sub"},
		{hostPath: base + "/ro/inner", want: base + "/ro/sub"},
		{hostPath: base + "/ro/sub/../sub", want: base + "/ro/sub"},
		{hostPath: base + "/rw", want: base + "/rw", rw: true},
		{hostPath: base + "/ro/../rw", want: base + "/rw", rw: true},
		{hostPath: base + "/outside", code: gateway.CodePermissionDenied},
		{hostPath: base + "/outside/missing", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/../outside", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/escape", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/escape/missing", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/up", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/up/ro/missing/..", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/inner/../../outside", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/missing/../sub", code: gateway.CodePermissionDenied},
		{hostPath: base, code: gateway.CodePermissionDenied},
		{hostPath: "/", code: gateway.CodePermissionDenied},
		{hostPath: base + "/ro/missing", code: gateway.CodeInvalidArgument},
		{hostPath: base + "/ro/inner/missing", code: gateway.CodeInvalidArgument},
		{hostPath: base + "/ro/file", code: gateway.CodeInvalidArgument},
		{hostPath: "ro", code: gateway.CodeInvalidArgument},
		{hostPath: "", code: gateway.CodeInvalidArgument},
		{hostPath: base + "/ro\x00", code: gateway.CodeInvalidArgument},
	}
	for _, tc := range tests {
		got, rule, err := AllowHostDir(rules, tc.hostPath)
		if tc.code != "" {
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Code != tc.code || ge.Details["field"] != "hostPath" {
				t.Errorf("%q: %v, want %s naming hostPath", tc.hostPath, err, tc.code)
			}
			continue
		}
		if err != nil || got != tc.want || rule.ReadWrite != tc.rw {
			t.Errorf("%q: %q %+v %v, want %q rw=%v", tc.hostPath, got, rule, err, tc.want, tc.rw)
		}
	}
	if _, _, err := AllowHostDir(nil, base+"/ro"); err == nil {
		t.Error("a gateway without --mount-allow allowed a host directory")
	}
}

func TestCheckGuestMountPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/mnt/data": true, "/workspace/out": true, "/optx": true, "/opt": true, "/developer": true,
		"": false, "/": false, "mnt": false, "/mnt/": false, "/mnt/../etc": false, "/mnt/./x": false, "//mnt": false,
		"/opt/agentos": false, "/opt/agentos/bin": false, "/proc": false, "/dev/x": false, "/mnt/\x00": false,
		"/" + strings.Repeat("a", 1024): false,
	} {
		if err := CheckGuestMountPath(p); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", p, err, ok)
		}
	}
}

// FuzzAllowHostDir: whatever a tenant sends as hostPath, what is allowed is
// a directory that lies, symbolic links resolved, within an allowed one and
// has the rule's mode, and a refusal names hostPath with a stable code.
func FuzzAllowHostDir(f *testing.F) {
	base := hostTree(f)
	rules := []MountRule{{Path: base + "/ro"}, {Path: base + "/rw", ReadWrite: true}}
	for _, seed := range []string{"/ro", "/ro/inner", "/ro/escape", "/ro/../outside", "/ro/up/rw", "/rw/../ro/sub", "/ro/missing/..", "//ro//sub/", "/ro/\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		got, rule, err := AllowHostDir(rules, base+rel)
		if err != nil {
			var ge *gateway.Error
			if !errors.As(err, &ge) || (ge.Code != gateway.CodePermissionDenied && ge.Code != gateway.CodeInvalidArgument) || ge.Details["field"] != "hostPath" {
				t.Fatalf("%q: %v", rel, err)
			}
			return
		}
		resolved, rerr := filepath.EvalSymlinks(got)
		if rerr != nil || resolved != got {
			t.Fatalf("%q: allowed %q, which resolves to %q (%v)", rel, got, resolved, rerr)
		}
		if st, err := os.Stat(got); err != nil || !st.IsDir() {
			t.Fatalf("%q: allowed %q, not a directory", rel, got)
		}
		want, ok := MatchMountRule(rules, got)
		if !ok || want != rule {
			t.Fatalf("%q: allowed %q under %+v, want %+v", rel, got, rule, want)
		}
	})
}
