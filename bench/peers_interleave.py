"""How bench/peers.py runs its systems: side by side, taking turns.

Every system is set up first (servers, workers, pools), then each phase goes round them:
one-at-a-time ingest conversation by conversation (memplane's first conversation, then
mem0's, ReMe's, the SQL table's, then everyone's second, the order rotating each round),
batched ingest system by system, and each search level pass by pass (every row's pass 1,
then every row's pass 2, rotating). A load that comes and goes on a shared machine (a
test suite, another benchmark) then falls on every system alike instead of on whichever
ran while it lasted: the ratios hold though the absolute figures move. A system that fails
is reported with the phase and the error, and the others go on.

Where each system's CPU goes: around each system's turn (an ingest conversation, a search
pass) the bench reads the CPU time (user + system) of every process by role — the
database (the PostgreSQL postmaster and its live children), the service (the system's own
process tree: memplane's server, a peer's worker; none for the SQL statement), the client
(this bench process) and the embedding endpoint — and reports it per request. Only one
system runs at a time, so what the shared processes used in its turn is its own, less a
little background work (autovacuum, memplane's vector indexer finishing the graph insert
of the last adds).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from _harness import log, run_load
from peers_sql import Level, Question, Turn, measure

Call = Callable[[int], Awaitable[Any]]
Adder = Callable[[Sequence[Turn]], Awaitable[None]]
Sampler = Callable[["Entry"], dict[str, float]]
"""CPU seconds used so far by role (database, service, client, endpoint) for an entry."""
T = TypeVar("T")
ROLES = ("database", "service", "client", "endpoint")


def per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """CPU milliseconds per request by role between two samples."""
    return {role: (after[role] - before[role]) * 1000 / max(requests, 1) for role in before}


@dataclass(eq=False)
class Row:
    system: str
    level1: Level | None = None
    level8: Level | None = None
    ingest_one: float = float("nan")
    ingest_first_last: tuple[float, float] = (float("nan"), float("nan"))
    ingest_batch: float = float("nan")
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    """CPU ms per request by role (`ROLES`) of each phase: "ingest", "search@1", "search@8"."""


@dataclass
class Entry:
    """One system of the run: its rows (one per search mode) and what each phase calls.
    *add* stores memories one call each; *batch* ingests the first conversation into a
    fresh store and returns memories/s; *calls* makes one search call per row, after the
    ingest; *processes* are the pids of the system's own processes (its service role)."""

    name: str
    rows: list[Row]
    add: Adder | None = None
    batch: Callable[[], Awaitable[float]] | None = None
    calls: Callable[[], Awaitable[list[Call]]] | None = None
    failed: bool = False
    processes: Callable[[], list[int]] = list

    def fail(self, phase: str, exc: BaseException) -> None:
        self.failed = True
        for row in self.rows:
            row.note = f"failed in {phase}: {type(exc).__name__}: {str(exc)[:160]}"
        log(f"{self.name} failed in {phase}: {exc!r}")


async def _guarded(entry: Entry, phase: str, run: Callable[[], Awaitable[T]]) -> T | None:
    try:
        return await run()
    except Exception as exc:  # a system that fails is reported; the run goes on
        entry.fail(phase, exc)
        return None


def _rotated(items: Sequence[T], k: int) -> list[T]:
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


async def ingest_one_at_a_time(entries: Sequence[Entry], turns: Sequence[Turn], sample: Sampler) -> None:
    """Every turn, one add call each, conversation by conversation, the systems taking
    turns per conversation; sets each row's memories/s overall (the turns over the time
    the system itself took) and on the first and last conversation, and its CPU per add."""
    users = list(dict.fromkeys(t[0] for t in turns))
    by_user = {u: [t for t in turns if t[0] == u] for u in users}
    seconds: dict[str, dict[str, float]] = {e.name: {} for e in entries}
    cpu: dict[str, dict[str, float]] = {e.name: dict.fromkeys(ROLES, 0.0) for e in entries}
    for k, user in enumerate(users):
        for entry in _rotated([e for e in entries if e.add is not None and not e.failed], k):
            add = entry.add
            assert add is not None  # noqa: S101 - filtered above

            async def one_by_one(chunk: Sequence[Turn] = by_user[user], add: Adder = add) -> None:
                for turn in chunk:
                    await add([turn])

            before, started = sample(entry), time.perf_counter()
            await _guarded(entry, "ingest", one_by_one)
            if not entry.failed:
                seconds[entry.name][user] = time.perf_counter() - started
                after = sample(entry)
                for role in ROLES:
                    cpu[entry.name][role] += after[role] - before[role]
    for entry in entries:
        took = seconds[entry.name]
        if entry.failed or entry.add is None or len(took) != len(users):
            continue
        rate = len(turns) / sum(took.values())
        first, last = (len(by_user[u]) / took[u] for u in (users[0], users[-1]))
        for row in entry.rows:
            row.ingest_one, row.ingest_first_last = rate, (first, last)
            row.cpu["ingest"] = {role: cpu[entry.name][role] * 1000 / len(turns) for role in ROLES}
        log(f"{entry.name}: one-at-a-time ingest {rate:.0f}/s (first conversation {first:.0f}/s, last {last:.0f}/s)")


async def ingest_batched(entries: Sequence[Entry]) -> None:
    """Each system's batched ingest of the first conversation into a fresh store, in turn."""
    for entry in entries:
        if entry.batch is None or entry.failed:
            continue
        rate = await _guarded(entry, "batched ingest", entry.batch)
        if rate is not None:
            for row in entry.rows:
                row.ingest_batch = rate


async def search_levels(
    entries: Sequence[Entry], questions: Sequence[Question], args: argparse.Namespace, pgdata: Path, sample: Sampler
) -> None:
    """Warm every row's search up (100 requests at 8 callers, untimed), then at 1 and at 8
    callers --passes passes of --requests each, the rows taking turns pass by pass; each
    row's level is its median pass by QPS (R@10 and CPU per request from that pass)."""
    pairs = await _search_pairs(entries)
    for entry, _row, call in pairs:
        warm = {"concurrency": 8, "requests": min(len(questions), 100), "max_seconds": 60}
        await _guarded(entry, "search warm-up", functools.partial(run_load, call, **warm))
    for concurrency in (1, 8):
        medians = await _median_passes(pairs, questions, concurrency, args, pgdata, sample=sample)
        for row, (level, used) in medians.items():
            row.cpu[f"search@{concurrency}"] = used
            if concurrency == 1:
                row.level1 = level
            else:
                row.level8 = level
    for _, row, _ in pairs:
        if row.level1 is not None and row.level8 is not None:
            log(
                f"{row.system}: R@10 {row.level1.recall:.3f}, p50 {row.level1.p50:.2f} ms,"
                f" QPS@8 {row.level8.result.qps:.0f} (errors {row.level1.result.errors}/{row.level8.result.errors})"
            )


async def _search_pairs(entries: Sequence[Entry]) -> list[tuple[Entry, Row, Call]]:
    """(entry, row, its search call) of every system still running."""
    pairs: list[tuple[Entry, Row, Call]] = []
    for entry in entries:
        if entry.calls is None or entry.failed:
            continue
        calls = await _guarded(entry, "search set-up", entry.calls)
        if calls is not None:
            pairs += [(entry, row, call) for row, call in zip(entry.rows, calls, strict=True)]
    return pairs


async def _median_passes(
    pairs: Sequence[tuple[Entry, Row, Call]], questions: Sequence[Question], concurrency: int,
    args: argparse.Namespace, pgdata: Path, *, sample: Sampler,
) -> dict[Row, tuple[Level, dict[str, float]]]:  # fmt: skip
    """--passes passes at *concurrency* callers, the rows taking turns; each row's median
    pass by QPS, with its CPU ms per request by role."""
    one_pass = argparse.Namespace(**{**vars(args), "passes": 1})
    got: dict[int, list[tuple[Level, dict[str, float]]]] = {id(row): [] for _, row, _ in pairs}
    for p in range(args.passes):
        for entry, row, call in _rotated(pairs, p):
            if entry.failed:
                continue
            run = functools.partial(measure, call, questions, concurrency, one_pass, pgdata)
            before = sample(entry)
            level = await _guarded(entry, f"search at {concurrency}", run)
            if level is not None:
                got[id(row)].append((level, per_request(before, sample(entry), len(level.result.latencies))))
    medians: dict[Row, tuple[Level, dict[str, float]]] = {}
    for entry, row, _ in pairs:
        levels = sorted(got[id(row)], key=lambda pair: pair[0].result.qps)
        if not entry.failed and levels:
            medians[row] = levels[len(levels) // 2]
    return medians
