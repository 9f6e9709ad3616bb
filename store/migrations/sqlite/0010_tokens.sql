-- 0010_tokens: short-lived scoped tokens a tenant mints for browsers. Only
-- the secret's SHA-256 is kept; a revoked token's row is deleted. Keep in
-- step with postgres/0010_tokens.sql.

CREATE TABLE tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hash       BLOB    NOT NULL UNIQUE,
    scopes     TEXT    NOT NULL, -- JSON array of scopes
    vm_id      TEXT    NOT NULL DEFAULT '',
    session_id TEXT    NOT NULL DEFAULT '',
    origins    TEXT    NOT NULL DEFAULT '[]', -- JSON array of origins
    label      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX tokens_tenant ON tokens (tenant_id, created_at, id);
CREATE INDEX tokens_expiry ON tokens (expires_at);
