"""The blocking `MemplaneClient` wraps the async one on its own loop thread; run here in
a worker thread so that the test's event loop (which also runs the server) stays free."""

from __future__ import annotations

import asyncio

import pytest

from memplane.client import MemplaneClient
from memplane.errors import InvalidArgumentError, NotFoundError
from memplane.v1 import retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import fields, mem


def _session(target: str, key: str) -> tuple[str, list[str], str]:
    with MemplaneClient(target, key) as client:
        [stored] = client.add_memories([mem("Keeps bees on the roof")])
        reply = client.search("bees", mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
        with pytest.raises(InvalidArgumentError) as caught:
            client.search("bees", top_k=500)
        with pytest.raises(NotFoundError):
            client.get_memory("00000000-0000-4000-8000-000000000000")
        return stored.id, [h.memory.id for h in reply.hits], fields(caught.value)[0]


async def test_sync_client_round_trip(server: str, workspace: TestWorkspace) -> None:
    stored_id, hit_ids, bad_field = await asyncio.to_thread(_session, server, workspace.key)
    assert hit_ids == [stored_id]
    assert bad_field == "top_k"
    assert (await workspace.client.get_memory(stored_id)).content == "Keeps bees on the roof"
