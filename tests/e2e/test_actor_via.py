"""The actor a write is recorded under: `key:<key id>`, or `console:<key id>` when the
call says it comes through the console (`memplane-via: console`); any other channel name
is ignored, and the key id is always the key's own."""

from __future__ import annotations

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace
from tests.support import mem


@pytest.mark.parametrize(("via", "prefix"), [("", "key"), ("console", "console"), ("admin", "key"), ("Console", "key")])
async def test_the_actor_names_the_channel_only_when_it_is_the_console(
    server: str, workspace: TestWorkspace, via: str, prefix: str
) -> None:
    async with AsyncMemplaneClient(server, workspace.key, via=via) as client:
        [stored] = await client.add_memories([mem("a note")])
        await client.update_memory(stored.id, memory_pb2.MemoryInput(content="a new note"), ["content"])
        events = await client.list_memory_events(stored.id)
    assert [e.actor for e in events] == [f"{prefix}:{workspace.key_id}"] * 2
