-- Placement over several PostgreSQL clusters (issue 30, item 1): which database cluster
-- holds each workspace's rows (memplane.server.storage.placement). Read and written on the
-- control cluster only (the first of database.clusters), beside workspaces and api_keys;
-- migrations run on every cluster, so the others hold it empty. A workspace without a row
-- (created before this migration) is on the control cluster; the server writes its row at
-- start. The cluster is a name from the server's settings, never renamed while in use.
CREATE TABLE placements (
    workspace_key bigint PRIMARY KEY REFERENCES workspaces (key) ON DELETE CASCADE,
    cluster       text NOT NULL,
    placed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX placements_cluster ON placements (cluster);
