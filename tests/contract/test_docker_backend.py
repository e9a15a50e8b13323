"""What only the docker backend has: a missing image is a clear FailedPreconditionError;
the test Podman's exec sessions are let go soon after they end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path

import aiodocker
import pytest

from memplane.errors import FailedPreconditionError
from memplane.sandbox.docker import DockerSandboxes
from tests.fix_podman import SANDBOX_IMAGE


async def test_a_missing_image_is_named(podman_socket: str) -> None:
    docker = aiodocker.Docker(url=podman_socket)
    try:
        backend = DockerSandboxes(docker, "localhost/no-such-image:none", name_prefix=f"t{uuid.uuid4().hex[:8]}-")
        with pytest.raises(FailedPreconditionError, match="localhost/no-such-image:none"):
            await backend.ensure("ws")
    finally:
        await docker.close()


def _exit_delays(container_id: str) -> list[str]:
    """The ``--exit-delay`` of each conmon watching an exec session of *container_id*."""
    delays = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if args[0].endswith(b"conmon") and b"--exec-attach" in args and container_id.encode() in args:
                delays.append(args[args.index(b"--exit-delay") + 1].decode())
    return delays


async def test_an_exec_session_is_cleaned_up_soon_after_it_ends(podman_socket: str) -> None:
    """Podman keeps each API exec session, and the conmon watching it, for
    containers.conf's `exit_command_delay` after the command ends (300 s by default,
    Docker's 5 minutes): the test service's (scripts/image/containers.conf) is 30 s, so a
    suite's thousands of execs do not leave thousands of conmons behind."""
    if os.environ.get("MEMPLANE_DOCKER_HOST"):
        pytest.skip("a Podman service of this session's own: its containers.conf is not ours")
    docker = aiodocker.Docker(url=podman_socket)
    backend = DockerSandboxes(docker, SANDBOX_IMAGE, name_prefix=f"t{uuid.uuid4().hex[:8]}-")
    handle = await backend.ensure("ws")
    running = asyncio.create_task(backend.exec(handle, ["sh", "-c", "touch started; exec sleep 30"]))
    try:
        while not (await backend.exec(handle, ["test", "-e", "started"])).ok():  # the long exec has begun
            pass
        assert set(_exit_delays(handle.ref)) == {"30"}
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await backend.destroy(handle)
        await docker.close()
