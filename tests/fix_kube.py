"""Kubernetes control-plane fixtures (registered as a plugin: ``-p tests.fix_kube``).

`kube` is a real control plane for the session: etcd, kube-apiserver and kube-controller-manager
(garbage collector, namespace and serviceaccount controllers) on loopback ports, started by
``scripts/k8s-testenv/kube-up.sh`` and stopped by ``kube-down.sh``. There is no kubelet and no
scheduler: Pods are stored but never run, so test what the API server decides (validation, RBAC,
admission, garbage collection), and run memplane's own services as local processes.

The binaries come from ``MEMPLANE_K8S_BIN`` when set, else from
``scripts/k8s-testenv/build-toolchain.sh`` (instant once built; a cold build from the Go module
proxy takes ~15 min on 2 cores and happens after collection, outside any test's timeout, with its
progress on stderr). If the binaries cannot be had, or the cluster does not come up, every test
using `kube` FAILS, it is never skipped: CI goes red when this tier cannot run.

Tests that use `kube` get the ``k8s`` marker (``-m "not k8s"`` leaves them out locally).
`k8s_namespace` gives each test a fresh random namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = REPO_ROOT / "scripts" / "k8s-testenv"
BIN_DIR_ENV = "MEMPLANE_K8S_BIN"
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")

KUBE_UP_TIMEOUT_SECONDS = 120.0  # kube-up.sh itself gives up after 60 s of waiting for readiness
KUBE_DOWN_TIMEOUT_SECONDS = 60.0  # kube-down.sh allows each process 15 s after SIGTERM, 5 s after SIGKILL
COMMAND_TIMEOUT_SECONDS = 60.0  # default for one kubectl / helm invocation
TAIL_LINES = 40  # lines of a script's stderr quoted in a failure
OUTPUT_CHARS = 4000  # characters of a command's stdout / stderr quoted in a KubeCommandError


class KubeToolchainError(RuntimeError):
    """The Kubernetes binaries could not be found or built; the message says why and quotes the build's stderr."""


class KubeCommandError(subprocess.CalledProcessError):
    """A kubectl or helm command exited non-zero; ``str()`` shows the command, its stdout and its stderr."""

    def __str__(self) -> str:
        return (
            f"{' '.join(map(str, self.cmd))} exited with {self.returncode}\n"
            f"--- stdout\n{_clip(self.stdout)}\n--- stderr\n{_clip(self.stderr)}"
        )


def _clip(text: str | None) -> str:
    text = (text or "").rstrip()
    return text if len(text) <= OUTPUT_CHARS else "…" + text[-OUTPUT_CHARS:]


def _check_bin_dir(bin_dir: Path, origin: str) -> Path:
    missing = [name for name in REQUIRED_BINARIES if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise KubeToolchainError(f"{origin}: {bin_dir} lacks executable {', '.join(missing)}")
    return bin_dir


def stream_script(
    cmd: list[str], env: dict[str, str], progress: Callable[[str], None] | None = None
) -> tuple[int, str, deque[str]]:
    """Run *cmd* (one of our scripts: one result line on stdout, progress on stderr) in a session
    of its own, handing each stderr line to *progress* as it comes; its exit code, stdout and
    the last TAIL_LINES lines of its stderr. Interrupted, it is stopped with all its children."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(  # noqa: S603 (our own scripts)
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        for line in proc.stderr:  # stdout carries one line only, so it cannot fill its pipe meanwhile
            tail.append(line.rstrip("\n"))
            if progress is not None:
                progress(line.rstrip("\n"))
        stdout = proc.stdout.read()
        returncode = proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise
    return returncode, stdout, tail


def kube_bin_dir(progress: Callable[[str], None] | None = None) -> Path:
    """The directory holding etcd, kube-apiserver, kube-controller-manager, kubectl and helm.

    ``MEMPLANE_K8S_BIN`` when set (used as is, never built); otherwise the directory that
    ``scripts/k8s-testenv/build-toolchain.sh`` (run with ``WITH_KCM=1``) prints on its last stdout line,
    building it first if its stamp is missing. *progress* receives each stderr line of the build as it comes
    (nothing when the stamp exists). No timeout: a cold build takes ~15 min. Raises KubeToolchainError if a
    binary is missing or the build fails (the message quotes the last 40 lines of its stderr).
    """
    if explicit := os.environ.get(BIN_DIR_ENV):
        return _check_bin_dir(Path(explicit), BIN_DIR_ENV)
    script = SCRIPTS_DIR / "build-toolchain.sh"
    returncode, stdout, tail = stream_script([str(script)], {**os.environ, "WITH_KCM": "1"}, progress)
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines:
        raise KubeToolchainError(
            f"{script} exited with {returncode}; its stderr ends:\n" + "\n".join(tail or ["(nothing)"])
        )
    return _check_bin_dir(Path(lines[-1]), str(script))


@dataclass(frozen=True)
class KubeCluster:
    """A running control plane: admin credentials, and helpers running its kubectl and helm.

    *kubeconfig* authenticates as ``admin`` in ``system:masters`` (a static token; the same file has an
    ``admin-cert`` user with a client certificate); its default namespace is ``default``.
    """

    bin_dir: Path
    run_dir: Path
    kubeconfig: Path
    server: str  # https://127.0.0.1:<port>
    ca_file: Path  # the CA that signed the serving certificate and the admin client certificate

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """This process's environment with KUBECONFIG (*kubeconfig*, default the admin one) and bin_dir first
        on PATH; kubectl's discovery cache and helm's config, cache and data homes under run_dir, so nothing
        in ~/.kube or ~/.config/helm is read or written."""
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or self.kubeconfig),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECACHEDIR": str(self.run_dir / "kubectl-cache"),
            "HELM_CACHE_HOME": str(self.run_dir / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.run_dir / "helm" / "config"),
            "HELM_DATA_HOME": str(self.run_dir / "helm" / "data"),
        }

    def _kubectl_cmd(self, args: Sequence[str], kubeconfig: Path | None) -> list[str]:
        return [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
        timeout: float = COMMAND_TIMEOUT_SECONDS,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=<kubeconfig or admin> *args`` with *input* on stdin (text).

        Raises KubeCommandError (stdout and stderr in its message) if *check* and it exits non-zero, and
        subprocess.TimeoutExpired (after killing it) if it runs longer than *timeout* seconds.
        """
        return _run(self._kubectl_cmd(args, kubeconfig), input, self.env(kubeconfig), check, timeout)

    async def akubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
        timeout: float = COMMAND_TIMEOUT_SECONDS,  # noqa: ASYNC109 (mirrors kubectl(); on expiry the process is killed)
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl` as an asyncio subprocess: the same arguments, result and errors, without blocking the loop.

        The process is killed if the awaiting task is cancelled.
        """
        return await _arun(self._kubectl_cmd(args, kubeconfig), input, self.env(kubeconfig), check, timeout)

    def helm(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
        timeout: float = COMMAND_TIMEOUT_SECONDS,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``helm *args`` with KUBECONFIG set (*kubeconfig*, default the admin one); errors as `kubectl`.

        No kubelet runs, so ``--wait`` on anything with Pods and ``helm test`` never complete here.
        """
        return _run([str(self.bin_dir / "helm"), *args], input, self.env(kubeconfig), check, timeout)

    def kubeconfig_for_token(self, token: str, path: Path, namespace: str = "default") -> Path:
        """Write to *path* (mode 0600) a kubeconfig for this cluster that authenticates with the bearer *token*
        (e.g. a ServiceAccount token from ``kubectl create token``, i.e. a TokenRequest) and defaults to
        *namespace*; return *path*. Raises OSError if *path* cannot be written."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": {"cluster": "test", "user": "token", "namespace": namespace}}],
            "current-context": "token",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML: no quoting to get wrong
        return path


def _result(cmd: list[str], returncode: int, stdout: str, stderr: str, check: bool) -> subprocess.CompletedProcess[str]:
    if check and returncode != 0:
        raise KubeCommandError(returncode, cmd, stdout, stderr)
    return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)


def _run(
    cmd: list[str], input: str | None, env: dict[str, str], check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 (binaries we built, arguments from the test)
        cmd,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    return _result(cmd, done.returncode, done.stdout, done.stderr, check)


async def _arun(
    cmd: list[str], input: str | None, env: dict[str, str], check: bool, seconds: float
) -> subprocess.CompletedProcess[str]:
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(seconds):
            out, err = await proc.communicate(None if input is None else input.encode())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise subprocess.TimeoutExpired(cmd, seconds) from None
    except BaseException:  # cancelled: do not leave kubectl running
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    assert proc.returncode is not None
    return _result(cmd, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), check)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- the toolchain is resolved once, after collection, outside any test's timeout -----------------------------

_TOOLCHAIN = pytest.StashKey[Path | KubeToolchainError]()


KUBE_FIXTURES = frozenset({"kube", "fresh_kube"})


def _uses_kube(item: pytest.Item) -> bool:
    return bool(KUBE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "k8s: uses the real Kubernetes control plane of tests/fix_kube.py (`kube`)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_kube(item):
            item.add_marker(pytest.mark.k8s)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Resolve (and if need be build) the binaries before the first test, when a selected test needs them."""
    config = session.config
    if config.option.collectonly or not any(_uses_kube(item) for item in session.items):
        return

    def progress(line: str) -> None:
        sys.stderr.write(f"[k8s-testenv] {line}\n")
        sys.stderr.flush()

    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        try:
            config.stash[_TOOLCHAIN] = kube_bin_dir(progress)
        except KubeToolchainError as e:
            config.stash[_TOOLCHAIN] = e


def _read_env(path: Path) -> dict[str, str]:
    """RUN_DIR/env of kube-up.sh: KEY=value lines."""
    pairs = (line.partition("=") for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, _, value in pairs}


def resolved_bin_dir(config: pytest.Config) -> Path:
    """The toolchain resolved after collection (or now); `pytest.fail` if it cannot be had."""
    found = config.stash.get(_TOOLCHAIN, None)
    if found is None:  # requested dynamically (getfixturevalue): resolve now
        try:
            found = kube_bin_dir()
        except KubeToolchainError as e:
            found = e
    if isinstance(found, KubeToolchainError):
        pytest.fail(f"Kubernetes toolchain unavailable: {found}", pytrace=False)
    return found


@contextlib.contextmanager
def control_plane(bin_dir: Path, run_dir: Path) -> Iterator[KubeCluster]:
    """Start etcd, kube-apiserver and kube-controller-manager (kube-up.sh) in *run_dir*;
    stop them (kube-down.sh) on exit. Fails the test (never skips) if they do not come up
    within KUBE_UP_TIMEOUT_SECONDS; the message quotes the scripts' output and the logs."""
    started = time.monotonic()
    up = subprocess.run(  # noqa: S603 (our own script)
        [str(SCRIPTS_DIR / "kube-up.sh"), str(bin_dir), str(run_dir)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBE_UP_WATCH_PID": str(os.getpid())},
        timeout=KUBE_UP_TIMEOUT_SECONDS,
        check=False,
    )
    if up.returncode != 0:
        logs = "\n".join(f"--- {name}\n{_tail(run_dir / name)}" for name in ("apiserver.log", "kcm.log", "etcd.log"))
        pytest.fail(
            f"kube-up.sh exited with {up.returncode} after {time.monotonic() - started:.1f}s\n"
            f"--- stdout\n{up.stdout}\n--- stderr\n{up.stderr}\n{logs}",
            pytrace=False,
        )
    env = _read_env(run_dir / "env")
    cluster = KubeCluster(
        bin_dir=bin_dir,
        run_dir=run_dir,
        kubeconfig=run_dir / "kubeconfig",
        server=f"https://127.0.0.1:{env['API_PORT']}",
        ca_file=run_dir / "pki" / "ca.crt",
    )
    try:
        yield cluster
    finally:
        down = subprocess.run(  # noqa: S603 (our own script)
            [str(SCRIPTS_DIR / "kube-down.sh"), str(run_dir)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=KUBE_DOWN_TIMEOUT_SECONDS,
            check=False,
        )
        if down.returncode != 0:
            pytest.fail(f"kube-down.sh exited with {down.returncode}:\n{down.stderr}", pytrace=False)
        if down.stderr:  # a process needed SIGKILL: worth seeing, not worth failing a test over
            warnings.warn(f"kube-down.sh: {down.stderr.strip()}", stacklevel=1)


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """The session's control plane (see the module docstring), up in ~4-6 s once the binaries exist.

    Fails (never skips) if the binaries cannot be found or built, or if kube-up.sh does not report the
    apiserver ready and the controller-manager acting within 120 s; the message quotes the scripts' output
    and the logs. Stopped by kube-down.sh at the end of the session; a watchdog stops it too if this
    process dies without tearing down.
    """
    with control_plane(resolved_bin_dir(request.config), tmp_path_factory.mktemp("kube")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def fresh_kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A control plane of the test module's own (~4 s to start), for tests that must own the
    whole cluster (a `helm install` of cluster-scoped objects such as CRDs)."""
    with control_plane(resolved_bin_dir(request.config), tmp_path_factory.mktemp("fresh-kube")) as cluster:
        yield cluster


def random_namespace_name() -> str:
    """A fresh namespace name ("t-" and 12 hex digits)."""
    return f"t-{secrets.token_hex(6)}"


@pytest.fixture
def k8s_namespace(kube: KubeCluster) -> Iterator[str]:
    """The name of a namespace created for this test; deleted at teardown without waiting for it to go.

    Its ``default`` ServiceAccount appears shortly after creation (serviceaccount controller), not
    necessarily before the test starts. Raises KubeCommandError if the namespace cannot be created.
    """
    name = random_namespace_name()
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
