"""Evidence-retrieval metrics, as the shared LoCoMo baselines were scored.

Definitions (per question; *ranked* is the retrieved list of document ids, best first,
*relevant* the question's evidence ids; ranks are 1-based):

- **recall@k** — the fraction of the relevant ids found in the top k:
  ``|top_k(ranked) ∩ relevant| / |relevant|`` (Manning, Raghavan & Schütze,
  "Introduction to Information Retrieval", 2008, §8.3). With one evidence id it is the
  hit rate; LoCoMo's paper reports it as "recall@k" of its retrievers (Maharana et al.,
  ACL 2024, Table 4) and baseline_results/main.json as ``recall@k``.
- **nDCG@k** (binary gain) — ``DCG@k / IDCG@k`` with ``DCG@k = Σ_{i ≤ k} rel_i / log2(i + 1)``,
  ``rel_i`` = 1 if the i-th result is relevant else 0, and ``IDCG@k = Σ_{i ≤ min(|relevant|, k)}
  1 / log2(i + 1)`` (Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR
  techniques", ACM TOIS 2002; the log2(i + 1) discount of trec_eval and BEIR).
- Aggregates are arithmetic means over questions: per category, and ``overall`` over all
  scored questions (micro average — how main.json's ``overall`` is computed, i.e. the
  n-weighted mean of its categories, not their plain mean, which main.json calls ``macro``).

Duplicate ids in *ranked* count once, at their first rank (a later duplicate is dropped
and the results after it move up). Questions without relevant ids are not scorable.
All values are unitless, in [0, 1].
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

RECALL_KS: tuple[int, ...] = (1, 5, 10, 20)
"""Cut-offs of the recall columns (as baseline_results/main.json)."""

NDCG_K = 10
"""Cut-off of nDCG (nDCG@10, as baseline_results/main.json)."""

OVERALL = "overall"
"""Label of the row over all scored questions."""


def _unique(ranked: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for doc in ranked:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def _check(relevant: Iterable[str], k: int) -> set[str]:
    rel = set(relevant)
    if not rel:
        raise ValueError("no relevant ids: the question cannot be scored")
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    return rel


def recall_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Fraction (0..1) of *relevant* ids among the first *k* distinct ids of *ranked*.

    Raises `ValueError` if *relevant* is empty or k < 1.
    """
    rel = _check(relevant, k)
    return len(rel.intersection(_unique(ranked)[:k])) / len(rel)


def ndcg_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int = NDCG_K) -> float:
    """Binary-gain nDCG@k (0..1) of *ranked* against *relevant* (Järvelin & Kekäläinen 2002).

    Raises `ValueError` if *relevant* is empty or k < 1.
    """
    rel = _check(relevant, k)
    dcg = sum(1.0 / math.log2(rank + 1) for rank, doc in enumerate(_unique(ranked)[:k], start=1) if doc in rel)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(rel), k) + 1))
    return dcg / ideal


@dataclass(frozen=True)
class QuestionScore:
    """One question's metrics; *group* is its category label (e.g. "1 multi-hop")."""

    group: str
    recall: Mapping[int, float]
    ndcg: float


def score_question(
    group: str, ranked: Sequence[str], relevant: Iterable[str], ks: Sequence[int] = RECALL_KS
) -> QuestionScore:
    """recall@k for each of *ks* and nDCG@10 of one question.

    Raises `ValueError` if *relevant* is empty.
    """
    rel = set(relevant)
    return QuestionScore(group, {k: recall_at_k(ranked, rel, k) for k in ks}, ndcg_at_k(ranked, rel, NDCG_K))


@dataclass(frozen=True)
class MetricRow:
    """Means over *n* questions: recall@k by k, and nDCG@10."""

    group: str
    n: int
    recall: Mapping[int, float]
    ndcg: float


def _mean_row(group: str, scores: Sequence[QuestionScore]) -> MetricRow:
    ks = sorted({k for s in scores for k in s.recall})
    n = len(scores)
    return MetricRow(
        group=group,
        n=n,
        recall={k: sum(s.recall[k] for s in scores) / n for k in ks},
        ndcg=sum(s.ndcg for s in scores) / n,
    )


def summarize(scores: Iterable[QuestionScore]) -> list[MetricRow]:
    """One row per group (sorted by label) and a last `OVERALL` row (micro average over
    every question). Empty input gives no rows."""
    by_group: dict[str, list[QuestionScore]] = defaultdict(list)
    every: list[QuestionScore] = []
    for score in scores:
        by_group[score.group].append(score)
        every.append(score)
    if not every:
        return []
    return [_mean_row(g, by_group[g]) for g in sorted(by_group)] + [_mean_row(OVERALL, every)]
