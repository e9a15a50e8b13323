-- BM25 document frequencies kept current by every write, so that a search reads them by
-- key (never counts over the workspace). One partition per workspace, as memories.
--
-- df(workspace, lexeme) = sum over shards of lexeme_df.df: the number of the workspace's
-- memories whose lexical tsvector holds the lexeme. A write adds +1 / -1 per lexeme to
-- the row of its shard (the writing backend's pid modulo 8), in lexeme order, so
-- concurrent writers of one workspace seldom wait on the same row (a common lexeme is a
-- hot row otherwise) and never deadlock. A shard's value may go negative (a memory
-- counted on one shard, its deletion on another); only the sum means anything.
CREATE TABLE lexeme_df (
    workspace_key bigint NOT NULL,
    lexeme        text NOT NULL,
    shard         smallint NOT NULL,
    df            bigint NOT NULL,
    PRIMARY KEY (workspace_key, lexeme, shard)
) PARTITION BY LIST (workspace_key);

-- The existing workspaces: a partition each, filled from their memories (shard 0).
DO $$
DECLARE
    w record;
BEGIN
    FOR w IN SELECT key FROM workspaces ORDER BY key LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF lexeme_df FOR VALUES IN (%s)', 'lexeme_df_w' || w.key, w.key);
        INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)
        SELECT w.key, u.lexeme, 0, count(*)
        FROM memories m CROSS JOIN LATERAL unnest(m.lexical) u
        WHERE m.workspace_key = w.key
        GROUP BY u.lexeme;
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE ON lexeme_df TO memplane_tenant;
ALTER TABLE lexeme_df ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON lexeme_df TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());

-- Replaced by lexeme_df (0002 estimated common lexemes from ANALYZE's statistics).
DROP FUNCTION memplane_lexeme_stats();

-- Keep embeddings in the row. pgvector's type defaults to EXTERNAL storage, so a row over
-- ~2 KB (a 384-d vector is 1.5 KB) had its vector moved to the TOAST table, and every
-- distance computed in an exact scan fetched it from there (measured: the toast table held
-- 5.3 of the 12.8 MB of LoCoMo's rows). MAIN keeps it inline unless a row outgrows a page.
-- Recurses to every partition; rows written before keep their storage until rewritten.
ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN;
