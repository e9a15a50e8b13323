-- Planner statistics of a workspace's lexemes, for BM25 document frequencies.
-- ANALYZE keeps, per tsvector column, the most common lexemes and the fraction of rows
-- that contain each (pg_stats.most_common_elems / most_common_elem_freqs). Counting a
-- common lexeme through the GIN index costs tens of ms at 100k rows; its frequency from
-- the statistics is free. The tenant role has no privilege on the partitions, so this
-- SECURITY DEFINER function reads the statistics of the caller's own workspace only.
CREATE FUNCTION memplane_lexeme_stats()
    RETURNS TABLE (lexemes text[], freqs real[])
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, public
    AS $$
        SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs
        FROM pg_stats s
        WHERE s.schemaname = 'public'
          AND s.tablename = 'memories_w' || memplane_current_workspace()::text
          AND s.attname = 'lexical'
    $$;
REVOKE ALL ON FUNCTION memplane_lexeme_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memplane_lexeme_stats() TO memplane_tenant;
