"""Context compaction (ReMe's context tools): splits, summaries, tool-output offload (token
counts come from `memplane.text.tokens`)."""
