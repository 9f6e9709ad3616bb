-- 0012_webhooks: tenants' event subscriptions and the outbox of their
-- deliveries. An event is written here, one row per subscription it
-- matches, in the step that records the change it tells of; the nodes'
-- dispatchers send the rows, each claimed by one node at a time (FOR
-- UPDATE SKIP LOCKED and a lease). Keep in step with sqlite/0012_webhooks.sql.

CREATE TABLE webhooks (
    id              TEXT COLLATE "C" PRIMARY KEY,
    tenant_id       TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url             TEXT NOT NULL,
    events          TEXT NOT NULL,
    vm_id           TEXT COLLATE "C" NOT NULL DEFAULT '',
    description     TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    disabled_reason TEXT NOT NULL DEFAULT '',
    sequence        BIGINT NOT NULL DEFAULT 0,
    failing_since   TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
    id              TEXT COLLATE "C" PRIMARY KEY,
    subscription_id TEXT COLLATE "C" NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id       TEXT COLLATE "C" NOT NULL,
    vm_id           TEXT COLLATE "C" NOT NULL DEFAULT '',
    type            TEXT NOT NULL,
    sequence        BIGINT NOT NULL,
    data            TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      TIMESTAMPTZ NOT NULL,
    window_start    TIMESTAMPTZ NOT NULL,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    locked_by       TEXT NOT NULL DEFAULT '',
    locked_until    TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    done_at         TIMESTAMPTZ,
    traceparent     TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX webhook_deliveries_sequence ON webhook_deliveries (subscription_id, sequence);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (subscription_id, vm_id, status, sequence);
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_at);
