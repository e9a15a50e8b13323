-- Idempotency records expire (retention.idempotency_seconds, 24 h by default): the sweep
-- deletes the oldest first, found through this index instead of a scan of every record.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
