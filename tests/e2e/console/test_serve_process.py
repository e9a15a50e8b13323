"""The whole path as a person runs it: `memplane serve` in its own process (the session's
database and admin key: tests/fix_process.py) and `memplane console` in another, under a
base path; the page signs in, lists and searches."""

from __future__ import annotations

import contextlib

import pytest
from playwright.async_api import expect

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from tests.e2e.console.conftest import Tab, sign_in, start_console, stop_console
from tests.fix_process import Services
from tests.fix_server import TestWorkspace, random_workspace_name
from tests.support import mem

pytestmark = pytest.mark.e2e


async def test_console_over_a_memplane_serve_process(tab: Tab, services: Services, admin_key: str) -> None:
    name = random_workspace_name()
    async with AsyncMemplaneClient(services.target, admin_key) as admin:
        info = await admin.create_workspace(name)
        key = await admin.create_api_key(name, "console test")
        try:
            async with AsyncMemplaneClient(services.target, key.api_key) as client:
                await client.add_memories([mem("The user's favourite tea is genmaicha", user_id="tess")])
            console = await start_console(services.target, "--base-path", "/tools/memory")
            try:
                assert console.url.endswith("/tools/memory/")
                ws = TestWorkspace(name=name, client=client, key=key.api_key, key_id=key.key_id, info=info)
                await sign_in(tab, console, ws)
                await expect(tab.page.get_by_text("The user's favourite tea is genmaicha")).to_be_visible()
                await tab.page.get_by_role("link", name="Search").click()
                await tab.page.get_by_label("query", exact=True).fill("which tea?")
                await tab.page.get_by_role("button", name="Search").click()
                await expect(tab.page.locator("article.hit .content").first).to_have_text(
                    "The user's favourite tea is genmaicha"
                )
            finally:
                await stop_console(console)
        finally:
            with contextlib.suppress(NotFoundError):
                await admin.delete_workspace(name)
