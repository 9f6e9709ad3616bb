package main

// Snapshots and fork, end to end: real gateway, real sidecars, real HTTP.

import (
	"archive/tar"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// snapshotTree is a small tree with every kind of entry a snapshot keeps:
// text, binary and empty files, modes, nested directories, symlinks.
func snapshotTree() []treeEntry {
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	return []treeEntry{
		{name: "a", typ: tar.TypeDir, mode: 0o755},
		{name: "a/b", typ: tar.TypeDir, mode: 0o750},
		{name: "a/b/c", typ: tar.TypeDir, mode: 0o700},
		{name: "a/b/c/deep.txt", typ: tar.TypeReg, mode: 0o640, body: []byte("deep down\n")},
		{name: "bin.dat", typ: tar.TypeReg, mode: 0o600, body: binary},
		{name: "nul.dat", typ: tar.TypeReg, mode: 0o644, body: []byte{0, 0, 0, '"', '\\', 0x1b}},
		{name: "empty", typ: tar.TypeReg, mode: 0o644},
		{name: "run.sh", typ: tar.TypeReg, mode: 0o755, body: []byte("#!/bin/sh\necho hi\n")},
		{name: "emptydir", typ: tar.TypeDir, mode: 0o711},
		{name: "link", typ: tar.TypeSymlink, link: "a/b/c/deep.txt", mode: 0o777},
		{name: "a/up", typ: tar.TypeSymlink, link: "..", mode: 0o777},
		{name: "dangling", typ: tar.TypeSymlink, link: "nowhere", mode: 0o777},
	}
}

// uploadTree puts es into dir of the VM through the archive upload.
func uploadTree(t *testing.T, c *client.Client, vm, dir string, es []treeEntry) {
	t.Helper()
	body, wait := streamTree(es, false)
	_, err := c.VM(vm).UploadArchive(ctxFor(t, 5*time.Minute), dir, body, client.ArchiveOptions{Mkdirs: true})
	if werr := wait(); err == nil {
		err = werr
	}
	if err != nil {
		t.Fatalf("upload the tree: %v", err)
	}
}

// checkVMTree downloads dir of the VM and checks it is es, byte for byte.
func checkVMTree(t *testing.T, c *client.Client, vm, dir string, es []treeEntry) {
	t.Helper()
	rc, err := c.VM(vm).DownloadArchive(ctxFor(t, 5*time.Minute), dir, client.ArchiveOptions{})
	if err != nil {
		t.Fatalf("download %s of %s: %v", dir, vm, err)
	}
	defer rc.Close()
	checkTree(t, rc, false, es)
}

// TestE2ESnapshots: a snapshot of a VM, and a VM created from it whose files
// match byte for byte (binary, empty, modes, nested dirs, symlinks, outside
// /workspace too); a fork of 3 that carries the files and none of the
// processes; 404 for another tenant's snapshot; quotas of bytes and VMs;
// deleting a snapshot; bad input 400s naming the field.
func TestE2ESnapshots(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxFor(t, 5*time.Minute)
	_, keyA := e.tenantWithKey("snap-a", nil)
	ca := e.client(keyA)
	_, keyB := e.tenantWithKey("snap-b", nil)
	cb := e.client(keyB)

	src := e.vm(ca, client.CreateVMRequest{Labels: map[string]string{"role": "source"}, Env: map[string]string{"FORKED": "yes"}})
	tree := snapshotTree()
	uploadTree(t, ca, src.ID, "/workspace/tree", tree)
	if _, err := ca.VM(src.ID).WriteFile(ctx, "/etc/outside.bin", strings.NewReader("\x00\x01outside\xff"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	// A file of the base layer removed in the source stays removed.
	if err := ca.VM(src.ID).DeleteFile(ctx, "/etc/motd", client.DeleteFileOptions{}); err != nil && !client.IsCode(err, client.CodeNotFound) {
		t.Fatal(err)
	}

	snap, err := ca.VM(src.ID).CreateSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.VMID != src.ID || snap.Bytes <= 0 || snap.Files < 7 || snap.Dirs < 5 || snap.Symlinks < 3 {
		t.Fatalf("snapshot %+v", snap)
	}
	if got, err := ca.GetSnapshot(ctx, snap.ID); err != nil || got.ID != snap.ID || got.Bytes != snap.Bytes {
		t.Fatalf("get snapshot: %+v, %v", got, err)
	}
	page, err := ca.ListSnapshots(ctx, client.ListSnapshotsOptions{VM: src.ID})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != snap.ID {
		t.Fatalf("list snapshots: %+v, %v", page, err)
	}

	// A VM from the snapshot has the tree, byte for byte. The source then
	// changes: the copy does not.
	clone := e.vm(ca, client.CreateVMRequest{FromSnapshot: snap.ID})
	if clone.FromSnapshot != snap.ID {
		t.Errorf("the clone's fromSnapshot is %q", clone.FromSnapshot)
	}
	if _, err := ca.VM(src.ID).WriteFile(ctx, "/workspace/tree/a/b/c/deep.txt", strings.NewReader("changed"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	checkVMTree(t, ca, clone.ID, "/workspace/tree", tree)
	if got := e.exec(ca, clone.ID, "cat /etc/outside.bin"); got != "\x00\x01outside\xff" {
		t.Errorf("/etc/outside.bin of the clone: %q", got)
	}
	if got := e.exec(ca, clone.ID, "sh /workspace/tree/run.sh"); got != "hi\n" {
		t.Errorf("a script of the clone: %q", got)
	}
	if _, err := ca.VM(clone.ID).Stat(ctx, "/etc/motd"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("a file removed before the snapshot is in the clone: %v", err)
	}

	// Another tenant sees none of it.
	_, err = cb.GetSnapshot(ctx, snap.ID)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	wantCode(t, cb.DeleteSnapshot(ctx, snap.ID), client.CodeNotFound, http.StatusNotFound)
	_, err = cb.CreateVM(ctx, client.CreateVMRequest{FromSnapshot: snap.ID})
	if ce := wantCode(t, err, client.CodeNotFound, http.StatusNotFound); ce.Details["field"] != "fromSnapshot" {
		t.Errorf("fromSnapshot of another tenant: details %v", ce.Details)
	}
	if page, err := cb.ListSnapshots(ctx, client.ListSnapshotsOptions{}); err != nil || len(page.Items) != 0 {
		t.Errorf("another tenant lists %+v, %v", page, err)
	}
	_, err = cb.VM(src.ID).CreateSnapshot(ctx)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	_, err = cb.VM(src.ID).Fork(ctx, 1)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)

	// A fork of 3: the source's files (as they are now) and spec, none of
	// its processes.
	sleeper, err := ca.VM(src.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep", Args: []string{"300"}})
	if err != nil {
		t.Fatal(err)
	}
	forks, err := ca.VM(src.ID).Fork(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 3 {
		t.Fatalf("a fork of 3 made %d VMs", len(forks))
	}
	// The forks have the source's tree as it is now, the rewritten file
	// with the mode its rewrite gave it.
	st, err := ca.VM(src.ID).Stat(ctx, "/workspace/tree/a/b/c/deep.txt")
	if err != nil {
		t.Fatal(err)
	}
	changed := append([]treeEntry{}, tree...)
	for i := range changed {
		if changed[i].name == "a/b/c/deep.txt" {
			changed[i].body, changed[i].mode = []byte("changed"), int64(st.Mode&0o777)
		}
	}
	seen := map[string]bool{}
	for _, f := range forks {
		if f.State != client.VMReady || f.Labels["role"] != "source" || f.Env["FORKED"] != "yes" || seen[f.ID] || f.ID == src.ID {
			t.Errorf("forked VM %+v", f)
		}
		seen[f.ID] = true
		checkVMTree(t, ca, f.ID, "/workspace/tree", changed)
		procs, err := ca.VM(f.ID).Processes(ctx)
		if err != nil || len(procs) != 0 {
			t.Errorf("forked VM %s runs %+v (%v); processes are not carried over", f.ID, procs, err)
		}
	}
	if err := sleeper.Signal(ctx, client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The fork's own snapshot is gone once the VMs exist.
	if page, err := ca.ListSnapshots(ctx, client.ListSnapshotsOptions{}); err != nil || len(page.Items) != 1 {
		t.Errorf("after the fork the tenant has snapshots %+v (%v), want the one it took", page, err)
	}

	// Deleting a snapshot: gone, and VMs made from it keep their files.
	if err := ca.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ca.GetSnapshot(ctx, snap.ID)
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	wantCode(t, ca.DeleteSnapshot(ctx, snap.ID), client.CodeNotFound, http.StatusNotFound)
	_, err = ca.CreateVM(ctx, client.CreateVMRequest{FromSnapshot: snap.ID})
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
	if got := e.exec(ca, clone.ID, "cat /workspace/tree/a/b/c/deep.txt"); got != "deep down\n" {
		t.Errorf("the clone after its snapshot was deleted: %q", got)
	}

	// Bad input is 400 naming the field.
	for _, tc := range []struct {
		path, body, field string
	}{
		{"/v1/vms/" + src.ID + "/fork", `{"count":0}`, "count"},
		{"/v1/vms/" + src.ID + "/fork", `{"count":17}`, "count"},
		{"/v1/vms/" + src.ID + "/fork", `{"count":"3"}`, "count"},
		{"/v1/vms/" + src.ID + "/fork", `{}`, "count"},
		{"/v1/vms/" + src.ID + "/fork", `{"count":1,"extra":true}`, "extra"},
		{"/v1/vms", `{"fromSnapshot":"snap_\u0000"}`, "fromSnapshot"},
		{"/v1/vms", `{"fromSnapshot":7}`, "fromSnapshot"},
		{"/v1/vms", `{"fromSnapshot":"` + strings.Repeat("s", 65) + `"}`, "fromSnapshot"},
	} {
		err := e.raw(http.MethodPost, tc.path, keyA, strings.NewReader(tc.body), map[string]string{"Content-Type": "application/json"})
		if ce := wantCode(t, err, client.CodeInvalidArgument, http.StatusBadRequest); ce.Details["field"] != tc.field {
			t.Errorf("POST %s %s: details %v, want field %s", tc.path, tc.body, ce.Details, tc.field)
		}
	}
	_, err = ca.GetSnapshot(ctx, "snap_missing")
	wantCode(t, err, client.CodeNotFound, http.StatusNotFound)
}

// TestE2ESnapshotQuotas: a tenant's snapshot bytes are bounded by its
// maxSnapshotBytes quota, and a fork by its maxVms quota (a fork that does
// not fit leaves no VM behind).
func TestE2ESnapshotQuotas(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := ctxFor(t, 5*time.Minute)

	_, small := e.tenant("snap-bytes", &client.Quotas{MaxSnapshotBytes: 4096})
	vm := e.vm(small, client.CreateVMRequest{})
	_, err := small.VM(vm.ID).CreateSnapshot(ctx)
	if ce := wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests); ce.Details["quota"] != "maxSnapshotBytes" {
		t.Errorf("over the byte quota: details %v", ce.Details)
	}
	if page, err := small.ListSnapshots(ctx, client.ListSnapshotsOptions{}); err != nil || len(page.Items) != 0 {
		t.Errorf("a refused snapshot is listed: %+v, %v", page, err)
	}

	// One snapshot fits the quota, a second does not.
	_, fits := e.tenant("snap-one", nil)
	vm2 := e.vm(fits, client.CreateVMRequest{})
	first, err := fits.VM(vm2.ID).CreateSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := e.admin.UpdateTenant(ctx, first.TenantID, client.TenantUpdate{Quotas: &client.QuotasUpdate{MaxSnapshotBytes: ptr(first.Bytes + first.Bytes/2)}})
	if err != nil || tn.Quotas.MaxSnapshotBytes != first.Bytes+first.Bytes/2 {
		t.Fatalf("set the byte quota: %+v, %v", tn, err)
	}
	_, err = fits.VM(vm2.ID).CreateSnapshot(ctx)
	wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
	if err := fits.DeleteSnapshot(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fits.VM(vm2.ID).CreateSnapshot(ctx); err != nil {
		t.Fatalf("a snapshot once the first was deleted: %v", err)
	}

	// maxVms 3 with one VM: a fork of 3 passes it (refused before anything
	// is made), a fork of 2 is made.
	_, two := e.tenant("snap-vms", &client.Quotas{MaxVMs: 3})
	vm3 := e.vm(two, client.CreateVMRequest{})
	_, err = two.VM(vm3.ID).Fork(ctx, 3)
	if ce := wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests); ce.Details["quota"] != "maxVms" {
		t.Errorf("a fork over the VM quota: details %v", ce.Details)
	}
	forks, err := two.VM(vm3.ID).Fork(ctx, 2)
	if err != nil || len(forks) != 2 {
		t.Fatalf("a fork of 2 within the quota: %d VMs, %v", len(forks), err)
	}
	_, err = two.VM(vm3.ID).Fork(ctx, 1)
	wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
	page, err := two.ListVMs(ctx, client.ListVMsOptions{})
	if err != nil || len(page.Items) != 3 {
		t.Fatalf("after the refused fork the tenant has %d live VMs (%v), want 3", len(page.Items), err)
	}
}

// TestE2EFork100MiB forks a VM holding a 100 MiB tree, past what one
// snapshot frame of the engine carries (agentos.SnapshotFrameBytes): the
// snapshot is walked and the new VM filled in chunked file calls, and the
// tree arrives intact: the guest's sha256sum of every file is the same in
// both VMs, and the small entries (modes, symlink) come back as sent. The
// gateway is the built binary, without the race detector: the test is of
// the engine's limits and the gateway's chunking, and an instrumented copy
// of every byte would cost minutes. The data is streamed from a pattern,
// never held whole.
func TestE2EFork100MiB(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100 MiB through two VMs")
	}
	bin := buildGateway(t)
	cmd, base, logs := startBinary(t, bin, t.TempDir())
	t.Cleanup(func() {
		// Stopped gracefully, so that its sidecars are gone with it.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("gateway exit: %v\n%s", err, logs.String())
		}
	})
	c := mustClient(t, base, testAdminKey)
	ctx := ctxFor(t, 10*time.Minute)
	vm, err := c.CreateVM(ctx, client.CreateVMRequest{Limits: map[string]any{"resources": map[string]any{"maxFilesystemBytes": 512 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	// The entries of tree/small, named as its download names them.
	small := []treeEntry{
		{name: "link", typ: tar.TypeSymlink, link: "../big/a.bin", mode: 0o777},
		{name: "empty", typ: tar.TypeReg, mode: 0o600},
	}
	for i := range 20 {
		small = append(small, treeEntry{name: fmt.Sprintf("f%02d.txt", i), typ: tar.TypeReg, mode: 0o640, body: []byte(strings.Repeat(string(rune('a'+i)), i<<10))})
	}
	big := []struct {
		name string
		size int64
	}{{"big/a.bin", 60 << 20}, {"big/b.bin", 40<<20 - 20<<10}}
	pr, pw := io.Pipe()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "big/", Typeflag: tar.TypeDir, Mode: 0o755})
		for i, f := range big {
			if err == nil {
				err = tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: f.size})
			}
			if err == nil {
				_, err = io.Copy(tw, io.LimitReader(newBlockPattern(int64(i)), f.size))
			}
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: "small/", Typeflag: tar.TypeDir, Mode: 0o750})
		}
		for _, te := range small {
			if err == nil {
				err = tw.WriteHeader(&tar.Header{Name: "small/" + te.name, Typeflag: te.typ, Mode: te.mode, Linkname: te.link, Size: int64(len(te.body))})
			}
			if err == nil {
				_, err = tw.Write(te.body)
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err = c.VM(vm.ID).UploadArchive(ctx, "/workspace/tree", pr, client.ArchiveOptions{Mkdirs: true})
	pr.Close() // ends the writer if the upload stopped reading
	<-wrote
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	forks, err := c.VM(vm.ID).Fork(ctx, 1)
	if err != nil {
		t.Fatalf("fork: %v\n%s", err, logs.String())
	}
	t.Logf("fork of a 100 MiB tree: %v", time.Since(start))
	sums := func(id string) string {
		t.Helper()
		res, err := c.VM(id).Exec(ctx, client.ExecRequest{Command: "sh -c 'cd /workspace/tree && sha256sum big/a.bin big/b.bin small/*.txt small/empty'", Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("sha256sum in %s: %+v, %v", id, res, err)
		}
		return string(res.Stdout)
	}
	want, got := sums(vm.ID), sums(forks[0].ID)
	if got != want || strings.Count(want, "\n") != len(big)+len(small)-1 {
		t.Fatalf("the fork's files:\n%s\nthe source's:\n%s", got, want)
	}
	checkVMTree(t, c, forks[0].ID, "/workspace/tree/small", small)
}

// blockPattern is an endless byte source that repeats a block of a prime
// length, so that no two 4 MiB chunks of it are alike: a chunk written at
// the wrong offset changes the file's hash. Its reads are copies, cheap
// under the race detector.
type blockPattern struct {
	block []byte
	off   int
}

func newBlockPattern(seed int64) *blockPattern {
	const size = 1<<20 + 7
	b := make([]byte, size)
	for i := range b {
		b[i] = byte((int64(i)*31 + seed*17 + int64(i>>8)) % 251)
	}
	return &blockPattern{block: b}
}

func (p *blockPattern) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := copy(b[n:], p.block[p.off:])
		n += k
		p.off = (p.off + k) % len(p.block)
	}
	return n, nil
}

func ptr[T any](v T) *T { return &v }

// TestE2EClusterSnapshots: two gateway binaries on one PostgreSQL store. A
// snapshot taken of a VM on one node is listed through the other, its bytes
// are a large object, and a VM created from it lands on the other node
// (least-loaded placement) with the files; a fork through the other node
// runs on the VM's own node.
func TestE2EClusterSnapshots(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs two gateway binaries")
	}
	cl := startCluster(t, 2)
	ctx := ctxFor(t, 5*time.Minute)
	nodes := cl.nodes
	byID := map[string]*clusterNode{nodes[0].id: nodes[0], nodes[1].id: nodes[1]}
	other := func(id string) *clusterNode {
		if id == nodes[0].id {
			return nodes[1]
		}
		return nodes[0]
	}

	src, err := nodes[0].c.CreateVM(ctx, client.CreateVMRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if byID[src.Node] == nil {
		t.Fatalf("the VM runs on %q", src.Node)
	}
	tree := snapshotTree()
	uploadTree(t, nodes[0].c, src.ID, "/workspace/tree", tree)
	// Through the node that does not run the VM: proxied to its owner.
	snap, err := other(src.Node).c.VM(src.ID).CreateSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Node != src.Node {
		t.Errorf("the snapshot was taken on %q, the VM runs on %q", snap.Node, src.Node)
	}
	for _, n := range nodes {
		if got, err := n.c.GetSnapshot(ctx, snap.ID); err != nil || got.Bytes != snap.Bytes {
			t.Fatalf("snapshot through %s: %+v, %v", n.id, got, err)
		}
	}
	clone, err := byID[src.Node].c.CreateVM(ctx, client.CreateVMRequest{FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if clone.Node == src.Node {
		t.Fatalf("the clone runs on the snapshot's node %s too: it proves nothing about the other node", clone.Node)
	}
	checkVMTree(t, nodes[0].c, clone.ID, "/workspace/tree", tree)

	forks, err := byID[clone.Node].c.VM(src.ID).Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkVMTree(t, nodes[1].c, forks[0].ID, "/workspace/tree", tree)
	if err := nodes[1].c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	_, err = nodes[0].c.GetSnapshot(ctx, snap.ID)
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("a deleted snapshot through the other node: %v", err)
	}
}
