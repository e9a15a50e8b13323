"""Right to be forgotten: after DeleteMemoriesByScope no copy of the erased text is left
in the workspace's rows (memories, history, transcripts, idempotency records)."""

from __future__ import annotations

import pytest
from psycopg import sql

from memplane.errors import NotFoundError
from memplane.server.app import App
from memplane.v1 import compaction_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import list_all, mem, tool_output

SECRETS = ("confidential-diagnosis-xyz", "pin-code-4242")
ALICE = memory_pb2.Scope(user_id="alice", session_id="s-alice")


async def _erase_alice(workspace: TestWorkspace) -> None:
    client = workspace.client
    await client.add_memories([mem(f"Alice's {SECRETS[0]}", user_id="alice")], request_id="add-alice")
    await client.write_conversation(
        ALICE,
        [writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_USER, content=f"my {SECRETS[1]}")],
        request_id="conv-alice",
    )
    [kept] = await client.add_memories([mem("Bob's harmless note", user_id="bob")], request_id="add-bob")
    reply = await client.delete_memories_by_scope(memory_pb2.Scope(user_id="alice"))
    assert (reply.deleted_count, reply.deleted_message_count) == (2, 1)
    assert [m.id for m in await list_all(client)] == [kept.id]


async def _rows_mentioning_secrets(app: App, workspace: TestWorkspace, table: str, text: str) -> int:
    key = (await app.admin.get_workspace(workspace.name)).key
    like = sql.SQL("({}) LIKE {}")
    condition = sql.SQL(" OR ").join(like.format(sql.SQL(text), sql.Literal(f"%{s}%")) for s in SECRETS)
    async with app.db.admin() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) AS n FROM {} WHERE workspace_key = {} AND ({})").format(
                sql.Identifier(table), sql.Literal(key), condition
            )
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_erased_text_is_gone_from_memories_history_and_transcripts(app: App, workspace: TestWorkspace) -> None:
    await _erase_alice(workspace)
    for table, text in (
        ("memories", "content || name || description"),
        ("memory_events", "coalesce(before::text, '') || coalesce(after::text, '')"),
        ("transcript_messages", "content"),
    ):
        assert await _rows_mentioning_secrets(app, workspace, table, text) == 0, table


async def test_erased_text_is_gone_from_idempotency_records(app: App, workspace: TestWorkspace) -> None:
    await _erase_alice(workspace)
    assert await _rows_mentioning_secrets(app, workspace, "idempotency_keys", "result::text") == 0


async def test_erasing_a_scope_erases_its_stored_tool_outputs(workspace: TestWorkspace) -> None:
    client = workspace.client
    small = compaction_pb2.ToolResultLimits(recent_max_bytes=256)
    secret_output = tool_output("c1", f"patient record {SECRETS[0]}\n" * 100)
    alice = await client.compact_tool_results([secret_output], limits=small, scope=ALICE)
    bob = await client.compact_tool_results(
        [tool_output("c2", "bob's build log\n" * 100)], limits=small, scope=memory_pb2.Scope(user_id="bob")
    )
    alice_ref = alice.messages[0].content[0].tool_result.truncation.ref
    bob_ref = bob.messages[0].content[0].tool_result.truncation.ref
    assert SECRETS[0] in (await client.read_tool_result(alice_ref)).text
    await client.delete_memories_by_scope(memory_pb2.Scope(user_id="alice"))
    with pytest.raises(NotFoundError):
        await client.read_tool_result(alice_ref)
    assert (await client.read_tool_result(bob_ref)).text.startswith("bob's build log")
