-- 0001_init: tenants, API keys, VMs with labels and state history, idempotency
-- records. Timestamps are Unix microseconds (UTC) in INTEGER columns, booleans
-- are 0/1. Keep in step with postgres/0001_init.sql.

CREATE TABLE tenants (
    id                  TEXT    NOT NULL PRIMARY KEY,
    name                TEXT    NOT NULL,
    isolated            INTEGER NOT NULL DEFAULT 0,
    max_vms             INTEGER NOT NULL DEFAULT 0,
    max_processes       INTEGER NOT NULL DEFAULT 0,
    requests_per_second REAL    NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;
CREATE INDEX tenants_created ON tenants (created_at, id);

CREATE TABLE api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- prefix is the first characters of the secret: shown to tell keys apart,
    -- and the non-secret part a lookup fetches candidates by.
    prefix     TEXT    NOT NULL,
    hash       BLOB    NOT NULL UNIQUE, -- SHA-256 of the secret
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX api_keys_prefix ON api_keys (prefix);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE vms (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    state      TEXT    NOT NULL CHECK (state IN ('creating', 'ready', 'disposing', 'disposed', 'lost')),
    reason     TEXT    NOT NULL DEFAULT '',
    sidecar_id TEXT    NOT NULL DEFAULT '',
    spec       TEXT    NOT NULL, -- gateway.VMSpec as JSON
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX vms_tenant_created ON vms (tenant_id, created_at DESC, id DESC);
CREATE INDEX vms_tenant_state ON vms (tenant_id, state, created_at DESC, id DESC);
CREATE INDEX vms_state ON vms (state);

-- vm_labels repeats spec.labels, one row a pair, so that ListVMs filters by
-- label in SQL and its pages stay exact.
CREATE TABLE vm_labels (
    vm_id TEXT NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    name  TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (vm_id, name)
) STRICT;
CREATE INDEX vm_labels_pair ON vm_labels (name, value, vm_id);

CREATE TABLE vm_state_history (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    vm_id  TEXT    NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    state  TEXT    NOT NULL,
    reason TEXT    NOT NULL DEFAULT '',
    at     INTEGER NOT NULL
) STRICT;
CREATE INDEX vm_state_history_vm ON vm_state_history (vm_id, seq);

-- idempotency_keys has no foreign key: it is a cache of responses, purged by
-- age, and the key is the client's.
CREATE TABLE idempotency_keys (
    tenant_id    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    request_hash TEXT    NOT NULL,
    status       INTEGER NOT NULL DEFAULT 0,
    body         BLOB,
    done         INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, key)
) STRICT;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
