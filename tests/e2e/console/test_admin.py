"""The admin key's view in the browser: workspaces with quotas and usage as gauges, a
workspace's keys (create — shown once —, revoke), and the walls between the two kinds
of key."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnauthenticatedError
from memplane.v1 import admin_pb2
from tests.e2e.console.conftest import Console, Tab
from tests.fix_server import WorkspaceFactory
from tests.support import mem

pytestmark = pytest.mark.e2e


async def test_workspaces_usage_and_keys(
    tab: Tab, console: Console, server: str, admin_key: str, workspace_factory: WorkspaceFactory
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_memories=10, max_bytes=1 << 20))
    await ws.client.add_memories([mem(f"note {i}") for i in range(4)])
    page = tab.page
    await page.goto(console.url)
    await page.get_by_label("API key").fill(admin_key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator(".who")).to_have_text("admin key testadmin")
    card = page.locator("article.workspace", has_text=ws.name)
    await expect(card.locator(".gauge", has_text="memories")).to_contain_text("4 of 10")
    await expect(card.locator(".gauge", has_text="content")).to_contain_text("of 1.0 MiB")
    assert await card.locator("meter").first.get_attribute("value") == "4"
    await expect(page.get_by_role("link", name="Memories")).to_be_hidden()  # no memories for the admin key
    await tab.shot("admin-workspaces")

    await card.get_by_role("link", name=ws.name).click()
    await expect(page.locator("table.keys tbody tr")).to_have_count(1)  # the fixture's key
    await page.get_by_label("label").fill("made in the console")
    await page.get_by_role("button", name="Create a key").click()
    secret = page.locator(".created .secret")
    await expect(secret).to_contain_text("mp_")
    new_key = await secret.text_content()
    assert new_key is not None
    assert new_key.startswith("mp_")
    await expect(page.locator("table.keys tbody tr")).to_have_count(2)
    await tab.shot("admin-keys")
    async with AsyncMemplaneClient(server, new_key) as client:
        assert (await client.list_memories()).total_size == 4  # the new key is the workspace's

        new_id = new_key.split("_")[1]
        row = page.locator("table.keys tbody tr", has_text=new_id)
        await row.get_by_role("button", name="Revoke…").click()
        await row.get_by_role("button", name=f"Really revoke {new_id}").click()
        await expect(row).to_contain_text("revoked")
        with pytest.raises(UnauthenticatedError):
            await client.list_memories()
    await expect(page.locator("table.keys tbody tr", has_text=ws.key_id)).to_contain_text("valid")


async def test_each_kind_of_key_stays_on_its_side(tab: Tab, console: Console, admin_key: str) -> None:
    """A workspace session cannot call the admin routes, nor the admin session the memory routes."""
    page = tab.page
    await page.goto(console.url)
    await page.get_by_label("API key").fill(admin_key)
    await page.get_by_role("button", name="Sign in").click()
    await page.locator(".view-admin").wait_for()
    status = await page.evaluate("fetch('api/memories').then(r => r.status)")
    assert status == 403
