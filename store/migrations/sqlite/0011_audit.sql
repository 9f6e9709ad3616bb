-- 0011_audit: the audit trail, every call that changed something and every
-- token use that was refused. Kept for --audit-retention. Keep in step with
-- postgres/0011_audit.sql.

CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    node       TEXT    NOT NULL DEFAULT '',
    tenant_id  TEXT    NOT NULL DEFAULT '', -- '' for an unknown token
    key_id     TEXT    NOT NULL DEFAULT '',
    token_id   TEXT    NOT NULL DEFAULT '',
    method     TEXT    NOT NULL,
    route      TEXT    NOT NULL,
    vm_id      TEXT    NOT NULL DEFAULT '',
    status     INTEGER NOT NULL,
    request_id TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
CREATE INDEX audit_log_at ON audit_log (at);
