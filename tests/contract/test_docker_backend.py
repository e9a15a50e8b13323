"""What only the docker backend has: a missing image is a clear FailedPreconditionError."""

from __future__ import annotations

import uuid

import aiodocker
import pytest

from memplane.errors import FailedPreconditionError
from memplane.sandbox.docker import DockerSandboxes


async def test_a_missing_image_is_named(podman_socket: str) -> None:
    docker = aiodocker.Docker(url=podman_socket)
    try:
        backend = DockerSandboxes(docker, "localhost/no-such-image:none", name_prefix=f"t{uuid.uuid4().hex[:8]}-")
        with pytest.raises(FailedPreconditionError, match="localhost/no-such-image:none"):
            await backend.ensure("ws")
    finally:
        await docker.close()
