"""Podman's Docker-compatible API socket for the docker sandbox backend (used by
tests/contract): `podman system service` on a socket in a temp dir, started once per
session with scripts/image/containers.conf (runtime runc, nofile/nproc 1024), and
stopped at the end. MEMPLANE_DOCKER_HOST (a unix:// URL) uses a running one instead.
The image is MEMPLANE_SANDBOX_IMAGE, by default the Debian minbase that
scripts/image/build.sh imports (scripts/test.sh builds it before pytest)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SANDBOX_IMAGE = os.environ.get("MEMPLANE_SANDBOX_IMAGE", "localhost/memplane-base:bookworm")
_CONF = Path(__file__).parent.parent / "scripts" / "image" / "containers.conf"
_START_SECONDS = 30.0


def _ping(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(2.0)
            conn.connect(path)
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
            status = conn.recv(64).split(b"\r\n", 1)[0]
            return status.startswith(b"HTTP/1.") and b" 200" in status
    except OSError:
        return False


@pytest.fixture(scope="session")
def podman_socket() -> Iterator[str]:
    """The unix:// URL of a Docker-compatible API (Podman); fails, naming what is missing,
    when podman or the sandbox image is not there."""
    if url := os.environ.get("MEMPLANE_DOCKER_HOST"):
        yield url
        return
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman is not installed (apt-get install podman runc)", pytrace=False)
    env = {**os.environ, "CONTAINERS_CONF": str(_CONF)}
    found = subprocess.run([podman, "image", "exists", SANDBOX_IMAGE], env=env, check=False)  # noqa: S603
    if found.returncode != 0:
        pytest.fail(f"no image {SANDBOX_IMAGE} (scripts/image/build.sh makes it)", pytrace=False)
    directory = tempfile.mkdtemp(prefix="memplane-podman-")
    path = f"{directory}/podman.sock"
    service = subprocess.Popen(  # noqa: S603
        [podman, "system", "service", "--time=0", f"unix://{path}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + _START_SECONDS
        while not _ping(path):  # the socket itself answering is what is waited on
            if service.poll() is not None or time.monotonic() > deadline:
                error = service.stderr.read().decode() if service.stderr and service.poll() is not None else ""
                pytest.fail(f"podman system service did not answer on {path}: {error}", pytrace=False)
            time.sleep(0.1)
        yield f"unix://{path}"
    finally:
        service.terminate()
        try:
            service.wait(timeout=10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        shutil.rmtree(directory, ignore_errors=True)
