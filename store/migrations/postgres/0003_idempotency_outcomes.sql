-- 0003_idempotency_outcomes: an idempotency record keeps the outcome of its
-- operation as one JSON document (a value, or an error's code, message and
-- details) instead of an HTTP status and response body, so that every kind
-- of operation (exec, spawn, session prompts) records the same shape. The
-- records are a 24-hour cache: those of the old shape are dropped rather
-- than converted. Keep in step with sqlite/0003_idempotency_outcomes.sql.

DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys DROP COLUMN status;
ALTER TABLE idempotency_keys RENAME COLUMN body TO outcome;
