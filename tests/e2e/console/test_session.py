"""The session view in the browser: the transcript with its compacted messages marked,
the session's memories, and "what the agent will see" at a small context window (a
preview that records nothing)."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import expect

from memplane.v1 import compaction_pb2, memory_pb2, writeback_pb2
from tests.e2e.console.conftest import Console, Tab, sign_in
from tests.fix_server import TestWorkspace

pytestmark = pytest.mark.e2e

SESSION = "s-garden"
ROLES = (memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT)


def turn(i: int) -> str:
    return f"Turn {i}: we planned the vegetable garden, row {i} gets tomatoes, basil and a drip line on a timer."


async def test_transcript_and_what_the_agent_will_see(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    scope = memory_pb2.Scope(user_id="gina", session_id=SESSION)
    await workspace.client.write_conversation(
        scope,
        [writeback_pb2.ConversationMessage(id=f"m{i}", role=ROLES[i % 2], content=turn(i)) for i in range(30)],
    )
    first = [
        compaction_pb2.ContextMessage(
            id=f"m{i}",
            role=ROLES[i % 2],
            content=[compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=turn(i)))],
        )
        for i in range(10)
    ]
    result = await workspace.client.compact_messages(first, scope=memory_pb2.Scope(session_id=SESSION))
    assert result.compacted, result.failure

    page = tab.page
    await sign_in(tab, console, workspace)
    await page.get_by_role("link", name="Sessions").click()
    await page.get_by_label("session id").fill(SESSION)
    await page.get_by_role("button", name="Open").click()
    await expect(page.locator(".view-session h1")).to_have_text(f"Session {SESSION}")
    messages = page.locator(".view-session .columns > div").first.locator("li.message")
    await expect(messages).to_have_count(30)
    await expect(messages.locator(".badge", has_text="compacted")).to_have_count(10)
    await expect(messages.nth(29)).to_contain_text(turn(29))
    await expect(page.locator(".session-memories li")).to_have_count(30)  # one episodic memory per turn

    await page.get_by_label("context window (tokens)").fill("1000")
    await page.get_by_role("button", name="Preview").click()
    facts = page.locator(".preview-facts")
    await expect(facts).to_contain_text("30 messages")
    await expect(facts).to_contain_text("were summarised (extractive)")
    await expect(page.locator("pre.summary")).not_to_be_empty()
    await tab.shot("session")
    # The playground narrowed to the session, with the turns around each hit.
    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("query", exact=True).fill("row 12 tomatoes")
    await page.get_by_label("session", exact=True).fill(SESSION)
    await page.locator(".view-search select[name=type]").select_option("episodic")
    await page.get_by_label("context turns").fill("1")
    await page.get_by_role("button", name="Search").click()
    first = page.locator("article.hit").first
    await expect(first.locator(".content")).to_have_text(turn(12))
    await expect(first.locator(".context li")).to_have_count(2)  # the turn before and the one after
    await expect(first.locator(".context")).to_contain_text(turn(11))
    # The preview recorded nothing: still exactly the 10 compacted by the agent.
    transcript = await workspace.client.get_transcript(SESSION, page_size=100)
    assert sum(t.compacted for t in transcript.messages) == 10


async def test_preview_of_a_transcript_written_without_message_ids(console: Console, workspace: TestWorkspace) -> None:
    """Messages written without client ids carry server-assigned ids ("#<seq>"), which
    PrepareContext refuses from a client: the preview sends them without an id."""
    session = "s-no-ids"
    scope = memory_pb2.Scope(user_id="gina", session_id=session)
    said = [writeback_pb2.ConversationMessage(role=ROLES[i % 2], content=turn(i)) for i in range(4)]
    await workspace.client.write_conversation(scope, said)
    transcript = await workspace.client.get_transcript(session, page_size=100)
    assert [t.message.id[:1] for t in transcript.messages] == ["#"] * 4
    origin = console.url.split("/memplane/")[0]
    async with httpx.AsyncClient(base_url=console.url, headers={"origin": origin}) as http:
        signed = await http.post("api/session", json={"api_key": workspace.key})
        assert signed.status_code == 200, signed.text
        reply = await http.post(
            "api/session/preview",
            params={"session_id": session},
            json={"max_input_tokens": 0},
            headers={"x-csrf-token": signed.json()["csrf_token"]},
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["previewed_message_count"] == 4
    assert turn(3) in str(reply.json()["messages"])
