"""Fixtures of the operator tier: a real control plane (tests/fix_kube.py), memplane's
services as a real `memplane serve` process on a loopback port, memplane's CRDs and RBAC
installed, and the operator — in-process (kopf's KopfRunner) for most tests, authenticated
as a ServiceAccount bound only to the repository's ClusterRole (token from TokenRequest).

The in-process operator serves the namespaces named t-* (`k8s_namespace`); a test that runs
its own operator process uses other names, so two operators never share an object.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import kopf
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kopf.testing import KopfRunner
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane_operator.handlers import register
from memplane_operator.settings import OperatorSettings
from tests.fix_kube import KubeCluster

REPO = Path(__file__).resolve().parents[3]
OPERATOR_NAMESPACE = "memplane-system"
OPERATOR_SERVICE_ACCOUNT = "memplane-operator"
RESYNC_SECONDS = 1.0  # drift, usage and rotation checks in tests (60 s by default)
SERVICES_START_SECONDS = 180.0  # the embedding model loads on 2 busy cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_serving(target: str, process: asyncio.subprocess.Process, seconds: float) -> None:
    """Wait until *target* answers grpc.health.v1 SERVING (gRPC's own wait_for_ready, no
    polling sleeps). Raises `RuntimeError` if *process* exits first, `TimeoutError` after *seconds*."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        check = asyncio.ensure_future(stub.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=seconds))
        exited = asyncio.ensure_future(process.wait())
        done, _ = await asyncio.wait({check, exited}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            check.cancel()
            raise RuntimeError(f"memplane serve exited with {process.returncode} before serving")
        exited.cancel()
        reply = check.result()
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise RuntimeError(f"memplane serve reports {reply.status}")


@dataclass(frozen=True)
class Services:
    """A `memplane serve` process: its target and log file."""

    target: str
    log: Path
    process: asyncio.subprocess.Process


@pytest.fixture(scope="session")
async def services(pg_dsn: str, admin_key: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Services]:
    """Every memplane service in one real process on a free loopback port, over the session's
    database, with the session's admin key; stopped by SIGTERM at the end."""
    data_dir = tmp_path_factory.mktemp("services")
    port = free_port()
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(data_dir),
        "MEMPLANE_GRPC__PORT": str(port),
    }
    log = data_dir / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", "serve", env=env, stdout=out, stderr=subprocess.STDOUT
        )
    target = f"127.0.0.1:{port}"
    try:
        await wait_serving(target, process, SERVICES_START_SECONDS)
    except (RuntimeError, TimeoutError) as error:
        process.kill()
        await process.wait()
        pytest.fail(f"{error}\n{log.read_text(errors='replace')[-4000:]}", pytrace=False)
    yield Services(target=target, log=log, process=process)
    process.terminate()
    await process.wait()


@pytest.fixture(scope="session")
async def services_admin(services: Services, admin_key: str) -> AsyncIterator[AsyncMemplaneClient]:
    """An admin client of the services process."""
    async with AsyncMemplaneClient(services.target, admin_key, timeout=60.0) as client:
        yield client


@pytest.fixture(scope="session")
def memplane_crds(kube: KubeCluster) -> KubeCluster:
    """memplane's CRDs (operator/config/crd) Established and the operator's ClusterRole installed."""
    kube.kubectl("apply", "-f", str(REPO / "operator/config/crd"))
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/memoryworkspaces.memplane.io",
        "crd/sandboxclasses.memplane.io",
        "--timeout=60s",
    )
    kube.kubectl("apply", "-f", str(REPO / "operator/config/rbac/clusterrole.yaml"))
    return kube


@pytest.fixture(scope="session")
def operator_kubeconfig(memplane_crds: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig for the operator's ServiceAccount, bound to the ClusterRole and nothing
    else; its token comes from the TokenRequest API (`kubectl create token`)."""
    kube = memplane_crds
    kube.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    kube.kubectl("create", "serviceaccount", OPERATOR_SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE)
    kube.kubectl(
        "create",
        "clusterrolebinding",
        "memplane-operator",
        "--clusterrole=memplane-operator",
        f"--serviceaccount={OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}",
    )
    token = kube.kubectl("create", "token", OPERATOR_SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE, "--duration=6h")
    return kube.kubeconfig_for_token(token.stdout.strip(), tmp_path_factory.mktemp("operator") / "kubeconfig")


def operator_settings(services: Services, admin_key: str, **overrides: object) -> OperatorSettings:
    """Settings of a test operator: the services process, a 1 s resync, no liveness port."""
    values: dict[str, object] = {
        "admin_target": services.target,
        "admin_key": SecretStr(admin_key),
        "resync_seconds": RESYNC_SECONDS,
        "health_port": 0,
    }
    values.update(overrides)
    return OperatorSettings.model_validate(values)


@pytest.fixture(scope="session")
def operator(services: Services, admin_key: str, operator_kubeconfig: Path) -> Iterator[KopfRunner]:
    """The operator in-process (KopfRunner, its own thread and loop) for namespaces t-*,
    as the ServiceAccount; its exit is checked at the end of the session."""
    registry = kopf.OperatorRegistry()
    register(registry, operator_settings(services, admin_key))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(operator_kubeconfig)  # read by kopf's login and by kr8s
    try:
        with KopfRunner(["run", "--standalone", "--namespace=t-*"], registry=registry, timeout=60) as runner:
            yield runner
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
    assert runner.exception is None, runner.output[-4000:]
