"""What keeps two-way sync passes apart and what they report (issue 13, item 3), over real
gRPC against the session server: two passes on one sandbox never interleave (the sandbox's
sync lock), a pass waits for the holder and names it when it waits too long, a lock left
by a pass that died is broken; and a file left as it is becomes an OpenTelemetry event
on the pass's span beside its line in ``.memplane-errors.md``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memplane.client import AsyncMemplaneClient
from memplane.filesync import sync_once
from memplane.filesync.convert import memory_from_proto
from memplane.filesync.lock import LOCK_DIR, OWNER_FILE, SyncLockedError, sync_lock
from memplane.filesync.state import ERRORS_FILE
from memplane.filesync.sync import PROBLEM_EVENT
from memplane.mdview.names import file_name
from memplane.sandbox import LocalSandboxes
from memplane.text.tokens import DEFAULT_ENCODING, token_counter
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace

COUNT = token_counter(DEFAULT_ENCODING).count_text


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans of this process, kept in memory (the global provider, shared with any other
    test that installed one; the exporter stops taking spans at the end)."""
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


async def _memory_file(workspace: TestWorkspace, tmp_path: Path) -> tuple[memory_pb2.Memory, LocalSandboxes, Path]:
    """A memory, a sandbox synced once, and the memory's file in it."""
    [tea] = await workspace.client.add_memories([memory_pb2.MemoryInput(content="Alice likes green tea", name="Tea")])
    backend = LocalSandboxes(tmp_path / "sandboxes")
    handle = await backend.ensure(workspace.name)
    await sync_once(workspace.client, backend, handle, count_tokens=COUNT)
    return tea, backend, Path(handle.root) / "Memory" / file_name(memory_from_proto(tea))


async def test_two_concurrent_passes_do_not_interleave(server: str, workspace: TestWorkspace, tmp_path: Path) -> None:
    """Two passes, each with its own client and backend as two processes would have, on
    an edited file: without the lock both read the edit and both write it, and the second
    write's version conflict is stored as a spurious conflict copy."""
    tea, _, path = await _memory_file(workspace, tmp_path)
    path.write_text(path.read_text().replace("green tea", "smoked lapsang souchong"))
    async with (
        AsyncMemplaneClient(server, workspace.key) as one,
        AsyncMemplaneClient(server, workspace.key) as two,
    ):
        passes = []
        for client in (one, two):
            backend = LocalSandboxes(tmp_path / "sandboxes")
            passes.append(sync_once(client, backend, await backend.ensure(workspace.name), count_tokens=COUNT))
        reports = await asyncio.gather(*passes)
    assert sorted(len(r.updated) for r in reports) == [0, 1]  # one took the edit in, the other saw it done
    assert [r.conflicts for r in reports] == [[], []]
    (only,) = (await workspace.client.list_memories()).memories
    assert (only.id, only.content, only.version) == (tea.id, "Alice likes smoked lapsang souchong", 2)
    assert not (path.parent / ".memplane-sync.lock").exists()  # released


async def test_a_pass_waits_for_the_holder_and_names_it_when_it_waits_too_long(
    workspace: TestWorkspace, tmp_path: Path
) -> None:
    _, backend, _ = await _memory_file(workspace, tmp_path)
    handle = await backend.ensure(workspace.name)
    async with sync_lock(backend, handle) as holder:
        with pytest.raises(SyncLockedError, match=rf"another sync pass holds the sandbox \(pid {holder.pid} on "):
            await sync_once(workspace.client, backend, handle, count_tokens=COUNT, lock_wait_seconds=0.5)
        waiting = asyncio.create_task(sync_once(workspace.client, backend, handle, count_tokens=COUNT))
    report = await waiting  # started while the lock was held: it ran once the block released it
    assert not report.problems


async def test_a_lock_left_by_a_pass_that_died_is_broken(workspace: TestWorkspace, tmp_path: Path) -> None:
    _, backend, _ = await _memory_file(workspace, tmp_path)
    handle = await backend.ensure(workspace.name)
    root = Path(handle.root)
    (root / LOCK_DIR).mkdir()
    (root / OWNER_FILE).write_text(f"deadbeef {time.time() - 3600:.3f} gone-host 4242\n")  # an hour old
    await sync_once(workspace.client, backend, handle, count_tokens=COUNT, lock_wait_seconds=5.0)
    (root / LOCK_DIR).mkdir()  # made, and its maker died before naming itself
    await sync_once(workspace.client, backend, handle, count_tokens=COUNT, lock_wait_seconds=5.0)
    assert not (root / LOCK_DIR).exists()
    assert [p.name for p in (root / "Memory").iterdir() if "lock" in p.name] == []  # nothing set aside is left


async def test_a_file_left_as_it_is_is_an_event_on_the_pass_s_span(
    spans: InMemorySpanExporter, workspace: TestWorkspace, tmp_path: Path
) -> None:
    _, backend, path = await _memory_file(workspace, tmp_path)
    path.write_text("the frontmatter was cut away\n")
    spans.clear()
    report = await sync_once(workspace.client, backend, await backend.ensure(workspace.name), count_tokens=COUNT)
    relative = f"Memory/{path.name}"
    assert list(report.problems) == [relative]
    [span] = [s for s in spans.get_finished_spans() if s.name == "memplane.file_sync"]
    [event] = [e for e in span.events if e.name == PROBLEM_EVENT]
    assert event.attributes is not None
    assert event.attributes["memplane.file.path"] == relative
    assert event.attributes["memplane.file.problem"] == report.problems[relative]
    assert span.attributes is not None
    assert span.attributes["memplane.file_sync.problems"] == 1
    assert relative in (path.parent.parent / ERRORS_FILE).read_text()
