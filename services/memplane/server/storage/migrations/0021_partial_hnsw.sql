-- Each workspace's HNSW index becomes partial, WHERE vector_indexed (migration 0020): a
-- rebuild over the rows indexed so far. The new indexes are built first, beside the old
-- ones, under the SHARE lock CREATE INDEX takes (reads go on; writes wait for the
-- migration), and only then are the old ones dropped and the new ones renamed: ACCESS
-- EXCLUSIVE, which blocks reads, is taken at the end, for the drops alone. Names and
-- parameters as memplane.server.storage.workspaces creates them.
DO $$
DECLARE
    w record;
BEGIN
    FOR w IN SELECT key, embedding_dimensions FROM workspaces ORDER BY key LOOP
        CONTINUE WHEN to_regclass(format('%I', 'memories_w' || w.key)) IS NULL;  -- a workspace row without partitions
        EXECUTE format(
            'CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops)'
            ' WITH (m = 16, ef_construction = 64) WHERE vector_indexed',
            'memories_w' || w.key || '_hnsw_partial', 'memories_w' || w.key, w.embedding_dimensions);
    END LOOP;
    FOR w IN SELECT key FROM workspaces ORDER BY key LOOP
        CONTINUE WHEN to_regclass(format('%I', 'memories_w' || w.key || '_hnsw_partial')) IS NULL;
        EXECUTE format('DROP INDEX IF EXISTS %I', 'memories_w' || w.key || '_hnsw');
        EXECUTE format('ALTER INDEX %I RENAME TO %I', 'memories_w' || w.key || '_hnsw_partial',
                       'memories_w' || w.key || '_hnsw');
    END LOOP;
END
$$;
