"""Text tables of an evaluation, and the published LoCoMo baselines to read them against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memplane.eval.metrics import NDCG_K, RECALL_KS, MetricRow


@dataclass(frozen=True)
class Baseline:
    """Published figures of one retriever over turns (overall = 1,536 questions of
    categories 1-4 unless *note* says otherwise); None where not published."""

    name: str
    recall5: float
    recall10: float
    ndcg10: float | None
    note: str = ""


BASELINES: tuple[Baseline, ...] = (
    Baseline("BM25 (rank_bm25)", 0.524, 0.595, 0.466),
    Baseline("all-MiniLM-L6-v2 dense", 0.398, 0.495, 0.343),
    Baseline("RRF (BM25 + MiniLM)", 0.508, 0.588, 0.441),
    Baseline("DRAGON (LoCoMo paper)", 0.567, 0.662, None, "adversarial questions included"),
)
"""shared/data/locomo/README.md and baseline_results/main.json (turns indexed as
"[session date] speaker: text"); DRAGON from Maharana et al., ACL 2024."""

BASELINE_SOURCE = "baseline_results/main.json; DRAGON: Maharana et al., ACL 2024"


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def format_table(rows_by_mode: Mapping[str, Sequence[MetricRow]]) -> str:
    """One line per (mode, category) and the `overall` line of each mode; metrics with 3
    decimals. Columns: mode, category, n, R@1, R@5, R@10, R@20, nDCG@10."""
    header = ["mode", "category", "n", *(f"R@{k}" for k in RECALL_KS), f"nDCG@{NDCG_K}"]
    lines = [header]
    for mode, rows in rows_by_mode.items():
        for row in rows:
            lines.append([mode, row.group, str(row.n), *(_fmt(row.recall.get(k)) for k in RECALL_KS), _fmt(row.ndcg)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def format_baselines() -> str:
    """The published baselines (overall R@5, R@10, nDCG@10), one per line."""
    width = max(len(b.name) for b in BASELINES)
    lines = [f"baselines for reference ({BASELINE_SOURCE}):"]
    for b in BASELINES:
        note = f"  ({b.note})" if b.note else ""
        lines.append(
            f"  {b.name.ljust(width)}  R@5 {_fmt(b.recall5)}  R@10 {_fmt(b.recall10)}  nDCG@10 {_fmt(b.ndcg10)}{note}"
        )
    return "\n".join(lines)
