"""The one LLM provider: any OpenAI-compatible /chat/completions endpoint (`chat`), JSON
answers repaired when a model wraps or breaks them (`repair`), a per-workspace rate
limit on model calls (`rate`), and the extraction call's prompt and parser (`extraction`).
Compaction and write-back both use it."""
