"""Export a workspace to JSONL and import it into another, over the client SDK (the
format: `memplane.client.export_format`).

Export lists every memory of the key's workspace (superseded and expired-but-not-erased
ones included; oldest first) and, with *history*, each one's events. Each page is read
at its own moment: stop writers for an exact copy.

Import is all-or-nothing per file: every line is checked before anything is sent; the
memories go in AddMemories batches (each atomic on the server); if the server refuses a
batch (its limits, a quota), the memories of the batches before it are deleted again and
the error names the line. Only a client killed mid-import leaves whole batches behind.
History lines are checked, not replayed: the new memories' history starts with the
import's ADD events.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from memplane.client.aio import AsyncMemplaneClient
from memplane.client.export_format import (
    ImportLineError,
    end_line,
    event_line,
    header_line,
    memory_input,
    memory_line,
    parse_export,
)
from memplane.errors import InvalidArgumentError, MemplaneError
from memplane.v1 import filter_pb2, memory_pb2

EXPORT_PAGE_SIZE = 500  # memories per ListMemories call
IMPORT_BATCH_SIZE = 100  # memories per AddMemories call (the server's default limit is 256)
_ROLLBACK_CONCURRENCY = 8  # DeleteMemory calls in flight while undoing a refused import
_BATCH_FIELD = re.compile(r"^memories\[(\d+)\]\.?(.*)$")


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: memory and event lines."""

    memory_count: int
    event_count: int


@dataclass(frozen=True)
class ImportSummary:
    """What an import stored: *id_map* maps each exported id to its new id (memories
    exported without an id are absent); *skipped_event_count* history lines were read
    and not replayed."""

    memory_count: int
    skipped_event_count: int
    id_map: dict[str, str]


async def list_all_memories(client: AsyncMemplaneClient, page_size: int = EXPORT_PAGE_SIZE) -> list[memory_pb2.Memory]:
    """Every memory of the key's workspace, superseded and expired-not-erased included,
    oldest first (one ListMemories call per *page_size* memories)."""
    flt = filter_pb2.MemoryFilter(include_superseded=True, include_expired=True)
    memories: list[memory_pb2.Memory] = []
    token = ""
    while True:
        page = await client.list_memories(filter=flt, page_size=page_size, page_token=token)
        memories += page.memories
        token = page.next_page_token
        if not token:
            return memories[::-1]  # pages are newest first


async def export_workspace(
    client: AsyncMemplaneClient, out: TextIO, *, history: bool = False, page_size: int = EXPORT_PAGE_SIZE
) -> ExportSummary:
    """Write the key's workspace to *out* as JSONL (header, memories, with *history*
    each memory's events after it, end line). Raises what the RPCs raise (e.g.
    `UnauthenticatedError`); *out* then holds no end line, so importing it is refused."""
    out.write(header_line(history=history))
    events = 0
    memories = await list_all_memories(client, page_size)
    for memory in memories:
        out.write(memory_line(memory))
        if history:
            for event in await client.list_memory_events(memory.id):
                out.write(event_line(event))
                events += 1
    out.write(end_line(len(memories), events))
    return ExportSummary(len(memories), events)


def _line_error(error: InvalidArgumentError, batch: list[tuple[int, memory_pb2.Memory]]) -> MemplaneError:
    """The server's violation of ``memories[i].field`` of *batch* as the line's error."""
    for violation in error.violations:
        match = _BATCH_FIELD.match(violation.field)
        if match and int(match.group(1)) < len(batch):
            name = match.group(2) or "(memory)"
            return ImportLineError(batch[int(match.group(1))][0], f"memory.{name}", violation.description)
    return error


async def _roll_back(client: AsyncMemplaneClient, ids: list[str], cause: MemplaneError) -> None:
    """Delete the memories *ids* stored by the batches before the refused one; raises
    `MemplaneError` saying how many are left (with *cause*) when some deletes fail."""
    limit = asyncio.Semaphore(_ROLLBACK_CONCURRENCY)

    async def delete(memory_id: str) -> None:
        async with limit:
            await client.delete_memory(memory_id)

    results = await asyncio.gather(*(delete(i) for i in ids), return_exceptions=True)
    left = sum(1 for r in results if isinstance(r, BaseException))
    if left:
        raise MemplaneError(
            f"{cause}; the import was refused and {left} of the {len(ids)} memories stored before it "
            "could not be deleted again"
        ) from cause


async def import_workspace(
    client: AsyncMemplaneClient, lines: Iterable[str], *, batch_size: int = IMPORT_BATCH_SIZE
) -> ImportSummary:
    """Store the memories of an export file (its lines) in the key's workspace. Raises
    `ImportLineError` naming the line and field (nothing stored) for a malformed line or
    one the server refuses; other errors of AddMemories (e.g. `QuotaExceededError`) as
    they are, after the earlier batches were deleted again. Ids, versions and create and
    update times are the server's new ones; every other field is stored as exported
    (an unset expire_time gets the target workspace's retention, as any new memory)."""
    parsed = parse_export(lines)
    stored: list[str] = []
    id_map: dict[str, str] = {}
    for start in range(0, len(parsed.memories), batch_size):
        batch = parsed.memories[start : start + batch_size]
        try:
            added = await client.add_memories([memory_input(m) for _, m in batch])
        except MemplaneError as error:
            refused = _line_error(error, batch) if isinstance(error, InvalidArgumentError) else error
            await _roll_back(client, stored, refused)
            raise refused from None
        stored += [m.id for m in added]
        id_map.update({old.id: new.id for (_, old), new in zip(batch, added, strict=True) if old.id})
    return ImportSummary(len(stored), len(parsed.events), id_map)
