"""Server settings of the embedded PostgreSQL (`memplane.storage.embedded`): written to
`pgdata/memplane.conf` before each start, applied to a fresh data directory too (whose
first start is the wheel's, with PostgreSQL's defaults), and shared_buffers sized from
the machine unless configured."""

from __future__ import annotations

from pathlib import Path

import psutil  # type: ignore[import-untyped]
import psycopg

from memplane.storage.embedded import SHARED_BUFFERS_CAP_MB, shared_buffers_mb, start_embedded


def _shared_buffers(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting('shared_buffers')").fetchone()
    assert row is not None
    return str(row[0])


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


def test_shared_buffers_are_a_quarter_of_memory_within_bounds_unless_configured() -> None:
    assert shared_buffers_mb(512) == 512
    quarter = psutil.virtual_memory().total // (4 * 1024 * 1024)
    assert shared_buffers_mb(0) == max(128, min(quarter, SHARED_BUFFERS_CAP_MB))
