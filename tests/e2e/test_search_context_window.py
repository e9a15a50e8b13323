"""The context window of SearchMemoriesRequest.context_turns over real gRPC when two users
write to one session id (a transcript is keyed by session id): a user's window holds that
user's own nearest turns, and its offsets count only them (from a QA pass: the other
user's turns in between took the window's places, so a user's own next turn was missing,
and the offsets told how many turns the other wrote)."""

from __future__ import annotations

from memplane.v1 import filter_pb2, memory_pb2
from tests.e2e.test_search_terms import MAY, message
from tests.fix_server import TestWorkspace


async def test_a_users_window_counts_only_that_users_turns_in_a_shared_session(workspace: TestWorkspace) -> None:
    ann = memory_pb2.Scope(user_id="ann", session_id="shared")
    carl = memory_pb2.Scope(user_id="carl", session_id="shared")
    write = workspace.client.write_conversation
    await write(
        ann,
        [
            message(f"A:{i}", "Ann", text, MAY)
            for i, text in enumerate(("hello", "I paint", "I bake sourdough bread"), 1)
        ],
    )
    await write(carl, [message(f"C:{i}", "Carl", f"carl's secret number {i}", MAY) for i in range(1, 4)])
    await write(ann, [message("A:4", "Ann", "and I swim on Sundays", MAY)])
    reply = await workspace.client.search(
        "sourdough bread", top_k=1, context_turns=1, filter=filter_pb2.MemoryFilter(user_id="ann")
    )
    hit = reply.hits[0]
    assert hit.memory.metadata.fields["message_id"].string_value == "A:3"
    assert [(c.offset, c.message_id) for c in hit.context] == [(-1, "A:2"), (1, "A:4")]
    wider = await workspace.client.search(
        "sourdough bread", top_k=1, context_turns=10, filter=filter_pb2.MemoryFilter(user_id="ann")
    )
    assert [(c.offset, c.message_id) for c in wider.hits[0].context] == [(-2, "A:1"), (-1, "A:2"), (1, "A:4")]
