"""The one LLM provider: any OpenAI-compatible /chat/completions endpoint (`chat`), JSON
answers repaired when a model wraps or breaks them (`repair`), a per-workspace rate
limit on model calls (`rate`), the extraction call's prompt and parser (`extraction`), and
the file-selection call's (`file_selection`). Compaction, write-back and retrieval's
SelectMemoryFiles use it."""
