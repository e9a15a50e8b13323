"""How memplane's search throughput scales with the cores it is given (issue 31, item 2),
in one run.

What runs
  - bench/peers.py's memplane on the user's path: `memplane serve` in a process of its own
    on the bench's embedded PostgreSQL, every search embedding its query over HTTP through
    the OpenAI-compatible endpoint bench/peers_workers/embed_server.py (the server's own
    embedding cache off: EMBEDDING__CACHE_SIZE=0), driven over gRPC by
    `AsyncMemplaneClient` over --connections channels (so that SO_REUSEPORT can spread
    them over the workers), default hybrid search per user;
  - the SQL reference of bench/peers_sql.py (`sql_call`: dense top 50 + full text top 50,
    RRF, one statement, its query vectors fetched from the endpoint before timing).

Configurations: the whole stack (PostgreSQL, the server process(es), the endpoint and the
bench's client) on 1 core; on 2 cores with `--workers 1`; on 2 cores with `--workers 2`.
Each is a child process pinned at its start (`os.sched_setaffinity`, then exec), so every
process it starts inherits the limit; it reads Cpus_allowed_list (/proc/<pid>/status) of
the postmaster and its backends, the server process(es), the endpoint and its own threads,
and fails if one may run elsewhere. The 1-core child runs on core (round mod the cores).

Data: the first --conversations LoCoMo conversations (read from --locomo, never copied),
every turn one memory of user_id = its conversation, embedded through the endpoint; seeded
once, before the rounds, into a data directory every child starts its PostgreSQL on.

Measured: each child warms up (100 searches of each system at 8 callers, untimed), then
p50 at 1 closed-loop client and QPS at 8 (bench/_harness.run_load, --requests each),
memplane and SQL taking turns, and, beside memplane's QPS@8, the cores each part of the
stack kept busy meanwhile (its processes' CPU seconds over the level's seconds).
--rounds rounds, the configurations taking turns in a rotating order (a load that comes
and goes on a shared machine falls on all alike); the median per configuration, its ratio
to the 1-core figure and to the SQL statement's at the same cores. A child that fails is
printed as failed with the reason; the others go on.

    python bench/cores.py                                                # 3 conversations, ~8 min
    python bench/cores.py --conversations 1 --rounds 1 --requests 100   # a dry run, ~40 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]
from _harness import (
    _stop_embedded,
    batches,
    bench_server,
    closing_banner,
    common_args,
    environment_banner,
    load_average,
    log,
    print_table,
    process_cpu_seconds,
    run_load,
    server_process,
)
from peers import CACHE, DIMENSIONS, MODEL, Endpoint, endpoint, memplane_env
from peers_sql import Question, _register, _turn_items, _turn_memory, measure, memplane_call, sql_call
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memplane.eval.locomo import load_locomo
from memplane.server.settings import EmbeddingSettings
from memplane.server.storage.vector_index import index_backlog

CONFIGS = {"1c": (1, 1), "2c": (2, 1), "2c2w": (2, 2)}  # key: (cores, memplane serve --workers)
LABELS = {"1c": "1 core", "2c": "2 cores", "2c2w": "2 cores, 2 workers"}
PIN = "import os, sys; os.sched_setaffinity(0, map(int, sys.argv[1].split(','))); os.execv(sys.argv[2], sys.argv[2:])"
LISTEN_POLL_SECONDS = 0.05
LISTEN_SECONDS = 120.0  # for every worker of `memplane serve --workers` to listen
SCRIPT = Path(__file__).resolve()


# -- CPU affinity -----------------------------------------------------------------------
def allowed_cpus(pid: int | str) -> set[int]:
    """The CPUs a process (or "self/task/<tid>") may run on: Cpus_allowed_list of its status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                low, _, high = part.partition("-")
                cpus.update(range(int(low), int(high or low) + 1))
            return cpus
    raise RuntimeError(f"no Cpus_allowed_list in /proc/{pid}/status")


def stack_processes(postmaster: int, server: int) -> dict[str, list[int]]:
    """The pids of the stack by role (the bench: this process)."""
    descendants = psutil.Process().children(recursive=True)
    return {
        "bench": [os.getpid()],
        "PostgreSQL": [postmaster, *(p.pid for p in psutil.Process(postmaster).children())],
        "server": [server, *(p.pid for p in psutil.Process(server).children(recursive=True))],
        "endpoint": [p.pid for p in descendants if "embed_server.py" in " ".join(p.cmdline())],
    }


def affinity_report(processes: dict[str, list[int]]) -> dict[str, list[str]]:
    """Cpus_allowed_list of every process of the stack (and of every thread of this one),
    by role; raises RuntimeError when one may run on a CPU this child may not."""
    mine = os.sched_getaffinity(0)
    report: dict[str, list[str]] = {}
    for role, pids in processes.items():
        tasks: list[int | str] = (
            [f"self/task/{t}" for t in os.listdir("/proc/self/task")] if role == "bench" else [*pids]
        )
        seen: set[str] = set()
        for task in tasks:
            with contextlib.suppress(FileNotFoundError):  # a backend that just ended
                cpus = allowed_cpus(task)
                if not cpus <= mine:
                    raise RuntimeError(f"affinity not inherited: {role} {task} may run on {sorted(cpus)}")
                seen.add(",".join(map(str, sorted(cpus))))
        if not seen:
            raise RuntimeError(f"no process of {role} found")
        report[role] = [f"{len(tasks)} {'threads' if role == 'bench' else 'processes'}", *seen]
    return report


def cpu_seconds(processes: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the processes of each role."""
    return {role: process_cpu_seconds(pids) for role, pids in processes.items()}


async def listening(root: int, port: int, count: int) -> list[int]:
    """The pids (*root* and its descendants) listening on *port*, once *count* of them do:
    `memplane serve --workers` starts its workers after the first accepts connections."""
    deadline = time.monotonic() + LISTEN_SECONDS
    while True:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        pids = []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if any(c.status == "LISTEN" and c.laddr.port == port for c in proc.net_connections("tcp")):
                    pids.append(proc.pid)
        if len(pids) >= count or time.monotonic() > deadline:
            return pids
        await asyncio.sleep(LISTEN_POLL_SECONDS)  # polling the workers' sockets, as the supervisor polls its port


def connection_split(pids: Sequence[int], port: int) -> str:
    """How the client's connections to *port* fell on the listening processes ("5/3")."""
    counts = []
    for pid in pids:
        conns = psutil.Process(pid).net_connections("tcp")
        counts.append(sum(1 for c in conns if c.status == "ESTABLISHED" and c.laddr.port == port))
    return "/".join(map(str, counts))


# -- one configuration (the child) ------------------------------------------------------
def embedding(ep: Endpoint) -> EmbeddingSettings:
    return EmbeddingSettings(provider="openai", base_url=ep.url, model=MODEL, dimensions=DIMENSIONS, cache_size=0)


async def child(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one configuration on the seeded data directory; its figures as a dict."""
    _, workers = CONFIGS[args.child]
    conversations = load_locomo(args.locomo, args.conversations)
    asked = [(q, c.sample_id) for c in conversations for q in c.scored_questions()]
    async with endpoint(CACHE / "embed-cache.npz") as ep:
        qvectors = await ep.vectors([q.question for q, _ in asked])
        questions = [Question(q.question, user, q.evidence, qvectors[i]) for i, (q, user) in enumerate(asked)]
        async with (
            bench_server(keep=args.child_data, embedding=embedding(ep)) as stack,
            server_process(stack, **memplane_env(ep, cache_size=0, workers=workers)) as served,
            AsyncConnectionPool(
                stack.app.db.dsn, min_size=4, max_size=16, open=False, configure=_register,
                kwargs={"row_factory": dict_row},
            ) as pool,
        ):  # fmt: skip
            port = int(served.target.rsplit(":", 1)[1])
            listeners = await listening(served.pid, port, workers)
            if len(listeners) < workers:
                raise RuntimeError(f"{len(listeners)} of {workers} workers listening after 120 s")
            pgdata = stack.data_dir / "pgdata"
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
            calls = {
                "memplane": await memplane_call(served, questions, True, connections=args.connections),
                "sql": await sql_call(pool, stack, questions, True),
            }
            for call in calls.values():
                await run_load(call, concurrency=8, requests=min(100, len(questions)), max_seconds=60)
            processes = stack_processes(postmaster, served.pid)
            report = affinity_report(processes)
            split = connection_split(listeners, port)
            one_pass = argparse.Namespace(passes=1, requests=args.requests, max_seconds=args.max_seconds)
            figures: dict[str, dict[str, float]] = {name: {} for name in calls}
            cpu: dict[str, float] = {}
            for concurrency in (1, 8):
                order = list(calls) if (args.round + concurrency) % 2 else list(calls)[::-1]
                for name in order:
                    before = cpu_seconds(processes)
                    level = await measure(calls[name], questions, concurrency, one_pass, pgdata)
                    if concurrency == 8 and name == "memplane":  # cores busy per role
                        used = cpu_seconds(processes)
                        cpu = {role: (used[role] - before[role]) / level.result.seconds for role in used}
                    key = "p50" if concurrency == 1 else "qps"
                    figures[name][key] = level.p50 if concurrency == 1 else level.result.qps
                    figures[name][f"errors{concurrency}"] = level.result.errors
                    figures[name]["recall"] = level.recall
                    log(f"{args.child} {name} at {concurrency}: p50 {level.p50:.2f} ms, QPS {level.result.qps:.0f}")
    return {"figures": figures, "affinity": report, "split": split, "cpu": cpu, "load": load_average()}


# -- the run (the parent) ---------------------------------------------------------------
async def seed_data(args: argparse.Namespace, data_dir: Path) -> int:
    """Every turn of the first --conversations into *data_dir* through the endpoint; turns seeded."""
    turns = _turn_items(load_locomo(args.locomo, args.conversations))
    started = time.perf_counter()
    async with (
        endpoint(CACHE / "embed-cache.npz") as ep,
        bench_server(keep=data_dir, embedding=embedding(ep)) as stack,
        stack.client() as client,
    ):
        for chunk in batches(turns, 64):
            await client.add_memories([_turn_memory(t, np.empty(0, dtype=np.float32)) for t in chunk])
        await index_backlog(stack.app.db, stack.workspace.key)
        await stack.vacuum_analyze()
    log(f"seeded {len(turns)} turns in {time.perf_counter() - started:.0f} s")
    return len(turns)


async def run_child(
    key: str, cpus: list[int], round_no: int, data_dir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """One child on *cpus*; its figures, or {"error": reason}."""
    argv = [sys.executable, "-c", PIN, ",".join(map(str, cpus)), sys.executable, str(SCRIPT)]
    argv += ["--child", key, "--child-data", str(data_dir), "--round", str(round_no), "--locomo", str(args.locomo)]
    argv += ["--conversations", str(args.conversations), "--requests", str(args.requests)]
    argv += ["--max-seconds", str(args.max_seconds), "--connections", str(args.connections)]
    log(f"--- round {round_no + 1}: {key} on CPU(s) {cpus}")
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), args.child_timeout)
    except TimeoutError:
        process.send_signal(signal.SIGINT)  #: the child's context managers stop its servers
        try:
            await asyncio.wait_for(process.wait(), 120)
        except TimeoutError:
            process.kill()
            await process.wait()
        _stop_embedded(data_dir / "pgdata")
        return {"error": f"no result within {args.child_timeout:.0f} s"}
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, json.JSONDecodeError):
        return {"error": f"exited {process.returncode} without a result (see its log above)"}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_results(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, memories: int) -> None:
    ok = {key: [r for r in runs if "figures" in r] for key, runs in results.items()}

    def fig(key: str, system: str, name: str) -> list[float]:
        return [r["figures"][system][name] for r in ok.get(key, [])]

    sql_at = {n: [k for k in ok if ok[k] and CONFIGS[k][0] == n] for n in (1, 2)}
    sql = {
        n: (
            median([v for k in ks for v in fig(k, "sql", "p50")]),
            median([v for k in ks for v in fig(k, "sql", "qps")]),
        )
        for n, ks in sql_at.items()
    }
    base = median(fig("1c", "memplane", "qps"))
    rows: list[list[Any]] = []
    for key, runs in results.items():
        cores, workers = CONFIGS[key]
        qps = median(fig(key, "memplane", "qps"))
        failed = [r["error"] for r in runs if "error" in r]
        errors = sum(r["figures"]["memplane"]["errors1"] + r["figures"]["memplane"]["errors8"] for r in ok[key])
        notes = [f"rounds {' / '.join(f'{q:.0f}' for q in fig(key, 'memplane', 'qps'))}"] if ok[key] else []
        notes += [f"connections per worker {' '.join(r['split'] for r in ok[key])}"] if workers > 1 and ok[key] else []
        notes += [f"R@10 {median(fig(key, 'memplane', 'recall')):.3f}"] if ok[key] else []
        notes += [f"errors {errors}"] if errors else []
        if ok[key]:
            busy = {role: median([r["cpu"][role] for r in ok[key]]) for role in ok[key][0]["cpu"]}
            notes += ["cores busy at 8: " + ", ".join(f"{role} {v:.2f}" for role, v in busy.items())]
        notes += [f"{len(failed)} failed: {failed[-1]}"] if failed else []
        rows.append([f"memplane, {LABELS[key]}", cores, workers, median(fig(key, "memplane", "p50")), qps, qps / base,
                     qps / sql[cores][1], "; ".join(notes)])  # fmt: skip
    for n, (p50, qps) in sql.items():
        if sql_at[n]:
            samples = " / ".join(f"{v:.0f}" for k in sql_at[n] for v in fig(k, "sql", "qps"))
            errors = sum(v for k in sql_at[n] for level in ("errors1", "errors8") for v in fig(k, "sql", level))
            samples += f"; errors {errors:.0f}" if errors else ""
            rows.append(
                [f"SQL statement, {LABELS[f'{n}c']}", n, "-", p50, qps, qps / sql[1][1], 1.0, f"runs {samples}"]
            )
    print_table(
        f"LoCoMo, {args.conversations} conversation(s): {memories} memories; search per user, the query embedded"
        f" through the endpoint on every memplane search; the whole stack limited to the cores; median of"
        f" {args.rounds} round(s) of {args.requests} requests per level",
        ["configuration", "cores", "workers", "p50 ms (1 client)", "QPS@8", "x 1 core", "x SQL same cores", "notes"],
        rows,
    )
    print("\n# CPU affinity seen per child (Cpus_allowed_list):")
    for key, runs in ok.items():
        for r in runs:
            seen = "; ".join(f"{role} {' '.join(v)}" for role, v in r["affinity"].items())
            print(f"#   round {r['round']} {key} on CPU(s) {r['cpus']}, load average {r['load']}: {seen}")
    print(f"\n# command: python bench/cores.py {' '.join(sys.argv[1:])}".rstrip())


async def main(args: argparse.Namespace) -> None:
    environment_banner("cores", args)
    cores = sorted(os.sched_getaffinity(0))
    data_dir = Path(tempfile.mkdtemp(prefix="memplane-cores-"))
    results: dict[str, list[dict[str, Any]]] = {key: [] for key in args.configs}
    try:
        memories = await seed_data(args, data_dir)
        for r in range(args.rounds):
            for key in args.configs[r % len(args.configs) :] + args.configs[: r % len(args.configs)]:
                n = CONFIGS[key][0]
                if len(cores) < n:
                    results[key].append({"error": f"this host allows {len(cores)} core(s)"})
                    continue
                cpus = [cores[r % len(cores)]] if n == 1 else cores[:n]
                result = {**await run_child(key, cpus, r, data_dir, args), "round": r + 1, "cpus": cpus}
                if "error" in result:
                    log(f"{key} failed: {result['error']}")
                results[key].append(result)
    finally:
        _stop_embedded(data_dir / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)
    print_results(results, args, memories)
    closing_banner()


def child_main(args: argparse.Namespace) -> None:
    try:
        result = asyncio.run(child(args))
    except Exception as exc:  # reported to the parent, which prints it as failed and goes on
        log(f"{args.child} failed: {exc!r}")
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:200]}"}), flush=True)
        sys.exit(1)
    except KeyboardInterrupt:  # the parent's SIGINT after --child-timeout: the servers are stopped
        sys.exit(130)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--conversations", type=int, default=3, help="LoCoMo conversations (the first N)")
    parser.add_argument("--requests", type=int, default=800, help="search requests per level, system and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the configurations taking turns")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="in order")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time budget of one level")
    parser.add_argument("--connections", type=int, default=8, help="memplane's client channels (connections)")
    parser.add_argument("--child-timeout", type=float, default=600.0, help="seconds a configuration may take")
    parser.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--child-data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parsed = parser.parse_args()
    if parsed.child:
        child_main(parsed)
    else:
        asyncio.run(main(parsed))
