"""The console's walls, seen from a real browser: hostile memory text renders as text,
the CSP and cookie flags are what the page runs under, a cross-site form POST is refused,
another workspace's memory id typed into the URL is "not found", and the console works
at the root as well as under its base path."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from memplane.v1 import memory_pb2
from tests.e2e.console.conftest import Console, Tab, sign_in, start_console, stop_console
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import mem

pytestmark = pytest.mark.e2e

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(2)</script> hello",
    '<a href="javascript:alert(3)">click me</a>',
]


async def test_hostile_memories_render_as_text(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories([mem(text, user_id="mallory") for text in HOSTILE])
    page = tab.page
    await sign_in(tab, console, workspace)
    for text in HOSTILE:
        await expect(page.get_by_text(text, exact=True)).to_be_visible()
    await tab.shot("hostile-browse")

    await page.goto(f"{console.url}#/memory/{stored[0].id}")
    await expect(page.locator(".view-detail p.content")).to_have_text(HOSTILE[0])
    await expect(page.locator(".history .event-add ins")).to_have_text(HOSTILE[0])

    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("query", exact=True).fill("click me alert")
    await page.get_by_role("button", name="Search").click()
    await expect(page.locator("article.hit .content")).to_have_count(3)
    await expect(page.locator("article.hit .content", has_text="javascript:alert(3)")).to_be_visible()

    assert await page.locator("main img, main script, main a[href^='javascript']").count() == 0
    assert tab.dialogs == []


async def test_csp_and_cookie_flags_in_the_browser(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    response = await tab.page.goto(console.url)
    assert response is not None
    headers = await response.all_headers()
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "script-src 'self';" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    await sign_in(tab, console, workspace)
    [cookie] = [c for c in await tab.context.cookies() if c["name"] == "memplane_console"]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/memplane/"
    assert workspace.key not in cookie["value"]
    assert await tab.page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    assert workspace.key not in await tab.page.evaluate("JSON.stringify(localStorage) + location.href")


async def test_cross_site_post_is_refused(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories([mem("Alice's secret", user_id="alice")])
    page = tab.page
    await sign_in(tab, console, workspace)
    # A page of another site posts a form at the console's erasure endpoint.
    evil = "http://evil.test/"
    html = (
        f'<form id="f" method="POST" action="{console.url}api/erasure" enctype="text/plain">'
        '<input name=\'{"user_id":"alice","expected_count":1,"x":"\' value=\'"}\'></form>'
    )
    await page.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    await page.goto(evil)
    async with page.expect_response(f"{console.url}api/erasure") as refused:
        await page.evaluate("document.getElementById('f').submit()")
    response = await refused.value
    assert response.status == 403
    assert (await workspace.client.list_memories()).total_size == 1


async def test_another_workspaces_memory_is_not_found(
    tab: Tab, console: Console, workspace_factory: WorkspaceFactory
) -> None:
    mine, theirs = await workspace_factory(), await workspace_factory()
    [other] = await theirs.client.add_memories([mem("their private note", user_id="eve")])
    page = tab.page
    await sign_in(tab, console, mine)
    await page.goto(f"{console.url}#/memory/{other.id}")
    await expect(page.get_by_role("alert")).to_have_text("Memory not found (in this workspace).")
    await tab.shot("not-found")
    await expect(page.get_by_text("their private note")).to_have_count(0)


async def test_console_at_the_root(tab: Tab, server: str, workspace: TestWorkspace) -> None:
    await workspace.client.add_memories([mem("rooted", type=memory_pb2.MEMORY_TYPE_PROJECT)])
    root = await start_console(server)
    try:
        assert root.url.startswith("http://127.0.0.1:")
        assert root.url.count("/") == 3  # http://127.0.0.1:PORT/
        await sign_in(tab, root, workspace)
        await expect(tab.page.get_by_text("rooted", exact=True)).to_be_visible()
        [cookie] = [c for c in await tab.context.cookies() if c["name"] == "memplane_console"]
        assert cookie["path"] == "/"
    finally:
        await stop_console(root)
