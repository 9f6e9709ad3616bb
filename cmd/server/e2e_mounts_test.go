package main

// Mounts and software, end to end: real gateway, real sidecar, real host
// directories.

import (
	"bytes"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// mountTree is the host side of the mounts test: two allowed directories
// (ro read-only, rw read-write) and, beside them, one that is not allowed,
// with links from the read-only one to the outside and to its own subtree.
type mountTree struct {
	ro, rw, outside string
}

func newMountTree(t *testing.T) mountTree {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := mountTree{ro: filepath.Join(base, "ro"), rw: filepath.Join(base, "rw"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{m.ro, filepath.Join(m.ro, "sub"), m.rw, m.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{
		filepath.Join(m.ro, "hello.txt"):       "hello from the host\n",
		filepath.Join(m.ro, "sub", "deep.txt"): "deep\n",
		filepath.Join(m.rw, "host.txt"):        "written on the host\n",
		filepath.Join(m.outside, "secret.txt"): "secret\n",
	} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(m.ro, "escape"): m.outside,
		filepath.Join(m.ro, "inner"):  filepath.Join(m.ro, "sub"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	// The guest's processes run as uid 1000 and the engine shows the host's
	// owners and modes: the read-write directory must let them write.
	if err := os.Chmod(m.rw, 0o777); err != nil {
		t.Fatal(err)
	}
	return m
}

// fieldOf is the details.field of a refusal.
func fieldOf(ce *client.Error) string {
	f, _ := ce.Details["field"].(string)
	return f
}

// TestE2EMounts: host directories allowed read-only and read-write by
// --mount-allow (given twice: repeatable) are mounted, their files seen in
// the guest, writes refused through a read-only mount and kept on the host
// through a read-write one; a path outside the allowed ones, by name, by ..
// or by a symlink, is refused; an in-memory filesystem is mounted; mounts
// are listed and unmounted; another tenant's VM is 404 on every route; bad
// input is 400 naming the field.
func TestE2EMounts(t *testing.T) {
	t.Parallel()
	m := newMountTree(t)
	e := newE2E(t, "--mount-allow", m.ro, "--mount-allow", m.rw+":rw")
	ctx := ctxT(t)
	o := e.ownerAndOther("mounts")
	keyA, keyB, ca, cb, vm, h := o.key, o.otherKey, o.c, o.other, o.vm, o.c.VM(o.vm.ID)

	// A directory allowed read-only is mounted read-only by default, and
	// is what the guest sees.
	ro, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/ro", Driver: client.MountHostDir, HostPath: m.ro})
	if err != nil {
		t.Fatal(err)
	}
	if *ro != (client.Mount{Path: "/mnt/ro", Driver: client.MountHostDir, HostPath: m.ro, ReadOnly: true}) {
		t.Errorf("read-only mount: %+v", ro)
	}
	if got := e.exec(ca, vm.ID, "cat /mnt/ro/hello.txt /mnt/ro/sub/deep.txt"); got != "hello from the host\ndeep\n" {
		t.Errorf("guest reads %q", got)
	}
	rc, err := h.ReadFile(ctx, "/mnt/ro/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello from the host\n" {
		t.Errorf("files API reads %q", b)
	}
	// Writing through it fails in the guest and through the files API,
	// and nothing reaches the host.
	res, err := h.Exec(ctx, client.ExecRequest{Command: "sh -c 'echo x > /mnt/ro/new.txt'"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 {
		t.Errorf("a guest write through a read-only mount exited 0")
	}
	_, err = h.WriteFile(ctx, "/mnt/ro/api.txt", strings.NewReader("x"), client.WriteFileOptions{})
	wantCode(t, err, client.CodePermissionDenied, 403)
	for _, name := range []string{"new.txt", "api.txt"} {
		if _, err := os.Stat(filepath.Join(m.ro, name)); !os.IsNotExist(err) {
			t.Errorf("%s reached the read-only host directory: %v", name, err)
		}
	}
	// It may not be asked for read-write.
	ce := wantCode(t, e.mountErr(h, client.MountRequest{Path: "/mnt/ro-rw", Driver: client.MountHostDir, HostPath: m.ro, ReadOnly: new(false)}),
		client.CodePermissionDenied, 403)
	if fieldOf(ce) != "readOnly" {
		t.Errorf("read-write on a read-only directory: %+v", ce)
	}

	// A directory allowed read-write is mounted read-write: the guest's
	// writes land on the host and the host's are seen in the guest.
	rw, err := h.Mount(ctx, client.MountRequest{Path: "/workspace/out", Driver: client.MountHostDir, HostPath: m.rw})
	if err != nil {
		t.Fatal(err)
	}
	if rw.ReadOnly || rw.HostPath != m.rw {
		t.Errorf("read-write mount: %+v", rw)
	}
	e.exec(ca, vm.ID, "sh -c 'echo made in the guest > /workspace/out/guest.txt'")
	if b, err := os.ReadFile(filepath.Join(m.rw, "guest.txt")); err != nil || string(b) != "made in the guest\n" {
		t.Errorf("host sees %q, %v", b, err)
	}
	if _, err := h.WriteFile(ctx, "/workspace/out/api.txt", strings.NewReader("through the API"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(m.rw, "api.txt")); err != nil || string(b) != "through the API" {
		t.Errorf("host sees %q, %v", b, err)
	}
	if got := e.exec(ca, vm.ID, "cat /workspace/out/host.txt"); got != "written on the host\n" {
		t.Errorf("guest reads %q", got)
	}
	// ...or read-only when asked.
	rwro, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/rw-ro", Driver: client.MountHostDir, HostPath: m.rw, ReadOnly: new(true)})
	if err != nil || !rwro.ReadOnly {
		t.Fatalf("read-only mount of a read-write directory: %+v, %v", rwro, err)
	}
	_, err = h.WriteFile(ctx, "/mnt/rw-ro/x.txt", strings.NewReader("x"), client.WriteFileOptions{})
	wantCode(t, err, client.CodePermissionDenied, 403)

	// A link inside an allowed directory to its own subtree is allowed (and
	// shown resolved); paths leaving the allowed directories are refused
	// alike, by name, by .., by a symlink, existing or not.
	inner, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/inner", Driver: client.MountHostDir, HostPath: filepath.Join(m.ro, "inner")})
	if err != nil || inner.HostPath != filepath.Join(m.ro, "sub") || !inner.ReadOnly {
		t.Fatalf("mount through an inner link: %+v, %v", inner, err)
	}
	if got := e.exec(ca, vm.ID, "cat /mnt/inner/deep.txt"); got != "deep\n" {
		t.Errorf("guest reads %q", got)
	}
	for _, hp := range []string{
		m.outside,
		filepath.Join(m.outside, "missing"),
		m.ro + "/../outside",
		m.ro + "/sub/../../outside",
		filepath.Join(m.ro, "escape"),
		filepath.Join(m.ro, "escape", "sub"),
		"/",
		"/etc",
	} {
		ce := wantCode(t, e.mountErr(h, client.MountRequest{Path: "/mnt/out", Driver: client.MountHostDir, HostPath: hp}), client.CodePermissionDenied, 403)
		if fieldOf(ce) != "hostPath" || strings.Contains(ce.Detail, m.ro) {
			t.Errorf("hostPath %s: %+v", hp, ce)
		}
	}
	// Inside an allowed directory, a path that is not a directory is the
	// caller's mistake.
	for _, hp := range []string{filepath.Join(m.ro, "missing"), filepath.Join(m.ro, "hello.txt")} {
		ce := wantCode(t, e.mountErr(h, client.MountRequest{Path: "/mnt/out", Driver: client.MountHostDir, HostPath: hp}), client.CodeInvalidArgument, 400)
		if fieldOf(ce) != "hostPath" {
			t.Errorf("hostPath %s: %+v", hp, ce)
		}
	}

	// An in-memory filesystem.
	mem, err := h.Mount(ctx, client.MountRequest{Path: "/scratch", Driver: client.MountMemory})
	if err != nil || *mem != (client.Mount{Path: "/scratch", Driver: client.MountMemory}) {
		t.Fatalf("memory mount: %+v, %v", mem, err)
	}
	if _, err := h.WriteFile(ctx, "/scratch/a.txt", strings.NewReader("in memory"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.exec(ca, vm.ID, "cat /scratch/a.txt"); got != "in memory" {
		t.Errorf("guest reads %q", got)
	}
	memro, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/frozen", Driver: client.MountMemory, ReadOnly: new(true)})
	if err != nil || !memro.ReadOnly {
		t.Fatalf("read-only memory mount: %+v, %v", memro, err)
	}

	// Listed in order, as mounted.
	list, err := h.Mounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Mount{*ro, *rw, *rwro, *inner, *mem, *memro}
	if !slices.Equal(list, want) {
		t.Errorf("mounts:\n got %+v\nwant %+v", list, want)
	}

	// A path mounted already is a conflict; bad input is 400 naming the
	// field.
	ce = wantCode(t, e.mountErr(h, client.MountRequest{Path: "/scratch", Driver: client.MountMemory}), client.CodeConflict, 409)
	if fieldOf(ce) != "path" {
		t.Errorf("mounted twice: %+v", ce)
	}
	for _, tc := range []struct {
		body, field string
	}{
		{`{"driver":"memory"}`, "path"},
		{`{"path":"mnt/x","driver":"memory"}`, "path"},
		{`{"path":"/mnt/../x","driver":"memory"}`, "path"},
		{`{"path":"/mnt/x/","driver":"memory"}`, "path"},
		{`{"path":"/","driver":"memory"}`, "path"},
		{`{"path":"/opt/agentos/bin","driver":"memory"}`, "path"},
		{`{"path":"/proc","driver":"memory"}`, "path"},
		{`{"path":"/mnt/x\u0000","driver":"memory"}`, "path"},
		{`{"path":"/mnt/x"}`, "driver"},
		{`{"path":"/mnt/x","driver":"chunked_s3"}`, "driver"},
		{`{"path":"/mnt/x","driver":"memory","hostPath":"/tmp"}`, "hostPath"},
		{`{"path":"/mnt/x","driver":"host_dir"}`, "hostPath"},
		{`{"path":"/mnt/x","driver":"host_dir","hostPath":"relative/dir"}`, "hostPath"},
		{`{"path":"/mnt/x","driver":"memory","readOnly":"yes"}`, "readOnly"},
		{`{"path":"/mnt/x","driver":"memory","size":1}`, "size"},
	} {
		ce := wantCode(t, e.raw("POST", "/v1/vms/"+vm.ID+"/mounts", keyA, strings.NewReader(tc.body), nil), client.CodeInvalidArgument, 400)
		if fieldOf(ce) != tc.field {
			t.Errorf("%s: field %q, want %q (%s)", tc.body, fieldOf(ce), tc.field, ce.Detail)
		}
	}

	// Another tenant's VM is not found, whatever the request.
	_, err = cb.VM(vm.ID).Mounts(ctx)
	wantCode(t, err, client.CodeNotFound, 404)
	_, err = cb.VM(vm.ID).Mount(ctx, client.MountRequest{Path: "/mnt/b", Driver: client.MountMemory})
	wantCode(t, err, client.CodeNotFound, 404)
	wantCode(t, e.raw("POST", "/v1/vms/"+vm.ID+"/mounts", keyB, strings.NewReader(`{"bad":1}`), nil), client.CodeNotFound, 404)
	wantCode(t, cb.VM(vm.ID).Unmount(ctx, "/scratch"), client.CodeNotFound, 404)

	// Unmounted: the guest no longer sees the files, the host keeps them.
	if err := h.Unmount(ctx, "/workspace/out"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Stat(ctx, "/workspace/out/host.txt"); err == nil {
		t.Error("a file of an unmounted directory is still seen")
	}
	if _, err := os.Stat(filepath.Join(m.rw, "guest.txt")); err != nil {
		t.Errorf("the host lost the guest's file: %v", err)
	}
	if err := h.Unmount(ctx, "/scratch"); err != nil {
		t.Fatal(err)
	}
	list, err = h.Mounts(ctx)
	if err != nil || !slices.Equal(list, []client.Mount{*ro, *rwro, *inner, *memro}) {
		t.Errorf("mounts after unmounting: %+v, %v", list, err)
	}
	ce = wantCode(t, h.Unmount(ctx, "/scratch"), client.CodeNotFound, 404)
	if fieldOf(ce) != "path" {
		t.Errorf("unmount twice: %+v", ce)
	}
	ce = wantCode(t, e.raw("DELETE", "/v1/vms/"+vm.ID+"/mounts", keyA, nil, nil), client.CodeInvalidArgument, 400)
	if fieldOf(ce) != "path" {
		t.Errorf("unmount without a path: %+v", ce)
	}
	// The other mounts still work.
	if got := e.exec(ca, vm.ID, "cat /mnt/ro/hello.txt"); got != "hello from the host\n" {
		t.Errorf("after unmounting others, guest reads %q", got)
	}
	// They come back with the VM after a hibernation (and its image does
	// not carry the host's files).
	before, err := h.Mounts(ctx)
	if err != nil || len(before) == 0 {
		t.Fatalf("mounts before the hibernation: %+v %v", before, err)
	}
	if _, err := h.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.exec(ca, vm.ID, "cat /mnt/ro/hello.txt"); got != "hello from the host\n" {
		t.Errorf("after a wake, guest reads %q", got)
	}
	if after, err := h.Mounts(ctx); err != nil || !slices.Equal(after, before) {
		t.Errorf("mounts after a wake: %+v %v; before %+v", after, err, before)
	}
}

// ownedVM is a VM of one tenant, with its key and client, and a client of
// another tenant.
type ownedVM struct {
	key, otherKey string
	c, other      *client.Client
	vm            *client.VM
}

// ownerAndOther creates two tenants and a VM of the first.
func (e *e2e) ownerAndOther(name string) ownedVM {
	e.t.Helper()
	_, key := e.tenantWithKey(name+"-a", nil)
	_, otherKey := e.tenantWithKey(name+"-b", nil)
	c := e.client(key)
	return ownedVM{key: key, otherKey: otherKey, c: c, other: e.client(otherKey), vm: e.vm(c, client.CreateVMRequest{})}
}

// mountErr is the error of a mount that must fail.
func (e *e2e) mountErr(h *client.VMHandle, req client.MountRequest) error {
	e.t.Helper()
	m, err := h.Mount(ctxT(e.t), req)
	if err == nil {
		e.t.Fatalf("mount %+v succeeded: %+v", req, m)
	}
	return err
}

// TestE2EMountsNotAllowed: a gateway without --mount-allow refuses every
// host directory, and still mounts memory.
func TestE2EMountsNotAllowed(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	vm := e.vm(e.admin, client.CreateVMRequest{})
	h := e.admin.VM(vm.ID)
	ce := wantCode(t, e.mountErr(h, client.MountRequest{Path: "/mnt/tmp", Driver: client.MountHostDir, HostPath: t.TempDir()}), client.CodePermissionDenied, 403)
	if fieldOf(ce) != "hostPath" {
		t.Errorf("%+v", ce)
	}
	if _, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/mem", Driver: client.MountMemory}); err != nil {
		t.Fatal(err)
	}
}

// TestE2ESoftware: the VM's software is listed; an installed package is
// linked (its commands run at once, its agent is listed, and it stays linked
// across a later mount); linking it again is 200; an unknown package is
// 400; another tenant's VM is 404.
func TestE2ESoftware(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxT(t)
	o := e.ownerAndOther("software")
	keyA, ca, cb, vm, h := o.key, o.c, o.other, o.vm, o.c.VM(o.vm.ID)

	names := func() []string {
		t.Helper()
		sw, err := h.Software(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range sw {
			out = append(out, s.Name)
			if s.Name == "coreutils" && !slices.Contains(s.Commands, "ls") {
				t.Errorf("coreutils without ls: %v", s.Commands)
			}
		}
		return out
	}
	before := names()
	if !slices.Contains(before, "coreutils") || slices.Contains(before, "pi") {
		t.Fatalf("software of a new VM: %v", before)
	}

	resp, b := e.send("POST", "/v1/vms/"+vm.ID+"/software", keyA, strings.NewReader(`{"package":"@agentos-software/pi"}`), nil)
	if resp.StatusCode != 201 {
		t.Fatalf("link: %d %s", resp.StatusCode, b)
	}
	linked, err := h.LinkSoftware(ctx, "@agentos-software/pi")
	if err != nil {
		t.Fatal(err)
	}
	if linked.Package != "@agentos-software/pi" || linked.Name != "pi" || !slices.Contains(linked.Commands, "pi") || !slices.Equal(linked.Agents, []string{"pi"}) {
		t.Errorf("linked: %+v", linked)
	}
	resp, b = e.send("POST", "/v1/vms/"+vm.ID+"/software", keyA, strings.NewReader(`{"package":"@agentos-software/pi"}`), nil)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"name":"pi"`)) {
		t.Errorf("link again: %d %s", resp.StatusCode, b)
	}
	if !slices.Contains(names(), "pi") {
		t.Error("pi is not listed once linked")
	}
	e.exec(ca, vm.ID, "test -e /opt/agentos/bin/pi")
	agents, err := h.Agents(ctx)
	if err != nil || !slices.ContainsFunc(agents, func(a client.Agent) bool { return a.ID == "pi" && a.Installed }) {
		t.Errorf("agents after linking pi: %+v, %v", agents, err)
	}
	// A mount resends the VM's configuration: the package stays.
	if _, err := h.Mount(ctx, client.MountRequest{Path: "/mnt/mem", Driver: client.MountMemory}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(), "pi") {
		t.Error("pi is gone after a mount")
	}

	for _, tc := range []struct{ body, field string }{
		{`{"package":"@agentos-software/nope"}`, "package"},
		{`{"package":"../../etc"}`, "package"},
		{`{"package":"/abs/path.aospkg"}`, "package"},
		{`{}`, "package"},
		{`{"package":7}`, "package"},
		{`{"package":"pi","version":"1"}`, "version"},
	} {
		ce := wantCode(t, e.raw("POST", "/v1/vms/"+vm.ID+"/software", keyA, strings.NewReader(tc.body), nil), client.CodeInvalidArgument, 400)
		if fieldOf(ce) != tc.field {
			t.Errorf("%s: field %q, want %q (%s)", tc.body, fieldOf(ce), tc.field, ce.Detail)
		}
	}
	_, err = h.LinkSoftware(ctx, "@agentos-software/nope")
	if ce := wantCode(t, err, client.CodeInvalidArgument, 400); !strings.Contains(ce.Detail, "not installed") {
		t.Errorf("unknown package: %+v", ce)
	}

	_, err = cb.VM(vm.ID).Software(ctx)
	wantCode(t, err, client.CodeNotFound, 404)
	_, err = cb.VM(vm.ID).LinkSoftware(ctx, "@agentos-software/pi")
	wantCode(t, err, client.CodeNotFound, 404)
	wantCode(t, e.raw("GET", "/v1/vms/"+url.PathEscape("vm_nope")+"/software", keyA, nil, nil), client.CodeNotFound, 404)
}
