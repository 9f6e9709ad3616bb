-- 0011_audit: the audit trail, every call that changed something and every
-- token use that was refused. Kept for --audit-retention. Keep in step with
-- sqlite/0011_audit.sql.

CREATE TABLE audit_log (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL,
    node       TEXT COLLATE "C" NOT NULL DEFAULT '',
    tenant_id  TEXT COLLATE "C" NOT NULL DEFAULT '',
    key_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
    token_id   TEXT COLLATE "C" NOT NULL DEFAULT '',
    method     TEXT NOT NULL,
    route      TEXT NOT NULL,
    vm_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
    status     INTEGER NOT NULL,
    request_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
CREATE INDEX audit_log_at ON audit_log (at);
