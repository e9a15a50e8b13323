"""Export of a scope as JSON lines, streamed: the format of `memplane export jsonl`
(`memplane.client.export_format`: a header, one line per memory, with history each
memory's events after it, an end line with the counts), read one ListMemories page at a
time so a large workspace never sits in the console's memory."""

from __future__ import annotations

from collections.abc import AsyncIterator

from memplane.client import AsyncMemplaneClient
from memplane.client.export_format import end_line, event_line, header_line, memory_line
from memplane.v1 import filter_pb2

PAGE_SIZE = 500  # memories per ListMemories call


async def export_lines(
    client: AsyncMemplaneClient, memory_filter: filter_pb2.MemoryFilter, *, history: bool = False
) -> AsyncIterator[str]:
    """The lines of the export of the memories *memory_filter* matches (its scope, types,
    creation range, metadata; superseded and expired ones always included), newest first.
    The first line is the header, yielded after the first page was read, so a refused
    key or a bad filter fails before anything is sent. Raises what ListMemories raises."""
    flt = filter_pb2.MemoryFilter()
    flt.CopyFrom(memory_filter)
    flt.include_superseded = flt.include_expired = True
    page = await client.list_memories(filter=flt, page_size=PAGE_SIZE)
    yield header_line(history=history)
    memories = events = 0
    while True:
        for memory in page.memories:
            yield memory_line(memory)
            memories += 1
            if history:
                for event in await client.list_memory_events(memory.id):
                    yield event_line(event)
                    events += 1
        if not page.next_page_token:
            break
        page = await client.list_memories(filter=flt, page_size=PAGE_SIZE, page_token=page.next_page_token)
    yield end_line(memories, events)


async def prepend(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    """*first*, then the lines of *rest*."""
    yield first
    async for line in rest:
        yield line
