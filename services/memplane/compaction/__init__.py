"""Context compaction (ReMe's context tools): token counts, splits, summaries, tool-output offload."""
