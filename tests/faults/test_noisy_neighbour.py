"""A noisy neighbour: workspace B floods one server process with heavy searches (8 queries
of ~4,000 characters each, top_k 100, every query new so the embedding cache never
helps) from FLOOD_CALLERS concurrent callers, while workspace A runs ordinary searches
with a generous deadline. B is refused past its share (RESOURCE_EXHAUSTED with a
QuotaFailure naming `max_concurrent_requests`), every one of A's searches succeeds
within its deadline, and A's latencies are printed (a figure, not an assertion).
Once B's callers are gone, A is served again with nothing left running for them.

On the code before (no per-workspace concurrency limit; the embedder served whole calls
first come, first served, so A's short query waited behind B's long texts), A's first
search ran to its 60 s deadline (DEADLINE_EXCEEDED) and B was never refused.
"""

from __future__ import annotations

import asyncio
import random
import time

from memplane.client import AsyncMemplaneClient
from memplane.errors import DeadlineExceededError, QuotaExceededError
from tests.faults.conftest import KillablePostgres, ServerProcess
from tests.support import mem, unit_vectors

FLOOD_CALLERS = 16
LIMIT = 4  # the server's quota.max_concurrent_requests_per_workspace in this test
QUEUE = 4  # and its quota.max_queued_requests_per_workspace: 8 of B's 16 callers are refused at any time
A_SEARCHES = 5
A_DEADLINE = 60.0  # seconds: generous, and the only time bound asserted
B_DEADLINE = 30.0  # B's heavy searches often pass it: their remaining work is then dropped
QUERY_CHARS = 4_000
QUERIES = 8
TOP_K = 100

_WORDS = [
    "harbour",
    "lantern",
    "copper",
    "orchard",
    "violin",
    "glacier",
    "meadow",
    "cobalt",
    "falcon",
    "pepper",
    "quarry",
    "saffron",
    "tundra",
    "walnut",
    "ember",
    "fjord",
    "gravel",
    "hazel",
    "indigo",
    "juniper",
    "kettle",
    "lichen",
    "marble",
    "nutmeg",
    "oyster",
    "pebble",
    "quill",
    "raven",
    "sorrel",
    "thistle",
    "umber",
    "velvet",
    "willow",
    "yarrow",
    "zephyr",
    "anchor",
    "bramble",
    "cinder",
    "dune",
    "estuary",
    "fennel",
]


def _heavy_query(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < QUERY_CHARS - 20:
        words.append(rng.choice(_WORDS) + str(rng.randrange(1000)))
    return " ".join(words)


async def _workspace(server: ServerProcess, admin_key: str, name: str) -> str:
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(name)
        return (await admin.create_api_key(name, "test")).api_key


async def _seeded(server: ServerProcess, admin_key: str) -> tuple[str, str]:
    """Keys of workspaces "quiet" (20 short memories) and "noisy" (50 long ones)."""
    key_a = await _workspace(server, admin_key, "quiet")
    key_b = await _workspace(server, admin_key, "noisy")
    rng = random.Random(10)
    async with AsyncMemplaneClient(server.target, key_a, timeout=A_DEADLINE) as a:
        await a.add_memories([mem(f"the quiet tenant keeps note {i} about the harbour lantern") for i in range(20)])
    async with AsyncMemplaneClient(server.target, key_b, timeout=B_DEADLINE) as b:
        vectors = unit_vectors(50, seed=10)  # precomputed: seeding B costs no embedding
        await b.add_memories([mem(_heavy_query(rng)[:2_000], embedding=v) for v in vectors])
    return key_a, key_b


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds (nearest rank)."""
    ordered = sorted(latencies)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def test_a_flooding_workspace_is_refused_past_its_share_and_its_neighbour_keeps_its_deadline(
    killable_postgres: KillablePostgres, serve: object, admin_key: str
) -> None:
    server: ServerProcess = await serve(  # type: ignore[operator]
        killable_postgres.dsn,
        MEMPLANE_QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE=str(LIMIT),
        MEMPLANE_QUOTA__MAX_QUEUED_REQUESTS_PER_WORKSPACE=str(QUEUE),
    )
    key_a, key_b = await _seeded(server, admin_key)

    refused: list[QuotaExceededError] = []
    served = expired = 0
    stop = asyncio.Event()

    async def flood(client: AsyncMemplaneClient, seed: int) -> None:
        nonlocal served, expired
        local = random.Random(seed)
        while not stop.is_set():
            try:
                await client.search([_heavy_query(local) for _ in range(QUERIES)], top_k=TOP_K)
                served += 1
            except QuotaExceededError as error:
                refused.append(error)
                await asyncio.sleep(0.01)  # a caller's back-off before trying again, not a synchronisation
            except DeadlineExceededError:  # B's own heavy search ran past B's deadline: B's cost, not A's
                expired += 1

    latencies: list[float] = []
    flooders = [AsyncMemplaneClient(server.target, key_b, timeout=B_DEADLINE) for _ in range(FLOOD_CALLERS)]
    async with AsyncMemplaneClient(server.target, key_a, timeout=A_DEADLINE) as a:
        tasks = [asyncio.ensure_future(flood(c, i)) for i, c in enumerate(flooders)]
        try:
            for i in range(A_SEARCHES):
                started = time.perf_counter()
                reply = await a.search(f"harbour lantern note {i}", top_k=5)  # DeadlineExceededError fails the test
                latencies.append(time.perf_counter() - started)
                assert reply.hits
                assert all("quiet tenant" in h.memory.content for h in reply.hits)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()  # B's callers give up mid-call
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for client in flooders:
                await client.close()
        assert not [r for r in results if isinstance(r, Exception)], results
        p50, p99 = _percentiles(latencies)
        print(
            f"\nA under B's flood: {len(latencies)} searches, p50 {p50:.0f} ms, p99 {p99:.0f} ms; "
            f"B: {served} served, {expired} past their deadline, {len(refused)} refused"
        )
        assert refused, "the flooding workspace was never refused"
        assert {(e.quota_id, e.limit) for e in refused} == {("max_concurrent_requests", LIMIT)}
        assert all(e.subject == "workspace:noisy" for e in refused)
        after = await a.search("harbour lantern note 0", top_k=5)  # nothing still runs for B's gone callers
        assert after.hits
    async with AsyncMemplaneClient(server.target, key_b, timeout=A_DEADLINE) as b:
        # every slot of B's cancelled and expired calls was given back: LIMIT calls at once are admitted
        light = await asyncio.gather(*(b.search(f"anchor{i}", top_k=1) for i in range(LIMIT)))
        assert len(light) == LIMIT
