package store

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"
	"strings"
	"unicode"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

const (
	// APIKeyPrefix starts every generated secret, so that a leaked one is
	// recognisable (by secret scanners too).
	APIKeyPrefix = "agk_"
	// apiKeyLookupLen is how many leading characters of a secret are stored
	// in clear as its Prefix: "agk_" and 8 random characters (40 of the
	// secret's 256 bits), enough to tell keys apart and to find a key's row
	// without an index on anything secret.
	apiKeyLookupLen = 12
	// MinImportedAPIKeyLen is the shortest secret ImportAPIKey takes: its
	// first 12 characters are shown as the key's Prefix, and at least as many
	// must stay hidden.
	MinImportedAPIKeyLen = 24
)

const apiKeyColumns = `id, tenant_id, prefix, admin, created_at`

func scanAPIKey(row interface{ Scan(...any) error }, extra ...any) (gateway.APIKey, error) {
	var k gateway.APIKey
	err := row.Scan(append([]any{&k.ID, &k.TenantID, &k.Prefix, &k.Admin, scanTime(&k.CreatedAt)}, extra...)...)
	return k, err
}

func hashAPIKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateAPIKey creates a key for a tenant and returns it with its secret,
// which is not stored and cannot be had again: only its SHA-256 is kept. The
// secret is "agk_" and 32 random bytes in lowercase Crockford base32 (52
// characters, no i, l, o or u). An unknown tenant is CodeNotFound.
func (db *DB) CreateAPIKey(ctx context.Context, tenantID string, admin bool) (gateway.APIKey, string, error) {
	secret := APIKeyPrefix + randomString(32)
	k := gateway.APIKey{
		ID:        newID("key_"),
		TenantID:  tenantID,
		Prefix:    secret[:apiKeyLookupLen],
		Admin:     admin,
		CreatedAt: db.now(),
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.tenantExists(ctx, tx, tenantID); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, `INSERT INTO api_keys (id, tenant_id, prefix, hash, admin, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			k.ID, k.TenantID, k.Prefix, hashAPIKey(secret), k.Admin, db.d.ts(k.CreatedAt))
		if err != nil {
			return dbError(err, "store: create API key")
		}
		return nil
	})
	if err != nil {
		return gateway.APIKey{}, "", err
	}
	return k, secret, nil
}

// ImportAPIKey stores a key whose secret the operator chose (the
// AGENTOS_GATEWAY_ADMIN_KEY), so that it authenticates like a created one.
// Importing the same secret again returns the stored key unchanged; importing
// it for another tenant or with another admin flag is CodeConflict. The
// secret must be at least MinImportedAPIKeyLen printable characters without
// spaces (CodeInvalidArgument).
func (db *DB) ImportAPIKey(ctx context.Context, tenantID string, admin bool, secret string) (gateway.APIKey, error) {
	if len(secret) < MinImportedAPIKeyLen {
		return gateway.APIKey{}, gateway.Errorf(gateway.CodeInvalidArgument,
			"API key must be at least %d characters long", MinImportedAPIKeyLen)
	}
	for _, r := range secret {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return gateway.APIKey{}, gateway.Errorf(gateway.CodeInvalidArgument,
				"API key must be printable ASCII without spaces")
		}
	}
	hash := hashAPIKey(secret)
	k := gateway.APIKey{
		ID:        newID("key_"),
		TenantID:  tenantID,
		Prefix:    secret[:apiKeyLookupLen],
		Admin:     admin,
		CreatedAt: db.now(),
	}
	var out gateway.APIKey
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.tenantExists(ctx, tx, tenantID); err != nil {
			return err
		}
		// Two gateways importing the same key at once both get here; the
		// unique hash makes one insert win and the other find its row.
		_, err := db.exec(ctx, tx, `INSERT INTO api_keys (id, tenant_id, prefix, hash, admin, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (hash) DO NOTHING`,
			k.ID, k.TenantID, k.Prefix, hash, k.Admin, db.d.ts(k.CreatedAt))
		if err != nil {
			return dbError(err, "store: import API key")
		}
		out, err = scanAPIKey(db.queryRow(ctx, tx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ?`, hash))
		if err != nil {
			return dbError(err, "store: import API key")
		}
		if out.TenantID != tenantID || out.Admin != admin {
			return gateway.Errorf(gateway.CodeConflict, "this API key is already registered with another tenant or role")
		}
		return nil
	})
	if err != nil {
		return gateway.APIKey{}, err
	}
	return out, nil
}

// LookupAPIKey returns the key whose secret this is and its tenant, in one
// query, or CodeUnauthenticated. The rows are fetched by the secret's first
// characters, which are not secret, and their hashes compared to the
// secret's in constant time: no index lookup or early-exiting comparison
// ever runs on anything derived from the secret's hidden part, so response
// times cannot reveal it.
func (db *DB) LookupAPIKey(ctx context.Context, secret string) (gateway.APIKey, gateway.Tenant, error) {
	unauthenticated := gateway.Errorf(gateway.CodeUnauthenticated, "invalid API key")
	if len(secret) < apiKeyLookupLen {
		return gateway.APIKey{}, gateway.Tenant{}, unauthenticated
	}
	hash := hashAPIKey(secret)
	rows, err := db.query(ctx, db.r, `SELECT `+qualify("k", apiKeyColumns)+`, k.hash, `+qualify("t", tenantColumns)+`
		FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.prefix = ?`, secret[:apiKeyLookupLen])
	if err != nil {
		return gateway.APIKey{}, gateway.Tenant{}, dbError(err, "store: look up API key")
	}
	defer rows.Close()
	var (
		found       gateway.APIKey
		foundTenant gateway.Tenant
		match       = 0
	)
	for rows.Next() {
		var (
			stored []byte
			tenant gateway.Tenant
		)
		// One row holds the key, its hash and its tenant: each part is
		// scanned by its own function, into one Scan of the row.
		k, err := scanAPIKey(scanFunc(func(keyDest ...any) error {
			var err error
			tenant, err = scanTenant(scanFunc(func(tenantDest ...any) error {
				return rows.Scan(append(keyDest, tenantDest...)...)
			}))
			return err
		}), &stored)
		if err != nil {
			return gateway.APIKey{}, gateway.Tenant{}, dbError(err, "store: look up API key")
		}
		// Compare with every candidate rather than stopping at the first
		// match; there is almost always one candidate anyway.
		if subtle.ConstantTimeCompare(stored, hash) == 1 {
			found, foundTenant, match = k, tenant, 1
		}
	}
	if err := rows.Err(); err != nil {
		return gateway.APIKey{}, gateway.Tenant{}, dbError(err, "store: look up API key")
	}
	if match == 0 {
		return gateway.APIKey{}, gateway.Tenant{}, unauthenticated
	}
	return found, foundTenant, nil
}

// scanFunc lets a function stand for a row in the scan helpers.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// qualify prefixes each column of a comma-separated list with a table alias.
func qualify(alias, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// ListAPIKeys returns a tenant's keys, oldest first, without secrets. An
// unknown tenant is CodeNotFound.
func (db *DB) ListAPIKeys(ctx context.Context, tenantID string) ([]gateway.APIKey, error) {
	if err := db.tenantExists(ctx, db.r, tenantID); err != nil {
		return nil, err
	}
	rows, err := db.query(ctx, db.r, `SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, dbError(err, "store: list API keys")
	}
	defer rows.Close()
	keys := []gateway.APIKey{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, dbError(err, "store: list API keys")
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err, "store: list API keys")
	}
	return keys, nil
}

// DeleteAPIKey deletes a tenant's key; the next lookup of its secret fails.
// A key that does not exist or belongs to another tenant is CodeNotFound.
func (db *DB) DeleteAPIKey(ctx context.Context, tenantID, keyID string) error {
	res, err := db.exec(ctx, db.w, `DELETE FROM api_keys WHERE id = ? AND tenant_id = ?`, keyID, tenantID)
	if err != nil {
		return dbError(err, "store: delete API key")
	}
	if rowsAffected(res) == 0 {
		return gateway.Errorf(gateway.CodeNotFound, "API key %s not found", keyID)
	}
	return nil
}

// HasAdminKey reports whether any admin key exists, so that start-up knows
// whether to create one and print it.
func (db *DB) HasAdminKey(ctx context.Context) (bool, error) {
	var n int
	err := db.queryRow(ctx, db.r, `SELECT COUNT(*) FROM (SELECT 1 FROM api_keys WHERE admin = ? LIMIT 1) k`, true).Scan(&n)
	if err != nil {
		return false, dbError(err, "store: look for an admin key")
	}
	return n > 0, nil
}

// tenantExists returns nil if the tenant exists, else CodeNotFound.
func (db *DB) tenantExists(ctx context.Context, q querier, id string) error {
	var one int
	err := db.queryRow(ctx, q, `SELECT 1 FROM tenants WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Errorf(gateway.CodeNotFound, "tenant %s not found", id)
	}
	if err != nil {
		return dbError(err, "store: get tenant")
	}
	return nil
}

// lockTenant is tenantExists that also locks the tenant's row until tx ends
// (PostgreSQL; a SQLite transaction already excludes every other writer), so
// that checks of the tenant's quotas and the writes they admit are one step.
func (db *DB) lockTenant(ctx context.Context, tx *sql.Tx, id string) error {
	var one int
	err := db.queryRow(ctx, tx, `SELECT 1 FROM tenants WHERE id = ?`+db.d.forUpdate, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return gateway.Errorf(gateway.CodeNotFound, "tenant %s not found", id)
	}
	if err != nil {
		return dbError(err, "store: lock tenant")
	}
	return nil
}
