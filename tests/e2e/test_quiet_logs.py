"""Logs as an operator reads them: a real `memplane serve` on the embedded default
(PostgreSQL started by the process) with an OpenAI-compatible embedder over real HTTP
(tests/fake_llm.py) writes a bounded number of INFO lines while it starts — all its own —
and not one per request afterwards: per-request events (an embedding call's HTTP request,
a search) belong at DEBUG or in metrics. Before the fix there was one httpx INFO line per
embedding call (40,720 lines in 9 minutes of load)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from memplane.client import AsyncMemplaneClient
from tests.fake_llm import FakeLLM
from tests.fix_process import SERVICES_START_SECONDS, free_port, wait_serving
from tests.support import mem

# Records at INFO or above as the plain formatter writes them: "<date> <time> LEVEL logger: message".
RECORD = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): ", re.MULTILINE)
# The server's own start-up lines: one per migration applied (a fresh database applies them
# all), and the rest — the embedded database ready, the listener — with a little room for a
# few more of its own. (A fixed bound over both failed at the fifteenth migration.)
MIGRATIONS = sum(
    1 for f in (resources.files("memplane.server.storage") / "migrations").iterdir() if f.name.endswith(".sql")
)
MAX_OTHER_START_LINES = 4
SEARCHES = 12


@pytest.fixture
def endpoint() -> Iterator[FakeLLM]:
    with FakeLLM(embedding_dimensions=24) as fake:
        yield fake


def records(log: Path) -> list[tuple[str, str]]:
    """(level, logger) of every record in *log*; other lines (warnings of Python itself,
    output of child processes) are counted separately by `stray_lines`."""
    return RECORD.findall(log.read_text(errors="replace"))


def stray_lines(log: Path) -> list[str]:
    """Lines that are neither a record nor the continuation of one (a traceback)."""
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if line.strip() and not RECORD.match(line) and not line.startswith((" ", "\t"))]


async def test_a_started_server_logs_its_start_briefly_and_no_line_per_request(
    endpoint: FakeLLM, admin_key: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "MEMPLANE_DATA_DIR": str(tmp_path),  # no DSN: the embedded PostgreSQL under it
        "MEMPLANE_GRPC__PORT": str(port),
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_EMBEDDING__PROVIDER": "openai",
        "MEMPLANE_EMBEDDING__BASE_URL": endpoint.base_url,
        "MEMPLANE_EMBEDDING__MODEL": "fake-embed",
        "MEMPLANE_EMBEDDING__API_KEY": "sk-test",
        "MEMPLANE_EMBEDDING__CACHE_SIZE": "0",  # every search calls the endpoint
        "MEMPLANE_LOG_LEVEL": "INFO",
    }
    env.pop("MEMPLANE_DATABASE__DSN", None)
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", "serve", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=err
        )
    target = f"127.0.0.1:{port}"
    try:
        await wait_serving(target, process, SERVICES_START_SECONDS)
        started = records(log)
        assert stray_lines(log) == []
        migrations = [r for r in started if r == ("INFO", "memplane.server.storage.migrate")]
        assert len(migrations) == MIGRATIONS, started
        assert 0 < len(started) - len(migrations) <= MAX_OTHER_START_LINES, started
        assert {name.split(".")[0] for _, name in started} == {"memplane"}, started  # no library internals

        async with AsyncMemplaneClient(target, admin_key) as admin:
            await admin.create_workspace("quiet")
            key = (await admin.create_api_key("quiet", "test")).api_key
        async with AsyncMemplaneClient(target, key) as client:
            await client.add_memories([mem(f"the heron nests by pond {i}") for i in range(3)])
            for i in range(SEARCHES):
                await client.search(f"where does the heron nest? {i}")
        assert len(endpoint.embedding_requests) >= SEARCHES + 1  # the requests did happen
        assert records(log)[len(started) :] == []  # nothing for the embedding calls, searches or writes
        assert stray_lines(log) == []
    finally:
        process.terminate()
        await process.wait()
