"""A real one-node Kubernetes cluster (registered as a plugin: ``-p tests.fix_node``).

`node` is a cluster whose Pods really run, for the session: containerd + runc + bridge CNI from
Debian, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
CoreDNS and kube-router's firewall (NetworkPolicy enforcement), started by
``scripts/k8s-testenv/node-up.sh`` and stopped by ``node-down.sh``, which undoes every host change.
The memplane image (``MEMPLANE_IMAGE``, built by scripts/image/build.sh) is saved from Podman and
imported into the node's containerd, beside a locally built pause and busybox
images; nothing is pulled from a registry. A default StorageClass ``local-hostpath`` has static
hostPath PersistentVolumes.

The node binaries come from ``MEMPLANE_K8S_NODE_BIN`` when set, else from
``scripts/k8s-testenv/build-node.sh`` (instant once built; cold, ~3 min wall after
build-toolchain.sh, done after collection, outside any test's timeout). Needs root and the Debian
packages of ``install-node-deps.sh`` (installed when missing). If anything cannot be had or the
node does not become Ready, every test using `node` FAILS, it is never skipped.

The `node` fixture itself lives in tests/e2e/cluster/conftest.py, scoped to that package: the
node (~750 MiB and some CPU) is stopped once the cluster tier is done, not at the session's end.
Tests that use `node` get the ``node`` marker (``-m "not node"`` leaves them out locally).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fix_kube import SCRIPTS_DIR, KubeCluster, _read_env, _tail, stream_script

NODE_BIN_ENV = "MEMPLANE_K8S_NODE_BIN"
IMAGE_ENV = "MEMPLANE_IMAGE"
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "coredns", "kube-router")
NODE_UP_TIMEOUT_SECONDS = 300.0  # node-up.sh gives up after 120 s of waiting for the node, plus image imports
NODE_DOWN_TIMEOUT_SECONDS = 120.0  # each stop step allows 10 s after SIGTERM
TAIL_LINES = 40


class NodeSetupError(RuntimeError):
    """The node's binaries, packages or images could not be had; the message says why."""


def _script(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run scripts/k8s-testenv/*name* with *args*, its progress on our stderr; its last stdout
    line. Raises NodeSetupError with the tail of its stderr if it fails."""
    code, out, tail = stream_script(
        [str(SCRIPTS_DIR / name), *args],
        {**os.environ, **(env or {})},
        lambda line: sys.stderr.write(f"[{name}] {line}\n"),
    )
    if code != 0:
        raise NodeSetupError(f"{name} exited with {code}; its stderr ends:\n" + "\n".join(tail or ["(nothing)"]))
    lines = out.strip().splitlines()
    return lines[-1] if lines else ""


def node_bin_dir() -> Path:
    """kubelet, kube-scheduler, kube-proxy, coredns and kube-router: ``MEMPLANE_K8S_NODE_BIN``
    when set (never built), else build-node.sh's output (built first when missing; no timeout).
    Raises NodeSetupError if a binary is missing or the build fails."""
    explicit = os.environ.get(NODE_BIN_ENV)
    found = Path(explicit) if explicit else Path(_script("build-node.sh"))
    missing = [b for b in NODE_BINARIES if not os.access(found / b, os.X_OK)]
    if missing:
        raise NodeSetupError(f"{found} lacks executable {', '.join(missing)}")
    return found


_NODE_BIN = pytest.StashKey[Path | NodeSetupError]()
NODE_FIXTURES = frozenset({"node"})


def _uses_node(item: pytest.Item) -> bool:
    return bool(NODE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "node: uses the real one-node cluster of tests/fix_node.py (`node`)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_node(item):
            item.add_marker(pytest.mark.node)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install the node's packages and build its binaries before the first test, when a selected test needs them."""
    config = session.config
    if config.option.collectonly or not any(_uses_node(item) for item in session.items):
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        try:
            _script("install-node-deps.sh")
            config.stash[_NODE_BIN] = node_bin_dir()
        except NodeSetupError as e:
            config.stash[_NODE_BIN] = e


def resolved_node_bin(config: pytest.Config) -> Path:
    found = config.stash.get(_NODE_BIN, None)
    if found is None:
        try:
            _script("install-node-deps.sh")
            found = node_bin_dir()
        except NodeSetupError as e:
            found = e
    if isinstance(found, NodeSetupError):
        pytest.fail(f"Kubernetes node unavailable: {found}", pytrace=False)
    return found


def _images(node_bin: Path, run_dir: Path) -> Path:
    """A directory of docker-archive tarballs for the node: pause, busybox, the policy agent and the
    memplane image (``MEMPLANE_IMAGE``, saved from Podman). Fails the test when the image is not set
    or cannot be saved."""
    image = os.environ.get(IMAGE_ENV)
    if not image:
        pytest.fail(f"{IMAGE_ENV} is not set (scripts/test.sh builds localhost/memplane:test)", pytrace=False)
    out = run_dir / "images"
    out.mkdir()
    try:
        _script("make-node-images.sh", str(out), str(node_bin))
    except NodeSetupError as e:
        pytest.fail(str(e), pytrace=False)
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman is not installed (scripts/image/build.sh installs it)", pytrace=False)
    saved = subprocess.run(  # noqa: S603 (podman, fixed arguments)
        [podman, "save", "--format", "docker-archive", "-o", str(out / "memplane.tar"), image],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CONTAINERS_CONF": str(SCRIPTS_DIR.parent / "image" / "containers.conf")},
    )
    if saved.returncode != 0:
        pytest.fail(f"podman save {image} failed: {saved.stderr}", pytrace=False)
    return out


@contextlib.contextmanager
def real_node(bin_dir: Path, node_bin: Path, run_dir: Path) -> Iterator[KubeCluster]:
    """Start the node (node-up.sh) in *run_dir* with the images of `_images`; stop it (node-down.sh)
    and undo its host changes on exit. Fails the test (never skips) if it is not Ready in time."""
    images = _images(node_bin, run_dir)
    state = run_dir / "node"
    started = time.monotonic()
    up = subprocess.run(  # noqa: S603 (our own script)
        [str(SCRIPTS_DIR / "node-up.sh"), str(bin_dir), str(node_bin), str(state)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "IMAGES_DIR": str(images), "KUBE_UP_WATCH_PID": str(os.getpid())},
        timeout=NODE_UP_TIMEOUT_SECONDS,
        check=False,
    )
    if up.returncode != 0:
        pytest.fail(
            f"node-up.sh exited with {up.returncode} after {time.monotonic() - started:.1f}s\n"
            f"--- stdout\n{up.stdout}\n--- stderr\n{up.stderr}",
            pytrace=False,
        )
    sys.stderr.write(up.stdout)
    shutil.rmtree(images, ignore_errors=True)  # imported: 700 MB less on disk
    env = _read_env(state / "env")
    cluster = KubeCluster(
        bin_dir=bin_dir,
        run_dir=state,
        kubeconfig=state / "kubeconfig",
        server=env["API_SERVER"],
        ca_file=state / "pki" / "ca.crt",
    )
    try:
        yield cluster
    finally:
        down = subprocess.run(  # noqa: S603 (our own script)
            [str(SCRIPTS_DIR / "node-down.sh"), str(state), "--purge"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=NODE_DOWN_TIMEOUT_SECONDS,
            check=False,
        )
        if down.returncode != 0:
            pytest.fail(f"node-down.sh exited with {down.returncode}:\n{down.stderr}", pytrace=False)
        if "SIGKILL" in down.stderr or "still under" in down.stderr:
            warnings.warn(f"node-down.sh: {down.stderr.strip()}", stacklevel=1)


def node_logs(cluster: KubeCluster, *names: str) -> str:
    """The last lines of the node's component logs (kubelet, containerd, …) for a failure message."""
    return "\n".join(f"--- {name}\n{_tail(cluster.run_dir / 'logs' / f'{name}.log')}" for name in names)
