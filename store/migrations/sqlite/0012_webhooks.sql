-- 0012_webhooks: tenants' event subscriptions and the outbox of their
-- deliveries. An event is written here, one row per subscription it
-- matches, in the step that records the change it tells of; the nodes'
-- dispatchers send the rows. Keep in step with postgres/0012_webhooks.sql.

CREATE TABLE webhooks (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL, -- ",vm.state,process.exit," or ",*,"
    vm_id           TEXT    NOT NULL DEFAULT '', -- '' for every VM
    description     TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    disabled_reason TEXT    NOT NULL DEFAULT '',
    sequence        INTEGER NOT NULL DEFAULT 0, -- the last delivery's
    failing_since   INTEGER, -- the first failed attempt since the last success
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
    id              TEXT    NOT NULL PRIMARY KEY,
    subscription_id TEXT    NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id       TEXT    NOT NULL,
    vm_id           TEXT    NOT NULL DEFAULT '',
    type            TEXT    NOT NULL,
    sequence        INTEGER NOT NULL,
    data            TEXT    NOT NULL, -- the event's fields (JSON); the body is made of the row
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    window_start    INTEGER NOT NULL, -- retries stop --webhook-retry-for after it
    next_attempt_at INTEGER NOT NULL,
    locked_by       TEXT    NOT NULL DEFAULT '',
    locked_until    INTEGER NOT NULL DEFAULT 0,
    done_at         INTEGER,
    traceparent     TEXT    NOT NULL DEFAULT '' -- the W3C trace context of the change, passed on
) STRICT;
CREATE UNIQUE INDEX webhook_deliveries_sequence ON webhook_deliveries (subscription_id, sequence);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (subscription_id, vm_id, status, sequence);
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_at);
