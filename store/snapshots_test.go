package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestSnapshotsWithinQuota(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		a, err := db.CreateSnapshotWithinQuota(ctx, gateway.Snapshot{TenantID: "acme", VMID: "vm_a", Bytes: 600, Files: 3, Dirs: 2, Symlinks: 1, Node: "n1", Blob: "b1"}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.GetSnapshot(ctx, "acme", a.ID)
		if err != nil || got != a {
			t.Fatalf("GetSnapshot = %+v, %v; want %+v", got, err, a)
		}
		_, err = db.GetSnapshot(ctx, "globex", a.ID)
		wantCode(t, err, gateway.CodeNotFound)

		// 600 + 500 passes the quota of 1000; another tenant's bytes do not count.
		_, err = db.CreateSnapshotWithinQuota(ctx, gateway.Snapshot{TenantID: "acme", VMID: "vm_a", Bytes: 500, Blob: "b2"}, 1000)
		wantCode(t, err, gateway.CodeResourceExhausted)
		if _, err := db.CreateSnapshotWithinQuota(ctx, gateway.Snapshot{TenantID: "globex", VMID: "vm_g", Bytes: 900, Blob: "b3"}, 1000); err != nil {
			t.Fatal(err)
		}
		b, err := db.CreateSnapshotWithinQuota(ctx, gateway.Snapshot{TenantID: "acme", VMID: "vm_b", Bytes: 400, Blob: "b4"}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if used, err := db.SnapshotBytes(ctx, "acme"); err != nil || used != 1000 {
			t.Fatalf("SnapshotBytes = %d, %v; want 1000", used, err)
		}
		page, err := db.ListSnapshots(ctx, gateway.SnapshotFilter{TenantID: "acme"})
		if err != nil || len(page.Items) != 2 || page.Items[0].ID != a.ID || page.Items[1].ID != b.ID {
			t.Fatalf("ListSnapshots = %+v, %v", page, err)
		}
		page, err = db.ListSnapshots(ctx, gateway.SnapshotFilter{TenantID: "acme", VMID: "vm_b"})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != b.ID {
			t.Fatalf("ListSnapshots(vm_b) = %+v, %v", page, err)
		}
		_, err = db.DeleteSnapshot(ctx, "globex", a.ID)
		wantCode(t, err, gateway.CodeNotFound)
		del, err := db.DeleteSnapshot(ctx, "acme", a.ID)
		if err != nil || del.Blob != "b1" {
			t.Fatalf("DeleteSnapshot = %+v, %v", del, err)
		}
		_, err = db.DeleteSnapshot(ctx, "acme", a.ID)
		wantCode(t, err, gateway.CodeNotFound)

		// Concurrent snapshots pass the quota's last bytes once.
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = db.CreateSnapshotWithinQuota(ctx, gateway.Snapshot{TenantID: "acme", VMID: "vm_c", Bytes: 600, Blob: "c"}, 1000)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case gateway.ErrorCode(err) != gateway.CodeResourceExhausted:
				t.Fatalf("concurrent snapshot: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of 4 concurrent snapshots of 600 bytes passed 600 free bytes, want 1", ok)
		}
	})
}

func TestLargeObjects(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		if !db.LargeObjects() {
			if _, _, err := db.PutLargeObject(ctx, bytes.NewReader(nil)); !errors.Is(err, ErrNoLargeObjects) {
				t.Fatalf("PutLargeObject on %s: %v", db.Dialect(), err)
			}
			return
		}
		for _, size := range []int{0, 1, largeObjectChunk, 3*largeObjectChunk + 17} {
			data := make([]byte, size)
			_, _ = rand.Read(data)
			name, n, err := db.PutLargeObject(ctx, bytes.NewReader(data))
			if err != nil || n != int64(size) {
				t.Fatalf("PutLargeObject(%d bytes) = %d, %v", size, n, err)
			}
			rc, err := db.OpenLargeObject(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("large object of %d bytes read back as %d bytes, %v", size, len(got), err)
			}
			if err := db.DeleteLargeObject(ctx, name); err != nil {
				t.Fatal(err)
			}
			if err := db.DeleteLargeObject(ctx, name); err != nil {
				t.Fatalf("deleting a removed large object: %v", err)
			}
			rc, _ = db.OpenLargeObject(ctx, name)
			if _, err := io.ReadAll(rc); gateway.ErrorCode(err) != gateway.CodeNotFound {
				t.Fatalf("reading a removed large object: %v, want not_found", err)
			}
		}
	})
}

// TestLargeObjectSeek: a large object's reader reads from wherever it was
// moved to, from the start or from where it is, forward and back, within
// the chunk already read and past it; past the end it reads nothing, and
// it refuses to move before the start or from the end.
func TestLargeObjectSeek(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		if !db.LargeObjects() {
			return
		}
		ctx := testContext(t)
		data := make([]byte, 3*largeObjectChunk+17)
		_, _ = rand.Read(data)
		name, _, err := db.PutLargeObject(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := db.OpenLargeObject(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		size := int64(len(data))
		steps := []struct {
			name    string
			offset  int64
			whence  int
			wantPos int64
			read    int
			wantErr bool
		}{
			{"read the start", 0, io.SeekStart, 0, 100, false},
			{"within the chunk read", 1000, io.SeekCurrent, 1100, 50, false},
			{"where it is", 0, io.SeekCurrent, 1150, 10, false},
			{"past the chunk read", largeObjectChunk + 5, io.SeekStart, largeObjectChunk + 5, largeObjectChunk, false},
			{"back to the start", 0, io.SeekStart, 0, 3, false},
			{"across chunks", 2*largeObjectChunk - 7, io.SeekStart, 2*largeObjectChunk - 7, 20, false},
			{"to the last bytes", size - 17, io.SeekStart, size - 17, 17, false},
			{"to the end", size, io.SeekStart, size, 0, false},
			{"past the end", size + 10, io.SeekStart, size + 10, 0, false},
			{"before the start", -1, io.SeekStart, 0, 0, true},
			{"from the end", 0, io.SeekEnd, 0, 0, true},
		}
		for _, st := range steps {
			pos, err := rs.Seek(st.offset, st.whence)
			if st.wantErr {
				if err == nil {
					t.Errorf("%s: Seek(%d, %d) = %d, want an error", st.name, st.offset, st.whence, pos)
				}
				continue
			}
			if err != nil || pos != st.wantPos {
				t.Fatalf("%s: Seek(%d, %d) = %d, %v; want %d", st.name, st.offset, st.whence, pos, err, st.wantPos)
			}
			got := make([]byte, st.read)
			if _, err := io.ReadFull(rs, got); err != nil || !bytes.Equal(got, data[min(pos, size):min(pos+int64(st.read), size)]) {
				t.Fatalf("%s: %d bytes read at %d are not the object's (%v)", st.name, st.read, pos, err)
			}
			if pos >= size {
				if n, err := rs.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
					t.Fatalf("%s: Read = %d, %v; want EOF", st.name, n, err)
				}
			}
		}
	})
}
