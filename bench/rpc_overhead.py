"""What memplane's gRPC server adds to a call: `grpc.health.v1.Health/Check` to `memplane
serve` beside the same Check to a bare grpc.aio server running grpc's own HealthServicer
(the floor: grpcio's handling of a unary call, nothing of memplane's), in one run.

What it measures (per call; one client, one channel per server, calls one after another;
the servers take turns round by round)
  - wall ms per call, from the client,
  - the server process's CPU ms per call (psutil: user + system, all its threads: grpcio's
    poller included), and its ratio to the bare server's.
  memplane's Check passes through what every memplane RPC does before its servicer runs
  (each method's request deserializer guarded where it is registered:
  `memplane.server.api.decoding`), so the difference is that per-call layer, not a
  service's work. Both servers run the same grpcio on the same loop type (asyncio).

    python bench/rpc_overhead.py [--calls 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

import grpc
import psutil  # type: ignore[import-untyped]
from _harness import closing_banner, common_args, environment_banner, free_port, log, pct, print_table, serve_process
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

WARMUP_CALLS = 300


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--calls", type=int, default=4_000, help="calls per server per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds, the servers taking turns")
    p.add_argument("--serve-bare", type=int, default=0, help=argparse.SUPPRESS)  # the bare server's own process
    return p.parse_args()


async def serve_bare(port: int) -> None:
    """grpc's HealthServicer alone on a grpc.aio server at 127.0.0.1:*port*; prints READY."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)  # type: ignore[attr-defined]
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("READY", flush=True)
    await server.wait_for_termination()


@contextlib.asynccontextmanager
async def bare_process() -> AsyncIterator[tuple[str, int]]:
    """The bare server in a process of its own: (target, pid); killed at exit."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-bare", str(port), stdout=asyncio.subprocess.PIPE
    )
    try:
        if process.stdout is None or (await asyncio.wait_for(process.stdout.readline(), 60)).strip() != b"READY":
            raise RuntimeError("the bare gRPC server did not start")
        yield f"127.0.0.1:{port}", process.pid
    finally:
        process.kill()
        await process.wait()


async def measure(target: str, pid: int, calls: int) -> tuple[float, float]:
    """*calls* Checks to *target* one after another: (wall ms, server CPU ms) per call."""
    server = psutil.Process(pid)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        for _ in range(WARMUP_CALLS):
            await stub.Check(request, timeout=30)
        before = server.cpu_times()
        started = time.perf_counter()
        for _ in range(calls):
            await stub.Check(request, timeout=30)
        wall = time.perf_counter() - started
        after = server.cpu_times()
    cpu = after.user + after.system - before.user - before.system
    return wall * 1000 / calls, cpu * 1000 / calls


async def main(args: argparse.Namespace) -> None:
    environment_banner("rpc_overhead", args)
    async with serve_process() as memplane, bare_process() as (bare_target, bare_pid):
        servers = {
            "bare grpc.aio + HealthServicer": (bare_target, bare_pid),
            "memplane serve": (memplane.target, memplane.pid),
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        for r in range(args.rounds):
            log(f"round {r + 1} of {args.rounds}")
            for name, (target, pid) in servers.items() if r % 2 == 0 else reversed(servers.items()):
                figures[name].append(await measure(target, pid, args.calls))
    medians = {name: (pct([w for w, _ in f], 50), pct([c for _, c in f], 50)) for name, f in figures.items()}
    floor = medians["bare grpc.aio + HealthServicer"][1]
    print_table(
        f"Health/Check, {args.calls:,} calls per server in each of {args.rounds} rounds (median of rounds)",
        ["server", "wall ms per call", "server CPU ms per call", "CPU ÷ bare"],
        [[name, wall, cpu, cpu / floor] for name, (wall, cpu) in medians.items()],
    )
    closing_banner()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_bare:
        asyncio.run(serve_bare(arguments.serve_bare))
    else:
        asyncio.run(main(arguments))
