-- 0007_snapshots: the records of root-filesystem snapshots. The bytes are
-- not here: with SQLite they are files in the gateway's data directory,
-- named by blob. A snapshot outlives its VM, so vm_id references nothing.
-- Keep in step with postgres/0007_snapshots.sql.

-- The tenant's quota of stored snapshot bytes; 0 is unlimited.
ALTER TABLE tenants ADD COLUMN max_snapshot_bytes INTEGER NOT NULL DEFAULT 0;

CREATE TABLE snapshots (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    vm_id      TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    files      INTEGER NOT NULL,
    dirs       INTEGER NOT NULL,
    symlinks   INTEGER NOT NULL,
    node       TEXT    NOT NULL DEFAULT '',
    blob       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX snapshots_tenant ON snapshots (tenant_id, created_at, id);
