-- The key that seals read-your-writes tokens (memplane.api.read_tokens): a write's
-- `memplane-lsn` token carries the primary's WAL position encrypted, so no tenant can read
-- how much the other tenants wrote between two of its writes. One row per named secret:
-- 244 bits from PostgreSQL's strong random source (two gen_random_uuid(), 122 random bits
-- each) spread by SHA-256 over a 32-byte AES-256 key. Readable by the owner role only:
-- memplane_tenant has no grant on this table.
CREATE TABLE server_secrets (
    name       text PRIMARY KEY,
    secret     bytea NOT NULL CHECK (octet_length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO server_secrets (name, secret)
VALUES ('read_token', sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())));
