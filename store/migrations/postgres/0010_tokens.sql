-- 0010_tokens: short-lived scoped tokens a tenant mints for browsers. Only
-- the secret's SHA-256 is kept; a revoked token's row is deleted. Keep in
-- step with sqlite/0010_tokens.sql.

CREATE TABLE tokens (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hash       BYTEA       NOT NULL UNIQUE,
    scopes     TEXT        NOT NULL,
    vm_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
    session_id TEXT COLLATE "C" NOT NULL DEFAULT '',
    origins    TEXT        NOT NULL DEFAULT '[]',
    label      TEXT        NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX tokens_tenant ON tokens (tenant_id, created_at, id);
CREATE INDEX tokens_expiry ON tokens (expires_at);
