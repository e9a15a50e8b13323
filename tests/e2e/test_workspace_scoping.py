"""Every SQL statement memplane sends that reads or writes a workspace's rows names its
workspace: `workspace_key` bound to a parameter, or a memplane_* function given the key
(issue 30, item 4). That property lets a placement map route each statement to the
database cluster holding its workspace, and a Citus cluster route it to one shard
(docs/explanation/scale-out.md).

How: every statement text the server process hands psycopg (`AsyncCursor.execute`,
`executemany`, `stream`, `copy`) is recorded while a workload calls every RPC of the four
services over real gRPC — the background jobs (sweeps, the extraction worker) run
meanwhile and are recorded too — and each statement that names a table with a
`workspace_key` column is checked. Cross-workspace statements are allowed only from
GLOBAL, each with why it is not one workspace's. The statements inside memplane's SQL
functions (migrations) take the workspace key as their first parameter
(`memplane_insert_memories(p_ws, ...)`); the call is what is checked here.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memplane.client import AsyncMemplaneClient
from memplane.server.app import VECTOR_INDEXER, App
from memplane.server.storage.vector_index import VectorIndexer
from memplane.v1 import admin_pb2, compaction_pb2, filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import mem, text_message, tool_call, tool_output

# Statements over several workspaces' rows, by a fragment of their text, and why.
GLOBAL: dict[str, str] = {
    "DELETE FROM idempotency_keys WHERE ctid IN": "the expiry sweep of request records (memplane.server.storage."
    "idempotency): maintenance over every workspace of the database it runs on, one sweep per database cluster",
    "FROM extraction_jobs WHERE status IN ('queued', 'running')": "the extraction worker's wake-up: when the next "
    "job of any workspace falls due (memplane.server.storage.jobs), so one worker per database serves them all",
    "SELECT DISTINCT workspace_key FROM memories WHERE NOT vector_indexed": "the vector indexer's scan for backlogs "
    "a stopped process left (memplane.server.storage.vector_index): which workspaces to visit, each then indexed "
    "in a transaction of its own; one scan per database cluster",
}
# The control plane's tables: a key is found by its id before its workspace is known (that
# is how the workspace becomes known), and an admin names workspaces and keys, not rows of
# one; `placements` says which database cluster holds each workspace, read before any of
# its rows. With placement they live on the control database (Citus: reference tables).
CONTROL_PLANE = {"workspaces", "api_keys", "placements"}

_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)", re.IGNORECASE)
_SCOPED = re.compile(r"\bworkspace_key\b|\bmemplane_[a-z_]+\s*\(\s*(?:%s|%\(\w+\)s|\$\d+)", re.IGNORECASE)


def _text(query: Any, conn: Any) -> str:
    if isinstance(query, sql.Composable):
        query = query.as_string(conn)
    if isinstance(query, bytes):
        query = query.decode()
    return " ".join(str(query).split())


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every statement psycopg is given while the test runs."""
    texts: list[str] = []
    for name in ("execute", "executemany", "stream", "copy"):
        original = getattr(psycopg.AsyncCursor, name)

        def recording(self: Any, query: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            texts.append(_text(query, self.connection))
            return __original(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncCursor, name, recording)
    return texts


async def _tenant_tables(pg_dsn: str) -> set[str]:
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        rows = await (
            await conn.execute(
                "SELECT DISTINCT c.table_name FROM information_schema.columns c"
                " JOIN pg_class k ON k.relname = c.table_name AND NOT k.relispartition"
                " WHERE c.table_schema = 'public' AND c.column_name = 'workspace_key'"
            )
        ).fetchall()
    return {str(r[0]) for r in rows} - CONTROL_PLANE


async def _every_rpc(ws: TestWorkspace, other: TestWorkspace, admin: AsyncMemplaneClient) -> None:
    """Call each RPC of the four services at least once, with the workspace's key (the
    admin's for the admin service)."""
    client = ws.client
    scope = memory_pb2.Scope(user_id="u1", session_id="s1")
    stored = await client.add_memories([mem("Maria adopted a dog named Pixel in May", user_id="u1")])
    await client.add_memories([mem(f"note {i} about the lake cabin", user_id="u1") for i in range(5)])
    for mode in (retrieval_pb2.SEARCH_MODE_HYBRID, retrieval_pb2.SEARCH_MODE_VECTOR, retrieval_pb2.SEARCH_MODE_LEXICAL):
        await client.search("what is the dog's name?", mode=mode, filter=filter_pb2.MemoryFilter(user_id="u1"))
    await client.search("what is the dog's name?", context_turns=2)
    await client.get_daily_usage()  # flushes this process's search counts of the workspace first
    await client.get_memory(stored[0].id)
    await client.list_memories()
    updated = await client.update_memory(
        stored[0].id, mem("Maria adopted a dog named Pixel in June", user_id="u1"), ["content"]
    )
    await client.list_memory_events(updated.id)
    await client.select_memory_files("dog")
    messages = [
        writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_USER, content="I moved to Lisbon last year"),
        writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_ASSISTANT, content="How do you like Lisbon?"),
    ]
    written = await client.write_conversation(scope, messages, extract=True, wait=True)
    if written.extraction_job.id:
        await client.get_extraction_job(written.extraction_job.id)
    await client.list_extraction_jobs()
    await client.get_transcript("s1")
    context = [
        text_message("user", "please read the log", id="m1"),
        tool_call("call-1", "read_log", '{"path": "/var/log/app.log"}', id="m2"),
        tool_output("call-1", "line of the log\n" * 800, tool="read_log", id="m3"),
        text_message("user", "what failed?", id="m4"),
    ]
    await client.check_context(context)
    compacted = await client.compact_tool_results(
        context, scope=scope, limits=compaction_pb2.ToolResultLimits(recent_max_bytes=1000)
    )
    refs = [b.tool_result.truncation.ref for m in compacted.messages for b in m.content if b.HasField("tool_result")]
    assert any(refs), "no tool output was stored"
    for ref in filter(None, refs):
        await client.read_tool_result(ref)
    await client.compact_messages(context, scope=scope)
    await client.prepare_context(context, scope=scope, write_memories=True)
    await client.summarize_session(scope, context)
    await client.delete_memory(stored[0].id)
    await client.delete_memories_by_scope(memory_pb2.Scope(user_id="u1"))
    await admin.get_workspace(ws.name)
    await admin.update_workspace(
        admin_pb2.Workspace(name=ws.name, quotas=admin_pb2.WorkspaceQuotas(max_memories=1000)), ["quotas.max_memories"]
    )
    await admin.list_workspaces()
    key = await admin.create_api_key(ws.name)
    await admin.list_api_keys(ws.name)
    await admin.revoke_api_key(key.key_id)
    await admin.get_workspace_usage(ws.name)
    await admin.delete_workspace(other.name)


async def test_every_statement_names_its_workspace(
    recorded: list[str],
    app: App,
    workspace_factory: WorkspaceFactory,
    admin_client: AsyncMemplaneClient,
    pg_dsn: str,
) -> None:
    ws = await workspace_factory()
    other = await workspace_factory()
    await other.client.add_memories([mem("a memory of another workspace")])
    await _every_rpc(ws, other, admin_client)
    indexer = app.jobs[VECTOR_INDEXER]
    assert isinstance(indexer, VectorIndexer)
    await indexer.run_once()  # its scan for backlogs, which the test servers run only at start
    assert any(t.startswith("SELECT DISTINCT workspace_key FROM memories") for t in recorded), "no scan recorded"
    tenant_tables = await _tenant_tables(pg_dsn)
    assert {"memories", "memory_events", "lexeme_df", "idempotency_keys", "transcript_messages"} <= tenant_tables
    touching = [t for t in dict.fromkeys(recorded) if {m.lower() for m in _TABLE.findall(t)} & tenant_tables]
    reached = {m.lower() for t in touching for m in _TABLE.findall(t)} & tenant_tables
    # The workload reaches the rows of every tenant table but the job queue's notifications.
    assert len(touching) >= 40, f"the workload reached only {len(touching)} statements"
    assert tenant_tables - reached <= {"workspace_counters"}, f"no statement reached {tenant_tables - reached}"
    unscoped = [t for t in touching if not _SCOPED.search(t) and not any(fragment in t for fragment in GLOBAL)]
    assert not unscoped, "statements over workspace rows that name no workspace:\n" + "\n\n".join(unscoped)
