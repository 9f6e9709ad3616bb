-- 0001_init: tenants, API keys, VMs with labels and state history, idempotency
-- records. Identifiers use the "C" collation so that they sort byte-wise, as
-- on SQLite, whatever the database's locale. Keep in step with
-- sqlite/0001_init.sql.

CREATE TABLE tenants (
    id                  TEXT COLLATE "C"  NOT NULL PRIMARY KEY,
    name                TEXT              NOT NULL,
    isolated            BOOLEAN           NOT NULL DEFAULT FALSE,
    max_vms             BIGINT            NOT NULL DEFAULT 0,
    max_processes       BIGINT            NOT NULL DEFAULT 0,
    requests_per_second DOUBLE PRECISION  NOT NULL DEFAULT 0,
    created_at          TIMESTAMPTZ       NOT NULL,
    updated_at          TIMESTAMPTZ       NOT NULL
);
CREATE INDEX tenants_created ON tenants (created_at, id);

CREATE TABLE api_keys (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- prefix is the first characters of the secret: shown to tell keys apart,
    -- and the non-secret part a lookup fetches candidates by.
    prefix     TEXT COLLATE "C" NOT NULL,
    hash       BYTEA            NOT NULL UNIQUE, -- SHA-256 of the secret
    admin      BOOLEAN          NOT NULL DEFAULT FALSE,
    created_at TIMESTAMPTZ      NOT NULL
);
CREATE INDEX api_keys_prefix ON api_keys (prefix);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE vms (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    state      TEXT             NOT NULL CHECK (state IN ('creating', 'ready', 'disposing', 'disposed', 'lost')),
    reason     TEXT             NOT NULL DEFAULT '',
    sidecar_id TEXT             NOT NULL DEFAULT '',
    spec       JSONB            NOT NULL, -- gateway.VMSpec
    created_at TIMESTAMPTZ      NOT NULL,
    updated_at TIMESTAMPTZ      NOT NULL
);
CREATE INDEX vms_tenant_created ON vms (tenant_id, created_at DESC, id DESC);
CREATE INDEX vms_tenant_state ON vms (tenant_id, state, created_at DESC, id DESC);
CREATE INDEX vms_state ON vms (state);

-- vm_labels repeats spec.labels, one row a pair, so that ListVMs filters by
-- label in SQL and its pages stay exact.
CREATE TABLE vm_labels (
    vm_id TEXT COLLATE "C" NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    name  TEXT             NOT NULL,
    value TEXT             NOT NULL,
    PRIMARY KEY (vm_id, name)
);
CREATE INDEX vm_labels_pair ON vm_labels (name, value, vm_id);

CREATE TABLE vm_state_history (
    seq    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    vm_id  TEXT COLLATE "C" NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
    state  TEXT             NOT NULL,
    reason TEXT             NOT NULL DEFAULT '',
    at     TIMESTAMPTZ      NOT NULL
);
CREATE INDEX vm_state_history_vm ON vm_state_history (vm_id, seq);

-- idempotency_keys has no foreign key: it is a cache of responses, purged by
-- age, and the key is the client's.
CREATE TABLE idempotency_keys (
    tenant_id    TEXT COLLATE "C" NOT NULL,
    key          TEXT COLLATE "C" NOT NULL,
    request_hash TEXT             NOT NULL,
    status       INTEGER          NOT NULL DEFAULT 0,
    body         BYTEA,
    done         BOOLEAN          NOT NULL DEFAULT FALSE,
    created_at   TIMESTAMPTZ      NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
