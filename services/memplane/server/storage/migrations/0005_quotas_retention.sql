-- Quotas, retention and labels per workspace (pushed by the operator through
-- AdminService.UpdateWorkspace); the daily embedding-token meter; the index the
-- retention sweep walks.

-- 0 means unlimited, as max_memories already did (memplane.domain.models.Quotas).
ALTER TABLE workspaces
    ADD COLUMN max_bytes bigint NOT NULL DEFAULT 0 CHECK (max_bytes >= 0),
    ADD COLUMN max_requests_per_second integer NOT NULL DEFAULT 0 CHECK (max_requests_per_second >= 0),
    ADD COLUMN max_embedding_tokens_per_day bigint NOT NULL DEFAULT 0 CHECK (max_embedding_tokens_per_day >= 0),
    -- Retention (memplane.domain.models.Retention): seconds, 0 keeps memories forever;
    -- type_ttl_seconds maps a memory type to its own lifetime.
    ADD COLUMN default_ttl_seconds bigint NOT NULL DEFAULT 0 CHECK (default_ttl_seconds >= 0),
    ADD COLUMN type_ttl_seconds jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

-- Tokens embedded per workspace and UTC day. A charge is one conditional UPDATE
-- (tokens + n <= quota), so concurrent requests never pass the quota together.
CREATE TABLE embedding_usage (
    workspace_key bigint NOT NULL REFERENCES workspaces (key) ON DELETE CASCADE,
    day           date NOT NULL,
    tokens        bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    PRIMARY KEY (workspace_key, day)
);
GRANT SELECT, INSERT, UPDATE ON embedding_usage TO memplane_tenant;
ALTER TABLE embedding_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON embedding_usage TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());

-- The retention sweep finds expired memories without scanning a partition; created on
-- the partitioned table, so every existing and future partition gets it.
CREATE INDEX memories_expires_idx ON memories (expires_at) WHERE expires_at IS NOT NULL;
