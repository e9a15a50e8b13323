"""`memplane serve --workers N`: N server processes on one port, for a host with more cores
than one Python process can use.

gRPC's Python guide recommends this for CPU-bound servers: a process per core, each with
its own grpc.aio server bound to the same port with SO_REUSEPORT, so the kernel spreads
new connections over them (grpc/examples/python/multiprocessing). A client's channel is
one connection, so it stays with one process; many clients spread.

This process supervises. It starts worker 0 (which applies the migrations and, on the
embedded default, starts the embedded PostgreSQL), waits until it accepts connections,
then starts the others with `--no-migrate` (they attach to the same database). Every
worker gets SIGTERM when the supervisor ends, however it ends (PR_SET_PDEATHSIG). A
signal to the supervisor is passed on to every worker, which drains and stops as a single
server does; a worker that exits on its own stops the others and the supervisor exits
with its status, for the service manager (systemd, Kubernetes) to restart the whole.

Each worker has its own pools, caches and per-workspace admission: connection counts,
the embedding cache and the LLM client's requests-per-minute limit are per process
(docs/operations/configuration.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

_log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
FIRST_WORKER_SECONDS = 600.0  # an embedded PostgreSQL's first start and the model's first load
ACCEPT_POLL_SECONDS = 0.05


def free_port(host: str) -> int:
    """A port nothing listens on at *host* now (the workers bind it next)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def _accepts(host: str, port: int) -> bool:
    address = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host  # noqa: S104
    try:
        _, writer = await asyncio.open_connection(address, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def supervise(workers: int, *, host: str, port: int, services: str, migrate: bool, stop_seconds: float) -> int:
    """Run *workers* `memplane serve` processes on host:port (port 0: a free one, chosen
    here) until a signal (SIGINT/SIGTERM, passed on to them) or until one exits. Returns 0
    when every worker stopped cleanly after a signal, else the first failing status (128 + N
    for a worker killed by signal N; 1 when worker 0 did not accept connections within
    FIRST_WORKER_SECONDS). A worker still running *stop_seconds* after it was told to stop
    is killed."""
    port = port or free_port(host)
    environment = {**os.environ, "MEMPLANE_GRPC__REUSE_PORT": "true", "MEMPLANE_GRPC__WORKERS": "1"}

    async def start(index: int) -> asyncio.subprocess.Process:
        argv = ["-m", "memplane", "serve", "--host", host, "--port", str(port), "--services", services]
        if index > 0 or not migrate:
            argv.append("--no-migrate")
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=environment, preexec_fn=_die_with_parent
        )
        _log.info("worker %d: process %d", index, process.pid)
        return process

    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    processes = [await start(0)]
    deadline = loop.time() + FIRST_WORKER_SECONDS
    while not await _accepts(host, port):
        if processes[0].returncode is not None or not signals.empty():
            return await _stop(processes, signals, stop_seconds)
        if loop.time() > deadline:
            _log.error("worker 0 did not accept connections within %.0f s: stopping it", FIRST_WORKER_SECONDS)
            signals.put_nowait(signal.SIGTERM)
            return max(await _stop(processes, signals, stop_seconds), 1)
        await asyncio.sleep(ACCEPT_POLL_SECONDS)  # polling a port for its first listener
    processes += [await start(i) for i in range(1, workers)]
    _log.info("%d workers serving on %s:%d", workers, host, port)
    return await _stop(processes, signals, stop_seconds)


async def _stop(
    processes: Sequence[asyncio.subprocess.Process], signals: asyncio.Queue[signal.Signals], seconds: float
) -> int:
    """Wait for a signal or a worker's exit, then stop every worker (passing on each
    further signal) and return the status."""
    exits = {asyncio.ensure_future(p.wait()): p for p in processes}
    received = asyncio.ensure_future(signals.get())
    done, _ = await asyncio.wait([*exits, received], return_when=asyncio.FIRST_COMPLETED)
    signalled = received in done
    first = received.result() if signalled else signal.SIGTERM
    failed = next((p for f, p in exits.items() if f in done), None)
    if failed is not None:
        _log.error("worker process %d exited with status %s: stopping the others", failed.pid, failed.returncode)
    for process in processes:
        if process.returncode is None:
            process.send_signal(first)
    try:
        async with asyncio.timeout(seconds):
            pending = [f for f in exits if not f.done()]
            while pending:
                more = asyncio.ensure_future(signals.get())
                done, _ = await asyncio.wait([*pending, more], return_when=asyncio.FIRST_COMPLETED)
                if more in done:  # a second signal cuts the workers' drain short, as for one server
                    for process in processes:
                        if process.returncode is None:
                            process.send_signal(more.result())
                else:
                    more.cancel()
                pending = [f for f in exits if not f.done()]
    except TimeoutError:
        for process in processes:
            if process.returncode is None:
                _log.error("worker process %d still running %.0f s after the stop: killing it", process.pid, seconds)
                process.kill()
        await asyncio.gather(*exits)
    received.cancel()
    if failed is not None:
        return _status(failed.returncode)
    return next((_status(p.returncode) for p in processes if p.returncode), 0) if signalled else 1


def _status(returncode: int | None) -> int:
    """A worker's exit as the supervisor's: its status, or 128 + N for death by signal N
    (as a shell reports it); never 0 for a worker that failed."""
    if returncode is None or returncode == 0:
        return 1
    return 128 - returncode if returncode < 0 else returncode
