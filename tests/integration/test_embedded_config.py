"""Server settings of the embedded PostgreSQL (`memplane.server.storage.embedded`): written to
`pgdata/memplane.conf` before each start, applied to a fresh data directory too (whose
first start is the wheel's, with PostgreSQL's defaults), and its memory settings
(`memplane.server.storage.embedded_memory`) sized from the machine unless configured."""

from __future__ import annotations

from pathlib import Path

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest
from pydantic import ValidationError

from memplane.server.resources import start_database
from memplane.server.settings import DatabaseSettings, Settings
from memplane.server.storage import embedded_memory
from memplane.server.storage.embedded import EmbeddedPostgresError, start_embedded
from memplane.server.storage.embedded_memory import (
    EFFECTIVE_CACHE_SIZE_MAX_MB,
    SHARED_BUFFERS_MAX_MB,
    ServerMemory,
    cgroup_limit_mb,
    server_memory,
)

MEMORY_SETTINGS = ("shared_buffers", "effective_cache_size", "maintenance_work_mem", "work_mem")


def _setting(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def _shared_buffers(dsn: str) -> str:
    return _setting(dsn, "shared_buffers")


def test_settings_apply_from_a_fresh_directory_and_again_at_the_next_start(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    held = start_embedded(pgdata, {"shared_buffers": "160MB"})
    try:
        assert _shared_buffers(held.dsn) == "160MB"  # the wheel started it with 128MB
    finally:
        held.release()
    held = start_embedded(pgdata, {"shared_buffers": "144MB"})
    try:
        assert _shared_buffers(held.dsn) == "144MB"
    finally:
        held.release()
    held = start_embedded(pgdata)  # None: the file as the last start left it
    try:
        assert _shared_buffers(held.dsn) == "144MB"
    finally:
        held.release()
    assert (pgdata / "postgresql.conf").read_text().count("memplane.conf") == 1


def test_memory_settings_follow_the_documented_rules() -> None:
    gib = 1024
    # A 24 GiB machine: a quarter, three quarters, a sixteenth, (24 - 6) GiB / 300.
    assert server_memory(24 * gib) == ServerMemory(6 * gib, 18 * gib, 1536, 61)
    # A 1 GiB container: the floors of shared_buffers and maintenance_work_mem.
    assert server_memory(gib) == ServerMemory(256, 768, 64, 4)
    # Small: shared_buffers never below PostgreSQL's default, the cache estimate never below it.
    assert server_memory(256) == ServerMemory(128, 192, 64, 4)
    # A 128 GiB host: the caps.
    assert server_memory(128 * gib) == ServerMemory(8 * gib, 96 * gib, 2 * gib, 64)
    # shared_buffers configured: taken as it is, the rest still from the memory.
    assert server_memory(24 * gib, 512) == ServerMemory(512, 18 * gib, 1536, 64)


def test_machine_memory_is_the_cgroup_limit_when_lower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    physical = psutil.virtual_memory().total // (1024 * 1024)
    limit = tmp_path / "memory.max"
    limit.write_text("max\n")  # cgroup v2 without a limit
    assert cgroup_limit_mb((limit,)) is None
    limit.write_text("9223372036854771712\n")  # cgroup v1 without a limit
    assert cgroup_limit_mb((limit,)) is None
    assert cgroup_limit_mb((tmp_path / "missing", limit)) is None
    limit.write_text(f"{2 * 1024**3}\n")
    assert cgroup_limit_mb((tmp_path / "missing", limit)) == 2048
    monkeypatch.setattr(embedded_memory, "CGROUP_LIMIT_FILES", (limit,))
    assert embedded_memory.machine_memory_mb() == min(physical, 2048)
    assert server_memory().shared_buffers == max(128, min(physical, 2048) // 4)
    limit.write_text("max\n")
    assert embedded_memory.machine_memory_mb() == physical


@pytest.mark.parametrize(("memory_mb", "shared_buffers_mb"), [(0, 0), (2048, 160)])
def test_the_embedded_server_runs_with_the_settings_derived_from_its_memory(
    tmp_path: Path, memory_mb: int, shared_buffers_mb: int
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        database=DatabaseSettings(embedded_memory_mb=memory_mb, embedded_shared_buffers_mb=shared_buffers_mb),
    )
    expected = server_memory(memory_mb, shared_buffers_mb).config()
    dsn, held = start_database(settings)
    assert held is not None
    try:
        running = {name: _setting(dsn, name) for name in MEMORY_SETTINGS}
    finally:
        held.release()
    assert running == {name: _pg_units(value) for name, value in expected.items()}


def _pg_units(value: str) -> str:
    """How PostgreSQL prints *value* ("2048MB" -> "2GB": whole units of 1024)."""
    mb = int(value.removesuffix("MB"))
    return f"{mb // 1024}GB" if mb % 1024 == 0 else f"{mb}MB"


def test_a_memory_past_what_postgresql_can_express_is_clamped_and_the_server_starts(tmp_path: Path) -> None:
    """effective_cache_size = memory x 3/4 is capped at PostgreSQL's maximum (2^31 - 1 pages of
    8 kB): MEMPLANE_DATABASE__EMBEDDED_MEMORY_MB=99999999999 wrote 74999999999MB, which
    PostgreSQL refused ("configuration file ... contains errors") and the server never started."""
    huge = 99_999_999_999
    assert server_memory(huge) == ServerMemory(8192, EFFECTIVE_CACHE_SIZE_MAX_MB, 2048, 64)
    settings = Settings(data_dir=tmp_path, database=DatabaseSettings(embedded_memory_mb=huge))
    dsn, held = start_database(settings)
    assert held is not None
    try:
        assert _setting(dsn, "effective_cache_size") == f"{EFFECTIVE_CACHE_SIZE_MAX_MB}MB"
    finally:
        held.release()


def test_shared_buffers_past_what_postgresql_can_express_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match="embedded_shared_buffers_mb"):
        DatabaseSettings(embedded_shared_buffers_mb=SHARED_BUFFERS_MAX_MB + 1)
    assert DatabaseSettings(embedded_shared_buffers_mb=SHARED_BUFFERS_MAX_MB).embedded_shared_buffers_mb > 0


@pytest.mark.skipif(
    Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1", reason="the kernel grants any mapping"
)
def test_a_failed_start_names_postgresqls_fatal_line_not_its_last_one(tmp_path: Path) -> None:
    """shared_buffers of 1 TiB on this machine: the restart's FATAL ("could not map anonymous
    shared memory") was followed by "database system is shut down", which the error named."""
    with pytest.raises(EmbeddedPostgresError, match="could not map anonymous shared memory"):
        start_embedded(tmp_path / "pgdata", {"shared_buffers": "1048576MB"})
