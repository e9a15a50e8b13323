"""Where a search's database time goes: EXPLAIN (ANALYZE, BUFFERS) of memplane's own search
statement (`memplane.server.storage.search.statement`, built with the server's settings as
RetrievalService builds it, run in its tenant transaction with its HNSW settings) over a
data directory kept by `peers_sql.py --pgdata`.

For --queries questions (asked over the whole workspace, or per user with --per-user) it
prints each one's execution time and lexical candidate count, their median, and the plan of
the median query (per node: actual time, rows, buffers hit / read). A first pass over the
same questions warms the caches unless --cold.

With --terms it times the query-aware terms instead (issue 14's neighbourhood, speaker,
time and phrase terms against issue 9's budget): each question runs as the statement of
three configurations in turn — "off" (WEIGHTED fusion, every term 0: the search before
issue 14), "zscore" (the fusion alone) and "default" (the server's settings) — each in its
tenant transaction as the server sends it (one round trip, the statement prepared by
psycopg after its fifth use: a warm-up pass first), and prints each configuration's p50 /
p95 (ms, from the client: the statement's database time plus one loopback round trip) and
its p50 against "off".

With --ef-search E1 E2 ... it checks the vector leg instead: the same statement with the
vector signal only, through HNSW (iterative scan, hnsw.ef_search = each E) against the
exact scan (every row's distance, sorted), per query: the HNSW path's time and recall@depth
(the share of the exact top-depth rows it returns) and @10; for synthetic rows (a text +
" #row", ~500 near-copies of each text at 1M) also the share of the exact top's texts it
returns, since which of a text's near-equidistant copies come first is noise.

    python bench/search_plan.py --pgdata /tmp/1m --size 1000000 --users 10000 --bulk
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import bench_server, common_args, environment_banner, log
from peers_sql import Question, seed_locomo, seed_synthetic

from memplane.domain.filters import MemoryFilter
from memplane.domain.ranking import TERMS_OFF, FusionMethod, Ranking
from memplane.server.retrieval.service import _hnsw_settings, _query_text
from memplane.server.storage import search as search_sql
from memplane.server.storage.search import SearchSpec, query_values
from memplane.text.segment import segment


def _spec(cfg: Any, exact: bool, narrows: bool) -> SearchSpec:
    """The default hybrid search's spec, as RetrievalService.search makes it (top_k 10,
    every request field left to the server's settings)."""
    return SearchSpec(
        use_vector=True,
        use_lexical=True,
        depth=max(10 * cfg.candidate_multiplier, cfg.min_candidates),
        top_k=10,
        min_score=0.0,
        exact=exact,
        prefilter=exact and narrows,
        lexical_budget=cfg.lexical_candidate_postings,
        lexical_cap=cfg.lexical_max_candidates,
        ranking=Ranking.from_settings(cfg),
        k1=cfg.bm25_k1,
        b=cfg.bm25_b,
        prf_docs=cfg.prf_docs,
        prf_weight=cfg.prf_weight,
    )


def _values(params: Any, ws: Any, q: Question, spec: SearchSpec, *, cfg: Any, now: datetime) -> dict[str, Any]:
    """The statement's values for question *q*, as `memplane.server.storage.search.send` binds them."""
    text = _query_text(q.text, segment(q.text) if spec.use_lexical else "", q.vector, now, cfg)
    if not spec.use_vector:
        text = dataclasses.replace(text, vector=None)
    return query_values(params, ws.key, text, spec)


def _walk(node: dict[str, Any], depth: int = 0) -> list[str]:
    label = node["Node Type"]
    for key in ("CTE Name", "Subplan Name", "Function Name", "Index Name", "Relation Name"):
        if key in node:
            label += f" [{node[key]}]"
    line = (
        f"{'  ' * depth}{label}: {node.get('Actual Total Time', 0):.2f} ms x{node.get('Actual Loops', 1)},"
        f" rows {node.get('Actual Rows', 0)}, hit {node.get('Shared Hit Blocks', 0)},"
        f" read {node.get('Shared Read Blocks', 0)}"
    )
    return [line, *(x for child in node.get("Plans", []) for x in _walk(child, depth + 1))]


def _candidates(node: dict[str, Any], in_ls: bool = False) -> int:
    """Lexical candidates: the rows of CTE cand (or of the GIN function); a per-user
    search's cand is inlined into BM25 (every row of the scope): the memories BM25 scored,
    the rows of its aggregate."""
    if node.get("CTE Name") == "cand" or node.get("Function Name") == "memplane_lexical_candidates":
        return int(node.get("Actual Rows", 0))
    in_ls = in_ls or node.get("CTE Name") == "ls"
    own = int(node.get("Actual Rows", 0)) if in_ls and node["Node Type"] == "Aggregate" else 0
    return max([own, *(_candidates(c, in_ls) for c in node.get("Plans", []))])


def _text(content: str) -> str:
    """The text a synthetic row copies (peers_sql's rows are that text + " #row")."""
    return content.rsplit(" #", 1)[0]


def _recall(got: list[tuple[str, str]], truth: list[tuple[str, str]], k: int, part: int) -> float:
    want = {t[part] for t in truth[:k]}
    return len({g[part] for g in got[:k]} & want) / len(want)


async def _vector_ids(
    stack: Any, q: Question, spec: SearchSpec, settings: dict[str, str]
) -> tuple[list[tuple[str, str]], float]:
    ws = stack.workspace
    now = datetime.now(UTC)
    query, params = search_sql.statement(spec, MemoryFilter(), now, ws.embedding_dimensions)
    values = _values(params, ws, q, spec, cfg=stack.app.settings.retrieval, now=now)
    started = time.perf_counter()
    async with stack.app.db.tenant_pipeline(ws.key, settings) as conn:
        cursors = [await conn.execute(query, values)]
    rows = (await search_sql.read(cursors))[0]
    ranked = sorted(rows, key=lambda r: r.vector[2] if r.vector else 0)
    return [(r.memory.id, _text(r.memory.content)) for r in ranked], time.perf_counter() - started


async def vector_leg(stack: Any, picked: list[Question], ef_values: list[int]) -> None:
    """recall@depth / @10 and time of the HNSW walk against the exact scan (see docstring)."""
    cfg = stack.app.settings.retrieval
    base = _spec(cfg, False, False)
    spec = dataclasses.replace(
        base, use_lexical=False, top_k=base.depth, ranking=dataclasses.replace(base.ranking, prf_terms=0)
    )
    exact = {}
    for q in picked:
        exact[q.text], seconds = await _vector_ids(stack, q, dataclasses.replace(spec, exact=True), {})
        log(f"exact scan {seconds * 1000:.0f} ms")
    for ef in ef_values:
        times: list[float] = []
        recalls: dict[str, list[float]] = {"rows@depth": [], "rows@10": [], "texts@depth": [], "texts@10": []}
        for warm in (True, False):
            for q in picked:
                ids, seconds = await _vector_ids(stack, q, spec, _hnsw_settings(ef, spec.depth))
                if not warm:
                    truth = exact[q.text]
                    times.append(seconds * 1000)
                    for name, k, part in (("rows@depth", spec.depth, 0), ("rows@10", 10, 0)):
                        recalls[name].append(_recall(ids, truth, k, part))
                    for name, k, part in (("texts@depth", spec.depth, 1), ("texts@10", 10, 1)):
                        recalls[name].append(_recall(ids, truth, k, part))
        print(
            f"hnsw.ef_search {max(ef, spec.depth)}: p50 {statistics.median(times):.2f} ms, recall "
            + ", ".join(f"{name} {statistics.fmean(v):.3f}" for name, v in recalls.items())
            + f" ({len(picked)} queries, time from the client: one round trip)"
        )


async def terms_cost(stack: Any, picked: list[Question], per_user: bool) -> None:
    """p50 / p95 of the default statement against the terms off (see the docstring)."""
    cfg = stack.app.settings.retrieval
    ws = stack.workspace
    default = _spec(cfg, per_user, per_user)
    zscore = dataclasses.replace(default, ranking=default.ranking.with_overrides(TERMS_OFF))
    weighted = zscore.ranking.with_overrides({"fusion": FusionMethod.WEIGHTED})
    configs = {"off": dataclasses.replace(zscore, ranking=weighted), "zscore": zscore}
    configs["default"] = default
    times: dict[str, list[float]] = {name: [] for name in configs}
    settings = {} if per_user else _hnsw_settings(cfg.hnsw_ef_search, default.depth)
    for warm in (True, False):
        for q in picked:
            flt = MemoryFilter(user_id=q.user_id) if per_user else MemoryFilter()
            for name, spec in configs.items():
                now = datetime.now(UTC)
                query, params = search_sql.statement(spec, flt, now, ws.embedding_dimensions)
                values = _values(params, ws, q, spec, cfg=cfg, now=now)
                started = time.perf_counter()
                async with stack.app.db.tenant_pipeline(ws.key, settings) as conn:
                    cursors = [await conn.execute(query, values)]
                await search_sql.read(cursors)
                if not warm:
                    times[name].append((time.perf_counter() - started) * 1000)
    base = statistics.median(times["off"])
    for name, ms in times.items():
        p50, p95 = statistics.median(ms), statistics.quantiles(ms, n=20)[-1]
        print(f"{name:8s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  x{p50 / base:.2f}  ({len(ms)} queries)")


async def main(args: argparse.Namespace) -> None:
    environment_banner("search_plan", args)
    async with bench_server(keep=args.pgdata) as stack:
        if args.size == "locomo":
            questions: list[Question] = await seed_locomo(stack, args.locomo, write=False)
        else:
            questions = await seed_synthetic(
                stack, args.locomo, int(args.size), args.users, args.seed, bulk=args.bulk, write=False
            )
        log(await stack.server_info())
        cfg = stack.app.settings.retrieval
        ws = stack.workspace
        picked = questions[:: max(1, len(questions) // args.queries)][: args.queries]
        if args.ef_search:
            await vector_leg(stack, picked, args.ef_search)
            return
        if args.terms:
            await terms_cost(stack, picked, args.per_user)
            return
        for warm in [False] if args.cold else [True, False]:
            times, plans = [], []
            for q in picked:
                flt = MemoryFilter(user_id=q.user_id) if args.per_user else MemoryFilter()
                exact = args.per_user  # a user's ~100 rows: exact; the whole workspace: HNSW
                spec = _spec(cfg, exact, flt.narrows)
                now = datetime.now(UTC)
                query, params = search_sql.statement(spec, flt, now, ws.embedding_dimensions)
                values = _values(params, ws, q, spec, cfg=cfg, now=now)
                settings = {} if exact else _hnsw_settings(cfg.hnsw_ef_search, spec.depth)
                async with stack.app.db.tenant_pipeline(ws.key, settings) as conn:
                    explain = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.as_bytes(conn)
                    cur = await conn.execute(explain, values)
                [row] = await cur.fetchall()
                plan = row["QUERY PLAN"][0]
                times.append(float(plan["Execution Time"]))
                plans.append(plan)
            if warm:
                continue
            for q, t, plan in zip(picked, times, plans, strict=True):
                print(f"{t:8.2f} ms  candidates {_candidates(plan['Plan']):5d}  {q.text[:70]}")
            median = sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]
            print(f"\nmedian {statistics.median(times):.2f} ms, mean {statistics.fmean(times):.2f} ms")
            print(f"plan of the median query ({picked[median].text!r}):")
            print("\n".join(_walk(plans[median]["Plan"])))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--pgdata", type=Path, required=True, help="a data directory kept by peers_sql.py")
    parser.add_argument("--size", default="locomo", help="as peers_sql.py seeded it")
    parser.add_argument("--users", type=int, default=1000, help="as peers_sql.py seeded it")
    parser.add_argument("--bulk", action="store_true", help="as peers_sql.py seeded it")
    parser.add_argument("--queries", type=int, default=20, help="questions explained")
    parser.add_argument("--per-user", action="store_true", help="each question within its user, not the workspace")
    parser.add_argument("--cold", action="store_true", help="no warm-up pass")
    parser.add_argument("--terms", action="store_true", help="time the query-aware terms against them off")
    parser.add_argument("--ef-search", type=int, nargs="*", default=[], help="check the vector leg at these")
    asyncio.run(main(parser.parse_args()))
