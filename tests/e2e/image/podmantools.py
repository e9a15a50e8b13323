"""Helpers of the image tests: Podman with the project's containers.conf, the image under
test (MEMPLANE_IMAGE, built by scripts/image/build.sh), and a Pod's file system."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
IMAGE = os.environ.get("MEMPLANE_IMAGE", "localhost/memplane:dev")
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(REPO / "scripts/image/containers.conf")}
PODMAN = shutil.which("podman") or "podman"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [PODMAN, *args], capture_output=True, text=True, env=PODMAN_ENV, check=check, timeout=300
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The built image; fails (never skips) when it is missing: scripts/test.sh builds it."""
    try:
        found = podman("image", "exists", IMAGE, check=False)
    except FileNotFoundError:
        pytest.fail("podman is not installed (scripts/test.sh installs it and builds the image)", pytrace=False)
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} is missing: run scripts/image/build.sh", pytrace=False)
    return IMAGE


def pod_tmp(tmp_path: Path) -> list[str]:
    """`podman run` flags for a Pod's file system: the root read-only and nothing writable
    (no tmpfs on /run: no runtime directory) but /tmp, a directory of mode 0777 without the
    sticky bit, as a Kubernetes emptyDir is (podman's own --tmpfs /tmp is 1777, which
    platformdirs accepts and an emptyDir is not)."""
    tmp = tmp_path / "emptydir"
    tmp.mkdir()
    tmp.chmod(0o777)
    return ["--read-only", "--read-only-tmpfs=false", "-v", f"{tmp}:/tmp"]
