package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const snapshotColumns = `id, tenant_id, vm_id, bytes, files, dirs, symlinks, node, blob, created_at`

func scanSnapshot(row interface{ Scan(...any) error }) (gateway.Snapshot, error) {
	var s gateway.Snapshot
	err := row.Scan(&s.ID, &s.TenantID, &s.VMID, &s.Bytes, &s.Files, &s.Dirs, &s.Symlinks, &s.Node, &s.Blob, scanTime(&s.CreatedAt))
	return s, err
}

// CreateSnapshotWithinQuota records a snapshot whose bytes are stored. An
// empty ID gets a fresh "snap_" one and a zero CreatedAt is now. When
// maxBytes is positive and the tenant's snapshots would then hold more
// than maxBytes, nothing is recorded and the error is CodeResourceExhausted
// with details.quota "maxSnapshotBytes". The tenant's row is locked for the
// check and the insert, as for VMs, so that concurrent snapshots on any node
// pass the quota's last bytes once between them.
func (db *DB) CreateSnapshotWithinQuota(ctx context.Context, s gateway.Snapshot, maxBytes int64) (gateway.Snapshot, error) {
	if s.TenantID == "" || s.VMID == "" || s.Blob == "" {
		return gateway.Snapshot{}, gateway.Errorf(gateway.CodeInvalidArgument, "snapshot tenant id, vm id and blob are required")
	}
	if s.ID == "" {
		s.ID = newID("snap_")
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = db.now()
	}
	s.CreatedAt = s.CreatedAt.UTC().Truncate(time.Microsecond)
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockTenant(ctx, tx, s.TenantID); err != nil {
			return err
		}
		if maxBytes > 0 {
			used, err := db.snapshotBytes(ctx, tx, s.TenantID)
			if err != nil {
				return err
			}
			if used+s.Bytes > maxBytes {
				return gateway.Errorf(gateway.CodeResourceExhausted, "tenant %s's snapshots hold %d bytes; %d more would pass its quota of %d", s.TenantID, used, s.Bytes, maxBytes).
					WithDetail("quota", "maxSnapshotBytes")
			}
		}
		res, err := db.exec(ctx, tx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			s.ID, s.TenantID, s.VMID, s.Bytes, s.Files, s.Dirs, s.Symlinks, s.Node, s.Blob, db.d.ts(s.CreatedAt))
		if err != nil {
			return dbError(err, "store: create snapshot")
		}
		if rowsAffected(res) == 0 {
			return gateway.Errorf(gateway.CodeConflict, "snapshot %s already exists", s.ID)
		}
		return nil
	})
	if err != nil {
		return gateway.Snapshot{}, err
	}
	return s, nil
}

// SnapshotBytes returns the bytes the tenant's snapshots, the images of its
// hibernated VMs and its VMs' checkpoints hold: what its MaxSnapshotBytes
// quota counts.
func (db *DB) SnapshotBytes(ctx context.Context, tenantID string) (int64, error) {
	return db.snapshotBytes(ctx, db.r, tenantID)
}

func (db *DB) snapshotBytes(ctx context.Context, q querier, tenantID string) (int64, error) {
	var used int64
	if err := db.queryRow(ctx, q, `SELECT COALESCE((SELECT SUM(bytes) FROM snapshots WHERE tenant_id = ?), 0)
		+ COALESCE((SELECT SUM(image_bytes) FROM vms WHERE tenant_id = ? AND state = 'hibernated'), 0)
		+ COALESCE((SELECT SUM(checkpoint_bytes) FROM vms WHERE tenant_id = ?), 0)`, tenantID, tenantID, tenantID).Scan(&used); err != nil {
		return 0, dbError(err, "store: sum snapshot bytes")
	}
	return used, nil
}

// GetSnapshot returns a tenant's snapshot; another tenant's, or none, is
// CodeNotFound.
func (db *DB) GetSnapshot(ctx context.Context, tenantID, id string) (gateway.Snapshot, error) {
	s, err := scanSnapshot(db.queryRow(ctx, db.r, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ? AND tenant_id = ?`, id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Snapshot{}, gateway.Errorf(gateway.CodeNotFound, "snapshot %s not found", id).WithDetail("snapshot", id)
	}
	if err != nil {
		return gateway.Snapshot{}, dbError(err, "store: get snapshot")
	}
	return s, nil
}

// ListSnapshots returns a page of a tenant's snapshots, oldest first.
func (db *DB) ListSnapshots(ctx context.Context, f gateway.SnapshotFilter) (gateway.Page[gateway.Snapshot], error) {
	query := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE tenant_id = ?`
	args := []any{f.TenantID}
	if f.VMID != "" {
		query += ` AND vm_id = ?`
		args = append(args, f.VMID)
	}
	return keysetPage(ctx, db, query, args, "created_at", f.Cursor, f.Limit, scanSnapshot,
		func(s gateway.Snapshot) (time.Time, string) { return s.CreatedAt, s.ID }, "store: list snapshots")
}

// DeleteSnapshot removes a tenant's snapshot record and returns it, so that
// the caller can remove its bytes; another tenant's, or none, is
// CodeNotFound.
func (db *DB) DeleteSnapshot(ctx context.Context, tenantID, id string) (gateway.Snapshot, error) {
	s, err := scanSnapshot(db.queryRow(ctx, db.w, `DELETE FROM snapshots WHERE id = ? AND tenant_id = ? RETURNING `+snapshotColumns, id, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Snapshot{}, gateway.Errorf(gateway.CodeNotFound, "snapshot %s not found", id).WithDetail("snapshot", id)
	}
	if err != nil {
		return gateway.Snapshot{}, dbError(err, "store: delete snapshot")
	}
	return s, nil
}
