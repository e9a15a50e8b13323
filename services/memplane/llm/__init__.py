"""The one LLM provider: any OpenAI-compatible /chat/completions endpoint (`chat`), JSON
answers repaired when a model wraps or breaks them (`repair`), and a per-workspace rate
limit on model calls (`rate`). Compaction and write-back both use it."""
