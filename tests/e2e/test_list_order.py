"""ListMemories' order (issue 29, the console's browse view sorted): newest first by
default, oldest first on request, both by (create_time, id) through the server's keyset
pages; a page token belongs to its order, and an unknown order is refused naming it."""

from __future__ import annotations

import pytest

from memplane.errors import InvalidArgumentError
from memplane.v1 import retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import fields, mem

OLDEST = retrieval_pb2.MEMORY_ORDER_OLDEST_FIRST
NEWEST = retrieval_pb2.MEMORY_ORDER_NEWEST_FIRST


async def _pages(workspace: TestWorkspace, order: int, page_size: int) -> list[str]:
    ids: list[str] = []
    token = ""
    while True:
        page = await workspace.client.list_memories(page_size=page_size, page_token=token, order=order)
        assert page.total_size == 7
        ids += [m.id for m in page.memories]
        token = page.next_page_token
        if not token:
            return ids


async def test_oldest_first_is_newest_first_reversed_across_pages(workspace: TestWorkspace) -> None:
    added = [(await workspace.client.add_memories([mem(f"note {i}")]))[0].id for i in range(4)]
    added += [
        m.id for m in await workspace.client.add_memories([mem(f"batch {i}") for i in range(3)])
    ]  # one create_time
    newest = await _pages(workspace, retrieval_pb2.MEMORY_ORDER_UNSPECIFIED, 3)
    assert await _pages(workspace, NEWEST, 2) == newest
    oldest = await _pages(workspace, OLDEST, 2)
    assert oldest == newest[::-1]
    assert oldest[:4] == added[:4]  # the four single adds, in the order they were made
    assert sorted(oldest[4:]) == sorted(added[4:])


async def test_a_page_token_of_another_order_and_an_unknown_order_are_refused(workspace: TestWorkspace) -> None:
    await workspace.client.add_memories([mem(f"note {i}") for i in range(3)])
    newest_token = (await workspace.client.list_memories(page_size=1)).next_page_token
    oldest_token = (await workspace.client.list_memories(page_size=1, order=OLDEST)).next_page_token
    for token, order in ((newest_token, OLDEST), (oldest_token, NEWEST)):
        with pytest.raises(InvalidArgumentError) as caught:
            await workspace.client.list_memories(page_size=1, page_token=token, order=order)
        assert fields(caught.value) == ["page_token"]
        assert "order" in caught.value.violations[0].description
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.list_memories(order=7)
    assert fields(caught.value) == ["order"]
