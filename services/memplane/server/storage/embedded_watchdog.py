"""The watchdog of one holder of the embedded PostgreSQL (see `memplane.server.storage.embedded`).

`python -m memplane.server.storage.embedded_watchdog PGDATA HOLDER_PID`, started by the holder
with its stdin the read end of a pipe that only the holder writes to; it says "watching"
on stdout once ready (the holder waits for that line). It reads until
end-of-file — which comes the moment the holder is gone, by a clean exit, a crash or
SIGKILL, since the kernel closes a dead process's files — then lets go of *PGDATA* in the
holder's name: PostgreSQL is stopped unless another live holder uses it. A crashed server
never leaks its database process. It ignores SIGINT and SIGHUP (runs in a session of its
own besides), so the terminal that stops the server cannot stop it first.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from memplane.server.storage.embedded import EmbeddedPostgresError, release

_log = logging.getLogger("memplane.server.storage.embedded_watchdog")


def main(argv: list[str]) -> int:
    """Wait for the holder to go, then let go for it. Exit status 0, 1 if `pg_ctl stop`
    failed, 2 on bad usage."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m memplane.server.storage.embedded_watchdog PGDATA HOLDER_PID", file=sys.stderr)
        return 2
    pgdata, holder = Path(argv[0]), int(argv[1])
    sys.stdout.write("watching\n")
    sys.stdout.close()  # the holder waits for this line before it relies on us
    while sys.stdin.buffer.read(4096):  # nothing is ever written; b"" is end-of-file
        pass
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if release(pgdata, holder):
            _log.warning("holder %d of %s exited without stopping PostgreSQL: stopped it", holder, pgdata)
    except EmbeddedPostgresError as error:
        _log.error("could not stop the embedded PostgreSQL of %s: %s", pgdata, error)  # a message, no traceback
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
