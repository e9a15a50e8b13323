"""The console's browser tests: a real `memplane console` process (the CLI, uvicorn on a
free loopback port, under the base path /memplane) over the session's gRPC server, and
Debian's headless Chromium (/usr/bin/chromium, scripts/install-browser-deps.sh) driven by
Playwright's async API, so the server keeps running on the session's event loop while a
test waits on the page. Each test gets a fresh browser context at 1280x800 that records
every JavaScript dialog (a hostile memory that ran would open one)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Dialog, Page, async_playwright, expect

from tests.fix_server import TestWorkspace

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = os.environ.get("MEMPLANE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = REPO / "build" / "console-screenshots"
BASE_PATH = "/memplane"
START_SECONDS = 60.0
# What a page or an expectation may wait for: generous, since benchmarks may share the
# machine's two cores (a wait ends as soon as the thing happens, so a pass is no slower).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


@dataclass(frozen=True)
class Console:
    """A running console: the page's URL (ending in "/") and its process."""

    url: str
    process: asyncio.subprocess.Process


async def start_console(target: str, *args: str) -> Console:
    """`memplane console --target TARGET --port 0 ARGS...`, once it prints its URL.
    Fails the test with the process's output if it exits or says nothing within 60 s."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memplane",
        "console",
        "--target",
        target,
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(START_SECONDS):
            while line := (await process.stdout.readline()).decode():
                seen.append(line)
                if line.startswith("memplane console: "):
                    return Console(url=line.removeprefix("memplane console: ").strip(), process=process)
    except TimeoutError:
        pass
    process.kill()
    await process.wait()
    pytest.fail("memplane console did not start:\n" + "".join(seen), pytrace=False)


async def stop_console(console: Console) -> None:
    """SIGTERM, then wait for the exit."""
    console.process.terminate()
    await console.process.wait()


@pytest.fixture(scope="session")
async def console(server: str) -> AsyncIterator[Console]:
    """The session's console under /memplane, with room for the suite's sign-ins."""
    running = await start_console(server, "--base-path", BASE_PATH, "--sign-ins-per-minute", "600")
    yield running
    await stop_console(running)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless. Fails (never skips) without it: CI installs it."""
    if not await asyncio.to_thread(Path(CHROMIUM).exists):
        pytest.fail(f"no {CHROMIUM}: run scripts/install-browser-deps.sh as root (apt-get install chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        await launched.close()


@dataclass
class Tab:
    """A page of a fresh context, with the dialogs it opened."""

    page: Page
    context: BrowserContext
    dialogs: list[str] = field(default_factory=list)

    async def shot(self, name: str) -> None:
        """Save a 1280x800 screenshot as build/console-screenshots/<name>.png."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


@pytest.fixture
async def tab(browser: Browser) -> AsyncIterator[Tab]:
    """A fresh browser context (no cookies) and page at 1280x800."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    opened = Tab(page=page, context=context)

    async def on_dialog(dialog: Dialog) -> None:
        opened.dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    yield opened
    await context.close()


async def sign_in(tab: Tab, console: Console, workspace: TestWorkspace) -> None:
    """Open the console and sign in with the workspace's key; wait for the browse view."""
    await tab.page.goto(console.url)
    await tab.page.get_by_label("API key").fill(workspace.key)
    await tab.page.get_by_role("button", name="Sign in").click()
    await tab.page.locator(".view-browse").wait_for()
