package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const tokenColumns = `id, tenant_id, scopes, vm_id, session_id, origins, label, created_at, expires_at`

func scanToken(row interface{ Scan(...any) error }) (gateway.Token, error) {
	var (
		t               gateway.Token
		scopes, origins string
	)
	if err := row.Scan(&t.ID, &t.TenantID, &scopes, &t.VMID, &t.SessionID, &origins, &t.Label, scanTime(&t.CreatedAt), scanTime(&t.ExpiresAt)); err != nil {
		return gateway.Token{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return gateway.Token{}, err
	}
	if err := json.Unmarshal([]byte(origins), &t.Origins); err != nil {
		return gateway.Token{}, err
	}
	return t, nil
}

// CreateToken stores a token for t.TenantID, valid for ttl from now, and
// returns it with its secret, which is not stored: only its SHA-256 is
// kept; tokens expired for an hour are removed meanwhile. The secret is "agt_" and 32 random bytes in lowercase Crockford
// base32. An unknown tenant is CodeNotFound.
func (db *DB) CreateToken(ctx context.Context, t gateway.Token, ttl time.Duration) (gateway.Token, string, error) {
	secret := gateway.TokenPrefix + randomString(32)
	t.ID = newID("tok_")
	t.CreatedAt = db.now()
	t.ExpiresAt = t.CreatedAt.Add(ttl).Truncate(time.Microsecond)
	if t.Origins == nil {
		t.Origins = []string{}
	}
	scopes, err := json.Marshal(t.Scopes)
	if err != nil {
		return gateway.Token{}, "", err
	}
	origins, err := json.Marshal(t.Origins)
	if err != nil {
		return gateway.Token{}, "", err
	}
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.tenantExists(ctx, tx, t.TenantID); err != nil {
			return err
		}
		// Expired tokens go as new ones come (an indexed delete), so that
		// the table holds about what is live, without a purge of its own.
		if _, err := db.exec(ctx, tx, `DELETE FROM tokens WHERE expires_at < ?`, db.d.ts(t.CreatedAt.Add(-time.Hour))); err != nil {
			return dbError(err, "store: purge tokens")
		}
		_, err := db.exec(ctx, tx, `INSERT INTO tokens (id, tenant_id, hash, scopes, vm_id, session_id, origins, label, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.TenantID, hashAPIKey(secret), string(scopes), t.VMID, t.SessionID, string(origins), t.Label,
			db.d.ts(t.CreatedAt), db.d.ts(t.ExpiresAt))
		if err != nil {
			return dbError(err, "store: create token")
		}
		return nil
	})
	if err != nil {
		return gateway.Token{}, "", err
	}
	return t, secret, nil
}

// LookupToken returns the token whose secret this is, with its tenant. An
// unknown, revoked or expired token is CodeUnauthenticated. The hash is the
// lookup key (unique): a secret's hash is no secret.
func (db *DB) LookupToken(ctx context.Context, secret string) (gateway.Token, gateway.Tenant, error) {
	var (
		t      gateway.Token
		tenant gateway.Tenant
	)
	row := db.queryRow(ctx, db.r, `SELECT `+qualify("k", tokenColumns)+`, `+qualify("t", tenantColumns)+`
		FROM tokens k JOIN tenants t ON t.id = k.tenant_id WHERE k.hash = ? AND k.expires_at > ?`, hashAPIKey(secret), db.d.ts(db.now()))
	t, err := scanToken(scanFunc(func(tokenDest ...any) error {
		var err error
		tenant, err = scanTenant(scanFunc(func(tenantDest ...any) error {
			return row.Scan(append(tokenDest, tenantDest...)...)
		}))
		return err
	}))
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Token{}, gateway.Tenant{}, gateway.Errorf(gateway.CodeUnauthenticated, "unknown, expired or revoked token")
	}
	if err != nil {
		return gateway.Token{}, gateway.Tenant{}, dbError(err, "store: look up token")
	}
	return t, tenant, nil
}

// ListTokens returns a tenant's tokens that have not expired, oldest first.
func (db *DB) ListTokens(ctx context.Context, tenantID string) ([]gateway.Token, error) {
	rows, err := db.query(ctx, db.r, `SELECT `+tokenColumns+` FROM tokens WHERE tenant_id = ? AND expires_at > ? ORDER BY created_at, id`,
		tenantID, db.d.ts(db.now()))
	if err != nil {
		return nil, dbError(err, "store: list tokens")
	}
	defer rows.Close()
	out := []gateway.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, dbError(err, "store: list tokens")
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: list tokens")
	}
	return out, nil
}

// DeleteToken revokes a tenant's token: the next lookup of its secret, on
// any node, fails. A token that does not exist, expired, or belongs to
// another tenant is CodeNotFound.
func (db *DB) DeleteToken(ctx context.Context, tenantID, id string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM tokens WHERE id = ? AND tenant_id = ? AND expires_at > ?`, id, tenantID, db.d.ts(db.now()))
	if err != nil {
		return dbError(err, "store: delete token")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "token %s not found", id).WithDetail("token", id)
	}
	return nil
}
