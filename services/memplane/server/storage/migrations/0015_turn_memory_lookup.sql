-- A transcript turn's memory found by its provenance (issue 14, context turns): the
-- raw-turn memory WriteConversation writes for each turn (EPISODIC, metadata message_id)
-- has source_session_id = the session and source_message_ids = {the turn's message id}. A search's context turns
-- (memplane.storage.search_boosts.CONTEXT_COLUMN) read each turn around a hit through
-- this index, so a turn whose memory was deleted (DeleteMemory), closed (valid_to) or
-- expired is no context, and a corrected one (UpdateMemory) comes back as corrected.
-- The transcript itself is kept as written (compaction reads it; DeleteMemoriesByScope
-- still erases it).
CREATE INDEX memories_source_turn_idx ON memories (workspace_key, source_session_id, (source_message_ids[1]));
