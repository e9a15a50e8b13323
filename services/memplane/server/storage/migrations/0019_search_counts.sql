-- Searches per workspace and UTC day (issue 29: the console's usage view plots writes and
-- searches over time). The search path only increments a counter in the retrieval
-- process's memory (memplane.server.retrieval.usage.SearchCounter); a background task adds
-- each workspace's delta here every few seconds, one UPSERT per (workspace, day), and once
-- more at graceful shutdown. A process killed without its shutdown (SIGKILL, a crash) loses
-- at most the searches of its last flush interval.
CREATE TABLE search_counts (
    workspace_key bigint NOT NULL REFERENCES workspaces (key) ON DELETE CASCADE,
    day           date NOT NULL,
    searches      bigint NOT NULL DEFAULT 0 CHECK (searches >= 0),
    PRIMARY KEY (workspace_key, day)
);
GRANT SELECT, INSERT, UPDATE ON search_counts TO memplane_tenant;
ALTER TABLE search_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON search_counts TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
