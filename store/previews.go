package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const previewColumns = `id, tenant_id, vm_id, port, created_at, expires_at`

func scanPreview(row interface{ Scan(...any) error }) (gateway.Preview, error) {
	var p gateway.Preview
	err := row.Scan(&p.ID, &p.TenantID, &p.VMID, &p.Port, scanTime(&p.CreatedAt), scanTime(&p.ExpiresAt))
	return p, err
}

func hashPreviewToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreatePreview stores a preview of a tenant's VM port that lives for ttl,
// and returns it with its token, which is not stored and cannot be had
// again: "pvt_" and 32 random bytes in lowercase Crockford base32. The VM
// must be the tenant's (CodeNotFound otherwise); a VM with maxPerVM
// previews that have not expired is CodeResourceExhausted with
// details.quota. Expired previews of the VM are removed on the way.
func (db *DB) CreatePreview(ctx context.Context, tenantID, vmID string, port int, ttl time.Duration, maxPerVM int) (gateway.Preview, string, error) {
	token := gateway.PreviewTokenPrefix + randomString(32)
	now := db.now()
	p := gateway.Preview{ID: newID("pvw_"), TenantID: tenantID, VMID: vmID, Port: port, CreatedAt: now,
		ExpiresAt: now.Add(ttl).UTC().Truncate(time.Microsecond)}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := db.queryRow(ctx, tx, `SELECT 1 FROM vms WHERE id = ? AND tenant_id = ?`+db.d.forUpdate, vmID, tenantID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return gateway.Errorf(gateway.CodeNotFound, "vm %s not found", vmID)
		}
		if err != nil {
			return dbError(err, "store: create preview")
		}
		if _, err := db.exec(ctx, tx, `DELETE FROM previews WHERE vm_id = ? AND expires_at <= ?`, vmID, db.d.ts(now)); err != nil {
			return dbError(err, "store: create preview")
		}
		var n int
		if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM previews WHERE vm_id = ?`, vmID).Scan(&n); err != nil {
			return dbError(err, "store: create preview")
		}
		if n >= maxPerVM {
			return gateway.Errorf(gateway.CodeResourceExhausted, "vm %s has %d previews, the most a VM can have; revoke one first", vmID, maxPerVM).
				WithDetail("quota", "previewsPerVm")
		}
		_, err = db.exec(ctx, tx, `INSERT INTO previews (id, tenant_id, vm_id, port, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.TenantID, p.VMID, p.Port, hashPreviewToken(token), db.d.ts(p.CreatedAt), db.d.ts(p.ExpiresAt))
		if err != nil {
			return dbError(err, "store: create preview")
		}
		return nil
	})
	if err != nil {
		return gateway.Preview{}, "", err
	}
	return p, token, nil
}

// PreviewByToken returns the preview a token opens, expired or not; an
// unknown token is CodeNotFound.
func (db *DB) PreviewByToken(ctx context.Context, token string) (gateway.Preview, error) {
	p, err := scanPreview(db.queryRow(ctx, db.r, `SELECT `+previewColumns+` FROM previews WHERE token_hash = ?`, hashPreviewToken(token)))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Preview{}, gateway.Errorf(gateway.CodeNotFound, "no such preview")
	}
	if err != nil {
		return gateway.Preview{}, dbError(err, "store: get preview")
	}
	return p, nil
}

// ListPreviews returns a tenant's previews of a VM that have not expired at
// now, oldest first. There are at most MaxPreviewsPerVM, so there is no
// paging.
func (db *DB) ListPreviews(ctx context.Context, tenantID, vmID string, now time.Time) ([]gateway.Preview, error) {
	page, err := listRows(ctx, db, `SELECT `+previewColumns+` FROM previews WHERE tenant_id = ? AND vm_id = ? AND expires_at > ?
		ORDER BY created_at, id`, []any{tenantID, vmID, db.d.ts(now)}, scanPreview, "store: list previews")
	return page.Items, err
}

// DeletePreview revokes a tenant's preview of a VM; an absent one is
// CodeNotFound.
func (db *DB) DeletePreview(ctx context.Context, tenantID, vmID, id string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM previews WHERE id = ? AND vm_id = ? AND tenant_id = ?`, id, vmID, tenantID)
	if err != nil {
		return dbError(err, "store: delete preview")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "preview %s not found", id)
	}
	return nil
}

// DeleteVMPreviews removes every preview of a VM and returns how many there
// were: a VM's previews end with it.
func (db *DB) DeleteVMPreviews(ctx context.Context, vmID string) (int, error) {
	res, err := db.exec(ctx, db.w, `DELETE FROM previews WHERE vm_id = ?`, vmID)
	if err != nil {
		return 0, dbError(err, "store: delete vm previews")
	}
	return int(rowsAffected(res)), nil
}
