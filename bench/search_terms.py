"""What the recall options of SearchMemories cost in database time, configurations alternated.

Against a running server (`memplane serve`) holding a LoCoMo import (`memplane import
locomo PATH --prefix P`, one workspace per conversation: ~600 turns, the size of one
user's scope): every scored question of the first --conversations conversations is asked
once under each configuration, the configurations in turn question by question (so a
stall of the shared machine lands on all of them alike), one request at a time, top_k 20.
Printed per configuration: the server's own database time (SearchMemoriesResponse.timing,
p50 and p95, ms) and its ratio to the first configuration's p50, and the round trip p50.
Query embeddings come from the server's cache after the warm-up pass (embedding excluded
from the database time anyway).

    python bench/search_terms.py /work/shared/data/locomo/locomo10.json --prefix locomo --target 127.0.0.1:50871
    python bench/search_terms.py ... --text-format peer   # an import made with --text-format peer

Configurations: "off" (WEIGHTED fusion, every term 0: the search before issue 14),
"zscore" (the fusion alone), "default, when 0" (the defaults but the when-question term),
"default" (the server's defaults), "default+prf10" (and RM3 with 10 expansion lexemes),
"default+context5" (and 5 context turns each side of a hit).

--compare-target names a second server over a copy of the same data directory (the same
keys), e.g. one running the code before a change: every configuration is then asked of it
too, in turn with the first, and printed as "NAME@compare" (its ratio still to the first
server's "off").

    python bench/search_terms.py ... --target 127.0.0.1:50081 --compare-target 127.0.0.1:50082
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from memplane.cli.connect import admin_client, workspace_client
from memplane.eval.ingest import TEXT_FORMATS, WorkspaceSet
from memplane.eval.locomo import load_locomo, workspace_name
from memplane.eval.runner import TERMS_OFF, workspace_prefix
from memplane.server.settings import Settings
from memplane.v1 import retrieval_pb2

OFF = TERMS_OFF
CONFIGS: dict[str, dict[str, Any]] = {
    "off": {"fusion": retrieval_pb2.FUSION_METHOD_WEIGHTED, **OFF},
    "zscore": {"fusion": retrieval_pb2.FUSION_METHOD_ZSCORE, **OFF},
    "default, when 0": {"when_weight": 0.0},
    "default": {},
    "default+prf10": {"prf_terms": 10},
    "default+context5": {"context_turns": 5},
}


def _seconds(d: Any) -> float:
    return float(d.seconds + d.nanos / 1e9)


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


@contextlib.asynccontextmanager
async def _workspaces(
    args: argparse.Namespace, target: str | None, conversations: list[Any]
) -> AsyncIterator[WorkspaceSet]:
    """The import's workspaces on the server at *target*, opened (reused, never deleted)."""
    settings = Settings()
    ns = argparse.Namespace(target=target, api_key=None, ca_file=None)

    def make(key: str) -> Any:
        return workspace_client(argparse.Namespace(target=target, api_key=key, ca_file=None), settings)

    async with admin_client(ns, settings) as admin, WorkspaceSet(admin, make, delete=False) as spaces:
        for c in conversations:
            name = workspace_name(workspace_prefix(args.prefix, args.text_format), c.sample_id)
            await spaces.open(c.sample_id, name, reuse=True, text_format=args.text_format)
        yield spaces


async def main(args: argparse.Namespace) -> None:
    conversations = load_locomo(args.path, args.conversations)
    print(f"# memplane bench: search_terms; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    targets = {"": args.target} | ({"@compare": args.compare_target} if args.compare_target else {})
    samples: dict[str, list[tuple[float, float]]] = {name + t: [] for t in targets for name in CONFIGS}
    asked = [(c.sample_id, q.question) for c in conversations for q in c.scored_questions()]
    async with contextlib.AsyncExitStack() as stack:
        spaces = {
            t: await stack.enter_async_context(_workspaces(args, target, conversations))
            for t, target in targets.items()
        }
        for opened in spaces.values():  # warm-up: embeddings cached, pages read
            for sample_id, question in asked:
                await opened.client(sample_id).search(question, top_k=20)
        for sample_id, question in asked:
            for name, options in CONFIGS.items():
                for t, opened in spaces.items():
                    started = time.perf_counter()
                    reply = await opened.client(sample_id).search(question, top_k=20, **options)
                    trip = time.perf_counter() - started
                    samples[name + t].append((_seconds(reply.timing.database_duration), trip))
    base = statistics.median(db for db, _ in samples["off"])
    print(f"{len(asked)} questions x {len(samples)} configurations, one request at a time, top_k 20")
    print("configuration             db p50 ms  db p95 ms  x off  round trip p50 ms")
    for name, rows in samples.items():
        db = [r[0] for r in rows]
        print(
            f"{name:<25} {1000 * statistics.median(db):>9.2f}  {1000 * _pct(db, 95):>9.2f}"
            f"  {statistics.median(db) / base:>5.2f}  {1000 * statistics.median(r[1] for r in rows):>17.2f}"
        )
    print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="locomo10.json")
    parser.add_argument("--prefix", default="locomo", help="the prefix of the import (default locomo)")
    parser.add_argument("--text-format", choices=TEXT_FORMATS, default="conversation", help="the import's format")
    parser.add_argument("--conversations", type=int, default=2, help="first N conversations (default 2)")
    parser.add_argument("--target", default=None, help="server host:port (default as the CLI)")
    parser.add_argument("--compare-target", default=None, help="a second server over a copy of the same data")
    asyncio.run(main(parser.parse_args()))
