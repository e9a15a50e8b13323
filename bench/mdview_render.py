"""Render time of the Markdown view (memplane.mdview) and the time to write it into a
local sandbox (memplane.sandbox.LocalSandboxes), for 1,000 and 10,000 memories.

Per size: `render_view` alone (pure: names, files, the token-bounded MEMORY.md), the
first `write_view` into an empty sandbox, a second one with nothing changed (every file
read and compared, none written), and as the reference the same files written with
plain `Path.write_bytes` in the same run (no confinement checks, no atomic rename): the
ratio is what the sandbox interface costs. Memories are synthetic (seeded): 90 % of the
six non-episodic types with a name, a description and 1-3 sentences; 10 % episodic
turns over 30 days. Medians of `--repeats` runs, each in a fresh directory.

Then the two-way sync (`memplane.filesync.sync_once`, issue 13 item 3) per
`--sync-sizes` against a throw-away server (`_harness.bench_server`: embedded
PostgreSQL, real gRPC), the memories stored with AddMemories (precomputed random
vectors, so seeding does not time the embedding model): the first pass into an empty
sandbox, a pass with no edits (list over gRPC, read and hash every file, render,
compare: what a `--watch` poll costs), a pass with 10 files edited (10 UpdateMemory,
each embedded by the server, and a second listing), and as the reference the same run's
`list_all_memories` + `render_view` + `write_view` over an unchanged sandbox (what a
one-way re-render costs): the ratio is what detecting edits adds.

    python bench/mdview_render.py                 # ~15 min on a loaded 2-core box
    python bench/mdview_render.py --sizes 1000 --repeats 1 --sync-sizes 1000
    python bench/mdview_render.py --sync-sizes ''  # no server
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from _harness import bench_server, log

from memplane.client.transfer import list_all_memories
from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.filesync import sync_once
from memplane.filesync.convert import memory_from_proto, memory_input
from memplane.mdview import View, render_view, write_view
from memplane.sandbox import LocalSandboxes
from memplane.text.tokens import token_counter

NOW = datetime(2026, 3, 1, tzinfo=UTC)
_WORDS = [
    *["tests", "deploy", "tea", "green", "prefers", "project", "deadline", "review", "python", "database", "index"],
    *[
        "meeting",
        "notes",
        "budget",
        "release",
        "api",
        "schema",
        "migration",
        "user",
        "alice",
        "bob",
        "shanghai",
        "北京",
        "喜欢",
        "绿茶",
    ],
]
_TYPES = [t for t in MemoryType if t != MemoryType.EPISODIC]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."


def memories(n: int, seed: int = 7) -> list[Memory]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        episodic = rng.random() < 0.1
        when = NOW - timedelta(minutes=rng.randint(0, 30 * 24 * 60))
        out.append(
            Memory(
                id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                scope=Scope(user_id=f"u{i % 20}", session_id=f"s{i % 50}" if episodic else ""),
                type=MemoryType.EPISODIC if episodic else rng.choice(_TYPES),
                name="" if episodic else " ".join(rng.choice(_WORDS) for _ in range(3)),
                description=f"[{when:%d %B %Y}] alice" if episodic else _sentence(rng),
                content=" ".join(_sentence(rng) for _ in range(rng.randint(1, 3))),
                metadata={"speaker": "alice"} if episodic else {},
                valid_from=when,
                valid_to=None,
                expires_at=None,
                provenance=Provenance(),
                version=1,
                created_at=when,
                updated_at=when,
            )
        )
    return out


def _plain_write(root: Path, view: View) -> None:
    for path, text in view.files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode())


async def measure(n: int, repeats: int) -> dict[str, float]:
    items = memories(n)
    count = token_counter("o200k_base").count_text
    figures: dict[str, list[float]] = {"render": [], "write": [], "rewrite": [], "plain": []}
    view = render_view(items, now=NOW, count_tokens=count)
    for _ in range(repeats):
        start = time.perf_counter()
        view = render_view(items, now=NOW, count_tokens=count)
        figures["render"].append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="mdview-bench-") as tmp:
            backend = LocalSandboxes(Path(tmp) / "sandboxes")
            handle = await backend.ensure("bench")
            start = time.perf_counter()
            report = await write_view(backend, handle, view)
            figures["write"].append(time.perf_counter() - start)
            if len(report.written) != len(view.files):
                raise RuntimeError(f"first write wrote {len(report.written)} of {len(view.files)} files")
            start = time.perf_counter()
            again = await write_view(backend, handle, view)
            figures["rewrite"].append(time.perf_counter() - start)
            if again.written:
                raise RuntimeError(f"an unchanged view rewrote {len(again.written)} files")
            plain = Path(tmp) / "plain"
            start = time.perf_counter()
            _plain_write(plain, view)
            figures["plain"].append(time.perf_counter() - start)
            shutil.rmtree(plain)
    result = {k: statistics.median(v) for k, v in figures.items()}
    result["files"] = len(view.files)
    result["listed"] = view.listed
    return result


async def measure_sync(n: int, repeats: int) -> dict[str, float]:
    """Seconds (medians of *repeats*) of the sync passes for *n* stored memories."""
    count = token_counter("o200k_base").count_text
    figures: dict[str, list[float]] = {"first": [], "idle": [], "edits": [], "reference": []}
    rng = np.random.default_rng(7)
    async with bench_server() as stack, stack.client() as client:
        dims = stack.workspace.embedding_dimensions
        items = []
        for m in (m for m in memories(n * 2) if m.type != MemoryType.EPISODIC):
            item = memory_input(content=m.content, type=m.type, name=m.name, description=m.description, metadata={})
            vector = rng.normal(size=dims)
            item.embedding.extend((vector / np.linalg.norm(vector)).tolist())
            items.append(item)
        items = items[:n]
        for start in range(0, n, 200):
            await client.add_memories(items[start : start + 200])
        log(f"stored {n:,} memories")
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="filesync-bench-") as tmp:
                backend = LocalSandboxes(Path(tmp))
                handle = await backend.ensure("bench")
                for key in ("first", "idle"):
                    start = time.perf_counter()
                    report = await sync_once(client, backend, handle, count_tokens=count)
                    figures[key].append(time.perf_counter() - start)
                    if report.changed_memories() or report.problems:
                        raise RuntimeError(f"an unedited sandbox changed memories: {report}")
                start = time.perf_counter()
                view = render_view(
                    [memory_from_proto(m) for m in await list_all_memories(client)], now=datetime.now(UTC),
                    count_tokens=count,
                )  # fmt: skip
                await write_view(backend, handle, view)
                figures["reference"].append(time.perf_counter() - start)
                edited = sorted(p for p in view.files if p.endswith(".md") and "_" in p.rsplit("/", 1)[-1])[:10]
                for path in edited:
                    file = Path(handle.root) / path
                    file.write_text(file.read_text().rstrip("\n") + f" Edited {uuid.uuid4().hex[:8]}.\n")
                start = time.perf_counter()
                report = await sync_once(client, backend, handle, count_tokens=count)
                figures["edits"].append(time.perf_counter() - start)
                if len(report.updated) != len(edited):
                    raise RuntimeError(f"{len(edited)} edits gave {report}")
    return {k: statistics.median(v) for k, v in figures.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="memory counts (default 1000,10000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size (default 3; medians)")
    parser.add_argument(
        "--sync-sizes", default="1000,10000", help="stored memories of the sync rows (default 1000,10000; '' for none)"
    )
    ns = parser.parse_args()
    print(f"flags: sizes={ns.sizes} repeats={ns.repeats}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'memories':>9} {'files':>6} {'listed':>6} {'render ms':>10} {'write ms':>9} {'rewrite ms':>11}"
          f" {'plain ms':>9} {'write/plain':>12}")  # fmt: skip
    for n in (int(s) for s in ns.sizes.split(",")):
        r = await measure(n, ns.repeats)
        print(
            f"{n:>9,} {r['files']:>6,.0f} {r['listed']:>6,.0f} {r['render'] * 1e3:>10.1f} {r['write'] * 1e3:>9.1f}"
            f" {r['rewrite'] * 1e3:>11.1f} {r['plain'] * 1e3:>9.1f} {r['write'] / r['plain']:>11.1f}x"
        )
    if ns.sync_sizes:
        print(f"{'memories':>9} {'sync first ms':>14} {'no edits ms':>12} {'10 edits ms':>12} {'reference ms':>13}"
              f" {'no edits/ref':>13}")  # fmt: skip
    for n in (int(s) for s in ns.sync_sizes.split(",") if s):
        r = await measure_sync(n, ns.repeats)
        print(
            f"{n:>9,} {r['first'] * 1e3:>14.1f} {r['idle'] * 1e3:>12.1f} {r['edits'] * 1e3:>12.1f}"
            f" {r['reference'] * 1e3:>13.1f} {r['idle'] / r['reference']:>12.1f}x"
        )
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
