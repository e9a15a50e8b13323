"""The write-back jobs view in the browser, against the server with the scripted LLM
(tests/fix_llm.py) and a console of its own: a job that stored a fact, listed with its
decision and a link to the memory; the state filter."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2, writeback_pb2
from tests.e2e.console.conftest import Tab, sign_in, start_console, stop_console
from tests.e2e.test_extraction import answer, fact
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace

pytestmark = pytest.mark.e2e

USER = memory_pb2.MESSAGE_ROLE_USER


async def test_jobs_with_their_decisions(
    tab: Tab, llm: FakeLLM, llm_client: AsyncMemplaneClient, llm_server: str, workspace: TestWorkspace
) -> None:
    llm.script(answer(fact("user", "Home", "Ana lives in Lisbon.", ids=["m1"])))
    scope = memory_pb2.Scope(user_id="ana", session_id="s-lisbon")
    said = [writeback_pb2.ConversationMessage(id="m1", role=USER, content="I live in Lisbon.")]
    reply = await llm_client.write_conversation(scope, said, extract=True, wait=True)
    assert reply.extraction_job.status == writeback_pb2.EXTRACTION_JOB_STATUS_DONE, reply.extraction_job.error

    console = await start_console(llm_server)
    try:
        page = tab.page
        await sign_in(tab, console, workspace)
        await page.get_by_role("link", name="Write-back jobs").click()
        job = page.locator("article.job")
        await expect(job).to_have_count(1)
        await expect(job.locator(".job-status")).to_have_text("done")
        await expect(job).to_contain_text("user ana · session s-lisbon · 1 messages · attempt 1")
        await expect(job.locator(".operations li")).to_contain_text("ADD")
        await expect(job).to_contain_text(f"job {reply.extraction_job.id}")
        await tab.shot("jobs")

        await page.get_by_label("state").select_option("pending")
        await page.get_by_role("button", name="Show").click()
        await expect(page.locator(".state-empty")).to_have_text("No write-back jobs in this state.")
        await page.get_by_label("state").select_option("")
        await page.get_by_role("button", name="Show").click()
        await job.get_by_role("link", name="memory").click()
        await expect(page.locator(".view-detail p.content")).to_have_text("Ana lives in Lisbon.")
    finally:
        await stop_console(console)
