"""A person's tasks in the console, in real headless Chromium against a real `memplane
console` and gRPC server: sign in, browse, search and read the explanation, open a
memory, edit it through a version conflict, delete it, erase a scope after its preview,
sign out. Screenshots of each view go to build/console-screenshots/."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2
from playwright.async_api import expect

from memplane.errors import NotFoundError
from memplane.v1 import memory_pb2
from tests.e2e.console.conftest import Console, Tab, sign_in
from tests.fix_server import TestWorkspace
from tests.support import mem

pytestmark = pytest.mark.e2e

NOTES = [
    mem(
        "Alice drinks green tea every morning",
        user_id="alice",
        type=memory_pb2.MEMORY_TYPE_USER,
        metadata={"mood": "calm"},
    ),
    mem("Alice is allergic to peanuts", user_id="alice", type=memory_pb2.MEMORY_TYPE_USER),
    mem("Bob prefers short answers in bullet points", user_id="bob", type=memory_pb2.MEMORY_TYPE_FEEDBACK),
    mem("Run the migrations before deploying the chart", agent_id="ops", type=memory_pb2.MEMORY_TYPE_PROCEDURAL),
]


async def test_sign_in_browse_search_and_sign_out(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(NOTES)
    page = tab.page
    await page.goto(console.url)
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await tab.shot("sign-in")
    await page.get_by_label("API key").fill("mp_wrong_" + "x" * 43)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_contain_text("unknown or revoked API key")

    await sign_in(tab, console, workspace)
    assert page.url.endswith("/memplane/#/memories")
    await expect(page.locator(".who")).to_have_text(f"key {workspace.key_id}")
    await expect(page.locator(".count")).to_have_text("4 memories")
    await expect(page.locator("table.memories tbody tr")).to_have_count(4)
    await tab.shot("browse")

    await page.get_by_label("user", exact=True).fill("alice")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator(".count")).to_have_text("2 memories")
    await page.get_by_label("user", exact=True).fill("")
    await page.get_by_label("metadata").fill("mood=calm")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("table.memories tbody tr")).to_have_count(1)
    await expect(page.locator("table.memories")).to_contain_text("Alice drinks green tea")
    await page.get_by_label("metadata").fill("")
    await page.get_by_label("created before").fill("2001-01-01")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator(".state-empty")).to_have_text("No memories match these filters.")
    await page.get_by_label("created before").fill("")
    await page.get_by_label("metadata").fill("no equals sign")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_role("alert")).to_contain_text("metadata: write key=value")
    await page.get_by_label("metadata").fill("")

    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("query", exact=True).fill("what does Alice drink?")
    await page.get_by_role("button", name="Search").click()
    first = page.locator("article.hit").first
    await expect(first.locator(".content")).to_have_text("Alice drinks green tea every morning")
    await expect(first.locator(".score")).to_contain_text("fused score")
    await expect(first.locator("table.explain")).to_contain_text("vector")
    await expect(first.locator("table.explain")).to_contain_text("lexical")
    await expect(first.locator("table.explain")).to_contain_text("#1")
    await expect(page.locator(".timing")).to_contain_text(" ms (embedding ")
    await tab.shot("search")

    await first.get_by_role("link", name="open").click()
    await expect(page.locator(".view-detail .content")).to_have_text("Alice drinks green tea every morning")
    await expect(page.locator(".history .event-add")).to_contain_text(f"ADD by key:{workspace.key_id}")

    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert not [c for c in await tab.context.cookies() if c["name"] == "memplane_console"]
    await page.goto(console.url + "#/memories")  # signed out: the page asks for the key again
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


async def test_edit_with_a_version_conflict_then_delete(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    [stored] = await workspace.client.add_memories([mem("The user lives in Paris", user_id="carol")])
    page = tab.page
    await sign_in(tab, console, workspace)
    await page.goto(f"{console.url}#/memory/{stored.id}")
    editor = page.locator("textarea[name=content]")
    await expect(editor).to_have_value("The user lives in Paris")

    # Someone else changes it while the page shows version 1.
    await workspace.client.update_memory(
        stored.id, memory_pb2.MemoryInput(content="The user lives in Lyon"), ["content"], expected_version=1
    )
    await editor.fill("The user lives in Berlin")
    await page.get_by_role("button", name="Save").click()
    conflict = page.locator(".conflict")
    await expect(conflict).to_contain_text("stored version 2, yours 1")
    await expect(conflict).to_contain_text("Your edit was not saved")
    await tab.shot("edit-conflict")
    assert (await workspace.client.get_memory(stored.id)).content == "The user lives in Lyon"

    await conflict.get_by_role("button", name="Reload the stored version").click()
    await expect(editor).to_have_value("The user lives in Lyon")
    await editor.fill("The user lives in Berlin since 2024")
    await page.get_by_role("button", name="Save").click()
    await expect(page.locator(".state-ok")).to_have_text("Saved.")
    now = await workspace.client.get_memory(stored.id)
    assert (now.content, now.version) == ("The user lives in Berlin since 2024", 3)

    # The history: each change as a diff, the console's edit under console:<key id>.
    events = page.locator(".history .event-update")
    await expect(events).to_have_count(2)
    console_edit = events.nth(1)
    await expect(console_edit).to_contain_text(f"UPDATE by console:{workspace.key_id}")
    await expect(console_edit.locator("del")).to_have_text(["Lyon"])
    await expect(console_edit.locator("ins")).to_contain_text(["Berlin"])
    await tab.shot("detail-history")

    await page.get_by_role("button", name="Delete…").click()
    await page.get_by_role("button", name="Really delete").click()
    await expect(page.locator(".state-ok")).to_contain_text(f"Deleted memory {stored.id}")
    with pytest.raises(NotFoundError):
        await workspace.client.get_memory(stored.id)
    await expect(page.locator(".state-error")).to_contain_text("deleted at ")
    await expect(page.locator(".state-error")).to_contain_text(f"by console:{workspace.key_id}")
    await page.reload()  # the same URL, read again: gone, with its history and a way back
    await expect(page.get_by_role("alert")).to_contain_text("This memory was deleted")
    await tab.shot("deleted")
    await page.get_by_role("button", name="Restore it").click()
    await expect(page).not_to_have_url(re.compile(stored.id))
    await expect(page.locator(".view-detail p.content")).to_have_text("The user lives in Berlin since 2024")
    restored_id = page.url.rsplit("/", 1)[1]
    assert restored_id != stored.id
    restored = await workspace.client.get_memory(restored_id)
    assert (restored.content, restored.scope.user_id) == ("The user lives in Berlin since 2024", "carol")
    await expect(page.locator(".history .event-add")).to_contain_text(f"ADD by console:{workspace.key_id}")


async def test_export_a_scope_as_json_lines(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(NOTES)
    page = tab.page
    await sign_in(tab, console, workspace)
    await page.get_by_label("user", exact=True).fill("alice")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator(".count")).to_have_text("2 memories")
    async with page.expect_download() as started:
        await page.get_by_role("link", name="Export (JSON lines)").click()
    download = await started.value
    assert download.suggested_filename == "memplane-export.jsonl"
    text = await asyncio.to_thread(Path(await download.path()).read_text)
    lines = [json.loads(line) for line in text.splitlines()]
    contents = sorted(line["memory"]["content"] for line in lines if "memory" in line)
    assert contents == ["Alice drinks green tea every morning", "Alice is allergic to peanuts"]
    assert len(lines) == 4  # header, two memories, end

    await page.get_by_label("with history").check()
    async with page.expect_download() as started:
        await page.get_by_role("link", name="Export (JSON lines)").click()
    text = await asyncio.to_thread(Path(await (await started.value).path()).read_text)
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert kinds == ["header", "memory", "event", "memory", "event", "end"]  # each memory's ADD after it

    # The export is of what the filters on screen match, not of the whole scope.
    await page.get_by_label("metadata", exact=True).fill("mood=calm")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator(".count")).to_have_text("1 memory")
    async with page.expect_download() as started:
        await page.get_by_role("link", name="Export (JSON lines)").click()
    text = await asyncio.to_thread(Path(await (await started.value).path()).read_text)
    exported = [json.loads(line)["memory"]["content"] for line in text.splitlines() if '"memory"' in line]
    assert exported == ["Alice drinks green tea every morning"]


async def test_erase_a_scope_after_its_preview(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(NOTES)
    page = tab.page
    await sign_in(tab, console, workspace)
    await page.get_by_role("link", name="Erase a scope").click()
    await page.get_by_label("user", exact=True).fill("nobody")
    await page.get_by_role("button", name="Preview").click()
    await expect(page.locator(".state-empty")).to_have_text("user nobody holds no memories.")

    await page.get_by_label("user", exact=True).fill("alice")
    await page.get_by_role("button", name="Preview").click()
    await expect(page.locator(".preview")).to_contain_text("user alice holds 2 memories")
    await tab.shot("erase-preview")
    await page.get_by_role("button", name="Erase 2 memories").click()
    receipt = page.locator(".receipt")
    await expect(receipt).to_contain_text("Memories erased: 2")
    await expect(receipt).to_contain_text("Scope: user alice")
    await tab.shot("erase-receipt")
    left = await workspace.client.list_memories()
    assert sorted(m.scope.user_id or m.scope.agent_id for m in left.memories) == ["bob", "ops"]


async def test_a_superseded_memory_made_current_again(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    closed = timestamp_pb2.Timestamp(seconds=1_600_000_000)  # September 2020
    opened = timestamp_pb2.Timestamp(seconds=1_500_000_000)
    [old] = await workspace.client.add_memories(
        [mem("The user lives in Oslo", user_id="olaf", valid_from_time=opened, valid_to_time=closed)]
    )
    page = tab.page
    await sign_in(tab, console, workspace)
    await expect(page.locator(".state-empty")).to_have_text("No memories match these filters.")  # superseded: hidden
    await page.get_by_label("superseded").check()
    await page.get_by_role("button", name="Filter").click()
    await page.get_by_role("link", name="The user lives in Oslo").click()
    await expect(page.locator(".view-detail .state-empty")).to_contain_text("Superseded since 2020-09-13")
    await page.get_by_role("button", name="Make it current again").click()
    await expect(page.locator(".state-ok")).to_have_text("It is current again.")
    now = await workspace.client.get_memory(old.id)
    assert not now.HasField("valid_to_time")
    assert now.version == 2
    await expect(page.locator(".history .event-update")).to_contain_text(f"UPDATE by console:{workspace.key_id}")


async def test_browse_sorts_newest_or_oldest_first_on_the_server(
    tab: Tab, console: Console, workspace: TestWorkspace
) -> None:
    for i in range(30):  # one add each: 30 creation times, over two pages of 25
        await workspace.client.add_memories([mem(f"note number {i:02d}")])
    page = tab.page
    await sign_in(tab, console, workspace)
    rows = page.locator("table.memories tbody tr")
    await expect(rows.first).to_contain_text("note number 29")
    await page.get_by_label("order").select_option("oldest")
    await expect(rows.first).to_contain_text("note number 00")
    await expect(rows).to_have_count(25)
    await page.get_by_role("button", name="Next").click()
    await expect(rows).to_have_count(5)
    await expect(rows.first).to_contain_text("note number 25")
    await expect(rows.last).to_contain_text("note number 29")
    await page.get_by_label("order").select_option("newest")  # back to the first page, newest first
    await expect(page.locator(".pager")).to_contain_text("page 1")
    await expect(rows.first).to_contain_text("note number 29")
    await expect(rows.last).to_contain_text("note number 05")


async def test_usage_plots_memories_added_and_searches_per_day(
    tab: Tab, console: Console, workspace: TestWorkspace
) -> None:
    await workspace.client.add_memories(NOTES)
    for query in ("Oslo", "tea", "project"):
        await workspace.client.search(query)
    page = tab.page
    await sign_in(tab, console, workspace)
    await page.get_by_role("link", name="Usage").click()
    await expect(page.locator(".usage-facts")).to_have_text(
        "4 memories added in 14 days; 4 stored in all (superseded and expired included)."
    )
    await expect(page.locator(".usage-searches")).to_have_text("3 searches in 14 days.")
    await expect(page.locator("svg.bars rect.bar.added")).to_have_count(14)
    await expect(page.locator("svg.bars rect.bar.searches")).to_have_count(14)
    today = page.locator("svg.bars rect.bar.searches").last
    await expect(today.locator("title")).to_have_text(re.compile(r": 3 searches$"))
    await tab.shot("usage")


async def test_search_with_another_fusion_and_weight(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(NOTES)
    page = tab.page
    await sign_in(tab, console, workspace)
    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("query", exact=True).fill("what does Alice drink?")
    await page.get_by_label("fusion").select_option("zscore")
    await page.get_by_label("vector weight").fill("0.7")
    await page.get_by_role("button", name="Search").click()
    first = page.locator("article.hit").first
    await expect(first.locator(".content")).to_have_text("Alice drinks green tea every morning")
    await page.get_by_label("vector weight").fill("2")  # the form refuses it before sending
    assert not await page.locator("input[name=vector_weight]").evaluate("el => el.checkValidity()")
