-- Note on 0003: tool_result_blobs.line_count counts lines split on "\n" only
-- (memplane.domain.blobs.count_lines), not str.splitlines() as 0003's comment says.
-- Deduplication of stored tool outputs: the SHA-256 digest of each blob's content, so that
-- ToolResultBlobStore.put returns the existing unexpired blob of the same workspace and
-- scope instead of storing the same multi-MB output again on every CompactToolResults
-- call (agents that re-send their uncut history each turn).

-- sha256 of the UTF-8 bytes of `content` (32 bytes). Nullable: rows written by an older
-- server during a rolling upgrade have none and are simply never reused.
ALTER TABLE tool_result_blobs ADD COLUMN content_sha256 bytea;

-- Backfill with the built-in sha256(bytea) (PostgreSQL >= 11; pgcrypto is not needed).
-- convert_to fixes the bytes to UTF-8 whatever the database encoding, matching Python's
-- hashlib.sha256(content.encode("utf-8")).
UPDATE tool_result_blobs SET content_sha256 = sha256(convert_to(content, 'UTF8'));

-- put's lookup: (workspace, digest), then scope and expiry on the few matching rows.
CREATE INDEX tool_result_blobs_digest_idx ON tool_result_blobs (workspace_key, content_sha256);

-- Reusing a blob extends its expiry: tenants may update that column only (content and
-- everything else stay immutable; row-level security still confines them to their
-- workspace). SELECT ... FOR UPDATE in put needs it too.
GRANT UPDATE (expires_at) ON tool_result_blobs TO memplane_tenant;
