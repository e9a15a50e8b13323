"""`memplane serve` started as a cluster starts it: secrets from the environment or a
mounted file that never touch disk, a read-only root filesystem with no data directory,
migrations as a separate step (`memplane migrate`, `serve --no-migrate`), and two
servers racing to migrate one empty database. Each server is a real process over a
PostgreSQL cluster of the test's own (a new admin key there leaves the session's alone)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.domain.apikeys import generate_api_key
from memplane.errors import UnauthenticatedError
from memplane.server.storage.migrate import _migrations
from tests.faults.conftest import KillablePostgres, ServerProcess, wait_for_sql
from tests.fix_server import random_workspace_name
from tests.support import mem, unit_vectors

Serve = Callable[..., Awaitable[ServerProcess]]
EXIT_SECONDS = 120.0  # a refused start exits before the embedding model loads
MIGRATIONS = [name for _, name, _ in _migrations()]
# What a cluster Pod does not set: the data directory, and the local bootstrap's switch
# (left at its default, so a configured key alone must keep the server off the disk).
CLUSTER_UNSET = ("MEMPLANE_DATA_DIR", "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE")


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """*path* made read-only for every process: a read-only bind mount of it on itself
    when the tests run as root (root ignores mode bits), mode 0555 otherwise. Skips the
    test when root cannot mount here."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("a read-only bind mount needs mount(8)")
    # Fixed argv of the test's own temporary directory: no untrusted input.
    bind = subprocess.run([mount, "--bind", path, path], capture_output=True, text=True, check=False)  # noqa: S603
    if bind.returncode != 0:
        pytest.skip(f"a read-only bind mount needs CAP_SYS_ADMIN: {bind.stderr.strip()}")
    try:
        subprocess.run([mount, "-o", "remount,bind,ro", path], check=True, capture_output=True)  # noqa: S603
        yield path
    finally:
        subprocess.run([umount, path], check=True, capture_output=True)  # noqa: S603


async def _run(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run `memplane *args*` to its exit; (exit status, stdout + stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), EXIT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"memplane {' '.join(args)} did not exit within {EXIT_SECONDS} s")
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


def _files_under(path: Path) -> list[Path]:
    """Every file and directory under *path*."""
    return list(path.rglob("*"))


async def _stop(server: ServerProcess) -> None:
    """SIGTERM and wait: a clean shutdown exits 0."""
    server.process.terminate()
    assert await server.process.wait() == 0, server.log.read_text(errors="replace")[-4000:]


async def test_serves_on_a_read_only_filesystem_with_the_admin_key_from_a_mounted_file(
    killable_postgres: KillablePostgres, serve: Serve, tmp_path: Path
) -> None:
    admin_key = f"mp_mounted_{secrets.token_hex(16)}"
    secret = tmp_path / "secret"  # as a Secret volume: a read-only file
    secret.mkdir()
    (secret / "admin-key").write_text(admin_key + "\n")
    root = tmp_path / "root"  # HOME, the working directory and TMPDIR
    root.mkdir()
    with read_only(root), read_only(secret):
        with pytest.raises(OSError, match=r"Read-only|Permission"):
            (root / "probe").write_text("")
        server = await serve(
            killable_postgres.dsn,
            unset=(*CLUSTER_UNSET, "MEMPLANE_AUTH__ADMIN_KEY"),
            cwd=root,
            HOME=str(root),
            TMPDIR=str(root),
            MEMPLANE_AUTH__ADMIN_KEY_FILE=str(secret / "admin-key"),
        )
        async with AsyncMemplaneClient(server.target, admin_key) as admin:
            name = random_workspace_name()
            await admin.create_workspace(name)
            key = (await admin.create_api_key(name, "agent")).api_key
        async with AsyncMemplaneClient(server.target, key) as agent:
            await agent.add_memories([mem("the ferry leaves at nine")])  # the embedder runs too
            hits = (await agent.search("when does the ferry leave")).hits
        await _stop(server)
        assert [h.memory.content for h in hits] == ["the ferry leaves at nine"]
        assert list(root.iterdir()) == []
    assert not (Path(server.log).parent / "credentials.json").exists()


async def test_a_newly_configured_admin_key_replaces_the_old_one_and_no_other_key(
    killable_postgres: KillablePostgres, serve: Serve, tmp_path: Path
) -> None:
    old, new = (f"mp_admin{n}_{secrets.token_hex(16)}" for n in (1, 2))
    home = tmp_path / "home"  # where the default data directory would be
    home.mkdir()
    first = await serve(killable_postgres.dsn, unset=CLUSTER_UNSET, HOME=str(home), MEMPLANE_AUTH__ADMIN_KEY=old)
    name = random_workspace_name()
    _, imported = generate_api_key()  # as the operator makes and imports a workspace's key
    async with AsyncMemplaneClient(first.target, old) as admin:
        await admin.create_workspace(name)
        created = (await admin.create_api_key(name, "agent")).api_key
        await admin.create_api_key(name, "operator", api_key=imported)
        listed = list((await admin.list_api_keys(name)).api_keys)
    await _stop(first)

    second = await serve(killable_postgres.dsn, unset=CLUSTER_UNSET, HOME=str(home), MEMPLANE_AUTH__ADMIN_KEY=new)
    async with AsyncMemplaneClient(second.target, old) as stale:
        with pytest.raises(UnauthenticatedError):
            await stale.list_workspaces()
    async with AsyncMemplaneClient(second.target, new) as admin:
        assert list((await admin.list_api_keys(name)).api_keys) == listed  # none revoked, none added
        assert [w.name for w in (await admin.list_workspaces()).workspaces] == [name]
    for key in (created, imported):
        async with AsyncMemplaneClient(second.target, key) as agent:
            assert len(await agent.add_memories([mem("tide tables", embedding=unit_vectors(1)[0])])) == 1
    assert _files_under(home) == []  # a configured key is never written (nor anything else)

    env = {**os.environ, "MEMPLANE_DATABASE__DSN": killable_postgres.dsn, "MEMPLANE_AUTH__ADMIN_KEY": old}
    env.update(MEMPLANE_DATA_DIR=str(tmp_path / "rollback"), HOME=str(home))
    status, output = await _run("serve", "--no-migrate", "--port", "0", env=env)  # the Secret rolled back
    assert status == 1, output
    assert "KeyRevokedError" in output
    assert "never valid again" in output
    assert "Traceback" not in output


async def test_serve_no_migrate_refuses_an_empty_database_naming_the_missing_migration(
    fresh_postgres: KillablePostgres, serve: Serve, admin_key: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": fresh_postgres.dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_DATA_DIR": str(tmp_path / "data"),
        "HOME": str(tmp_path),
    }
    status, output = await _run("serve", "--no-migrate", "--port", "0", env=env)
    assert status == 1, output
    assert MIGRATIONS[-1] in output
    assert "memplane migrate" in output
    assert "Traceback" not in output

    status, output = await _run("migrate", env=env)  # the chart's migration Job
    assert status == 0, output
    assert f"applied {len(MIGRATIONS)} migration(s)" in output
    server = await serve(fresh_postgres.dsn, args=("--no-migrate",), unset=("MEMPLANE_DATABASE__MIGRATE_ON_START",))
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        assert (await admin.list_workspaces()).workspaces == []


async def test_two_servers_started_at_once_on_an_empty_database_migrate_it_once(
    fresh_postgres: KillablePostgres, serve: Serve, admin_key: str
) -> None:
    """Made a certain race: the test holds the (still empty) version table until both
    servers' migrations are seen waiting in pg_stat_activity, then lets both go."""
    dsn = fresh_postgres.dsn
    migrating = {"MEMPLANE_DATABASE__MIGRATE_ON_START": "true"}
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        await holder.execute(  # as apply_migrations creates it: no migration applied yet
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await holder.commit()
        await holder.execute("LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE")
        starting = asyncio.gather(serve(dsn, **migrating), serve(dsn, **migrating))
        await wait_for_sql(
            dsn,
            "SELECT count(*) = 2 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
            (),
            "both servers' migrations wait",
        )
        await holder.rollback()
    one, two = await starting
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [row[0] for row in await cur.fetchall()] == MIGRATIONS
    logs = one.log.read_text(errors="replace") + two.log.read_text(errors="replace")
    for name in MIGRATIONS:
        assert logs.count(f"applied migration {name}") == 1, name
    name = random_workspace_name()
    async with AsyncMemplaneClient(one.target, admin_key) as admin:
        await admin.create_workspace(name)
    async with AsyncMemplaneClient(two.target, admin_key) as admin:
        assert (await admin.get_workspace(name)).name == name


async def test_a_local_first_run_with_nothing_configured_writes_its_keys_once(
    killable_postgres: KillablePostgres, serve: Serve, tmp_path: Path
) -> None:
    data_dir = tmp_path / "local"
    local = {"MEMPLANE_DATA_DIR": str(data_dir), "HOME": str(tmp_path)}
    nothing = ("MEMPLANE_AUTH__ADMIN_KEY", "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE")
    first = await serve(killable_postgres.dsn, unset=nothing, **local)
    await _stop(first)
    credentials = json.loads((data_dir / "credentials.json").read_text())
    assert stat.S_IMODE((data_dir / "credentials.json").stat().st_mode) == 0o600
    assert sorted(credentials) == ["admin_key", "api_key", "workspace"]
    again = await serve(killable_postgres.dsn, unset=nothing, **local)
    assert json.loads((data_dir / "credentials.json").read_text()) == credentials  # reused, not regenerated
    async with AsyncMemplaneClient(again.target, credentials["admin_key"]) as admin:
        assert [w.name for w in (await admin.list_workspaces()).workspaces] == ["default"]
    async with AsyncMemplaneClient(again.target, credentials["api_key"]) as agent:
        assert len(await agent.add_memories([mem("buoy 7 is green", embedding=unit_vectors(1)[0])])) == 1
