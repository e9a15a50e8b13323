"""The mem0 facade's add() against a server whose `limits.max_batch_size` is lower than
the facade's first guess (256, the server's default): the first batch is refused with a
BadRequest violation naming the limit, the facade sends batches of that size from then
on, and every message is stored in order — for infer=False (AddMemories) and for
infer=True of a conversation (WriteConversation). Before, every add() of more messages
than the server's limit failed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.compat.mem0 import AsyncMemory, ValidationError
from memplane.server.app import build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.settings import LimitsSettings
from memplane.v1 import filter_pb2
from tests.fix_server import TestWorkspace, settings_for
from tests.support import list_all

pytestmark = pytest.mark.timeout(600)

LIMIT = 8


@pytest.fixture(scope="module")
async def small_batch_server(
    pg_dsn: str, embedder: CachedEmbedder, admin_key: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """Target of a server over the session database whose writes take at most LIMIT items."""
    settings = settings_for(tmp_path_factory.mktemp("memplane-small-batch"), pg_dsn, admin_key).model_copy(
        update={"limits": LimitsSettings(max_batch_size=LIMIT)}
    )
    app = await build_app(settings, embedder=embedder)
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
    try:
        yield f"127.0.0.1:{running.port}"
    finally:
        await running.stop(0)
        await app.close()


@pytest.fixture
async def memory(small_batch_server: str, workspace: TestWorkspace) -> AsyncIterator[AsyncMemory]:
    """The facade over the small-batch server, holding the test workspace's key."""
    async with AsyncMemory(client=AsyncMemplaneClient(small_batch_server, workspace.key, timeout=120.0)) as facade:
        yield facade


async def test_infer_false_learns_the_servers_limit_and_stores_every_message(memory: AsyncMemory) -> None:
    texts = [f"Shipment {i} left the Rotterdam depot" for i in range(3 * LIMIT + 3)]
    added = await memory.add([{"role": "user", "content": t} for t in texts], user_id="ops", infer=False)
    assert [row["memory"] for row in added["results"]] == texts  # in order, none dropped
    assert {row["event"] for row in added["results"]} == {"ADD"}
    stored = await list_all(memory.client, filter_pb2.MemoryFilter(user_id="ops"))
    assert sorted(m.content for m in stored) == sorted(texts)
    again = await memory.add([{"role": "user", "content": t} for t in texts], user_id="ops", infer=False)
    assert [row["id"] for row in again["results"]] == [row["id"] for row in added["results"]]
    assert {row["event"] for row in again["results"]} == {"NONE"}  # nothing stored twice


async def test_infer_true_of_a_conversation_learns_the_limit_too(memory: AsyncMemory) -> None:
    hobbies = [f"I like hobby number {i}." for i in range(LIMIT + 2)]
    conversation: list[dict[str, Any]] = []
    for said in hobbies:
        conversation += [{"role": "user", "content": said}, {"role": "assistant", "content": "ok"}]
    added = await memory.add(conversation, user_id="kim")  # 2 * (LIMIT + 2) messages, over the limit
    assert sorted(row["memory"] for row in added["results"]) == sorted(hobbies)
    stored = await list_all(memory.client, filter_pb2.MemoryFilter(user_id="kim"))
    assert sorted(m.content for m in stored) == sorted(hobbies)  # the statements, never "ok"


async def test_a_refusal_for_another_reason_is_raised_as_before(memory: AsyncMemory) -> None:
    """Only the batch's own size is learned from: content over the size limit is the
    caller's to fix, raised as mem0's ValidationError."""
    huge = "x" * (LimitsSettings().max_content_bytes + 1)
    with pytest.raises(ValidationError, match="content"):
        await memory.add([{"role": "user", "content": huge}], user_id="ops", infer=False)
