"""Retrieval evaluation over public benchmarks, run against a memplane server over gRPC.

- `memplane.eval.locomo`: the LoCoMo dataset (Maharana et al., ACL 2024) as typed turns,
  sessions and questions with cleaned evidence ids.
- `memplane.eval.metrics`: evidence recall@k and binary nDCG@k, and their averages.
- `memplane.eval.ingest`: each conversation into its own workspace via WriteConversation,
  or in the "peer" text format via AddMemories (shared by `memplane import locomo`,
  `memplane eval locomo` and bench/locomo_recall.py).
- `memplane.eval.runner`: ingest, ask every question through SearchMemories, score.
- `memplane.eval.report`: the result table and the published baselines.
"""
