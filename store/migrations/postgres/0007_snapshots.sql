-- 0007_snapshots: the records of root-filesystem snapshots. The bytes are
-- not here: with PostgreSQL they are a large object whose oid is blob, so
-- that every node sharing the store reads them. A snapshot outlives its VM,
-- so vm_id references nothing. Keep in step with sqlite/0007_snapshots.sql.

-- The tenant's quota of stored snapshot bytes; 0 is unlimited.
ALTER TABLE tenants ADD COLUMN max_snapshot_bytes BIGINT NOT NULL DEFAULT 0;

CREATE TABLE snapshots (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    vm_id      TEXT COLLATE "C" NOT NULL,
    bytes      BIGINT           NOT NULL,
    files      BIGINT           NOT NULL,
    dirs       BIGINT           NOT NULL,
    symlinks   BIGINT           NOT NULL,
    node       TEXT             NOT NULL DEFAULT '',
    blob       TEXT             NOT NULL,
    created_at TIMESTAMPTZ      NOT NULL
);
CREATE INDEX snapshots_tenant ON snapshots (tenant_id, created_at, id);
