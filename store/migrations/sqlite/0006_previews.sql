-- 0006_previews: preview URLs of VM ports. A preview goes with its VM's
-- record (ON DELETE CASCADE); the gateway also refuses, and removes, the
-- previews of a VM that ended. Only the token's SHA-256 is kept. Keep in
-- step with postgres/0006_previews.sql.
CREATE TABLE previews (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    vm_id      TEXT    NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    token_hash BLOB    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX previews_vm ON previews (vm_id, created_at, id);
