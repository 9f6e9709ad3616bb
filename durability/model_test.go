package durability

import (
	"slices"
	"strings"
	"testing"
)

// TestModel: the model's operations do what the guest's would, and diff
// names every difference; a wrong model would pass a gateway that loses
// files or fail one that keeps them.
func TestModel(t *testing.T) {
	m := tree{"/workspace": {kind: 'd', mode: 0o755}}
	if err := m.writeFile("/workspace/a", []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.writeFile("/nowhere/a", nil, 0o644); err == nil {
		t.Fatal("a write without a parent directory succeeded")
	}
	if err := m.chmod("/workspace/a", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.writeFile("/workspace/a", []byte("two"), 0o644); err != nil || m["/workspace/a"].mode != 0o600 {
		t.Fatalf("a rewrite keeps the file's mode: %v %o", err, m["/workspace/a"].mode)
	}
	if err := m.appendFile("/workspace/a", []byte("+")); err != nil || string(m["/workspace/a"].data) != "two+" {
		t.Fatalf("append: %v %q", err, m["/workspace/a"].data)
	}
	if err := m.mkdirAll("/workspace/d/e"); err != nil || m["/workspace/d"].kind != 'd' {
		t.Fatalf("mkdir -p: %v", err)
	}
	if err := m.writeFile("/workspace/d/e/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.move("/workspace/d", "/workspace/d/e/g"); err == nil {
		t.Fatal("a directory moved into itself")
	}
	if err := m.move("/workspace/d", "/workspace/m"); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["/workspace/m/e/f"]; !ok || len(m) != 5 {
		t.Fatalf("move carries the subtree:\n%s", m)
	}
	before := m.clone()
	if err := m.remove("/workspace/m"); err != nil || len(m) != 2 {
		t.Fatalf("remove takes the subtree: %v\n%s", err, m)
	}
	d := diff(before, m)
	want := []string{"/workspace/m/e/f: want", "/workspace/m/e: want", "/workspace/m: want"}
	if len(d) != len(want) {
		t.Fatalf("diff: %q", d)
	}
	for _, w := range want {
		if !slices.ContainsFunc(d, func(s string) bool { return strings.HasPrefix(s, w) && strings.Contains(s, "the VM has nothing") }) {
			t.Errorf("diff %q lacks %q", d, w)
		}
	}
	changed := before.clone()
	e := changed["/workspace/a"]
	e.data = []byte("other")
	changed["/workspace/a"] = e
	if d := diff(before, changed); len(d) != 1 || !strings.HasPrefix(d[0], "/workspace/a:") {
		t.Fatalf("diff of a changed file: %q", d)
	}
}

// TestGeneratorReplays: a seed's steps follow from the seed alone, so a
// failing seed replays.
func TestGeneratorReplays(t *testing.T) {
	steps := func(seed uint64) []string {
		g := newGenerator(seed, false, true)
		m := tree{"/workspace": {kind: 'd', mode: 0o755}, "/home/agentos": {kind: 'd', mode: 0o755}}
		var out []string
		for range 40 {
			s := g.next(m)
			if err := s.apply(m); err != nil {
				t.Fatalf("seed %d: step %s does not apply to the model: %v", seed, s, err)
			}
			out = append(out, s.String())
		}
		return out
	}
	a, b := steps(7), steps(7)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 gave two sequences:\n%q\n%q", a, b)
	}
	if slices.Equal(a, steps(8)) {
		t.Fatal("seeds 7 and 8 gave the same sequence")
	}
}
