"""Fixtures of the operator tier: a real control plane (tests/fix_kube.py), memplane's
services as a real `memplane serve` process on a loopback port, memplane's CRDs and RBAC
installed, and the operator — in-process (kopf's KopfRunner) for most tests, authenticated
as a ServiceAccount bound only to the repository's ClusterRole (token from TokenRequest).

The in-process operator serves the namespaces named t-* (`k8s_namespace`); a test that runs
its own operator process uses other names, so two operators never share an object.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import kopf
import pytest
from kopf.testing import KopfRunner
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane_operator.handlers import register
from memplane_operator.settings import OperatorSettings
from tests.fix_kube import KubeCluster
from tests.fix_process import Services

REPO = Path(__file__).resolve().parents[3]
OPERATOR_NAMESPACE = "memplane-system"
OPERATOR_SERVICE_ACCOUNT = "memplane-operator"
RESYNC_SECONDS = 1.0  # drift, usage and rotation checks in tests (60 s by default)
SERVICES_START_SECONDS = 180.0  # the embedding model loads on 2 busy cores


@pytest.fixture(scope="session")
async def services_admin(services: Services, admin_key: str) -> AsyncIterator[AsyncMemplaneClient]:
    """An admin client of the services process."""
    async with AsyncMemplaneClient(services.target, admin_key, timeout=60.0) as client:
        yield client


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


CANARY_SECONDS = 180.0


def _canary(kube: KubeCluster, runner: KopfRunner, log: list[str]) -> None:
    """Apply a MemoryWorkspace in a fresh t-* namespace and wait for Ready, watching the
    operator thread meanwhile: if it exits, or Ready never comes, fail the session's operator
    tests with the object and the operator's last log lines (kopf's records, kept in *log*)."""
    namespace = f"t-canary-{secrets.token_hex(4)}"
    kube.kubectl("create", "namespace", namespace)
    manifest = {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "MemoryWorkspace",
        "metadata": {"name": "canary", "namespace": namespace},
        "spec": {"tenantId": f"tn-canary-{secrets.token_hex(4)}", "reclaimPolicy": "Delete"},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    deadline = time.monotonic() + CANARY_SECONDS
    while not runner.future.done() and time.monotonic() < deadline:
        # kubectl wait watches the object; the slice only lets the loop look at the thread.
        done = kube.kubectl(
            "wait", "--for=condition=Ready", "memoryworkspace/canary", "-n", namespace, "--timeout=10s", check=False
        )
        if done.returncode == 0:
            kube.kubectl("delete", "namespace", namespace, "--wait=false")
            return
    state = kube.kubectl("get", "memoryworkspace/canary", "-n", namespace, "-o", "yaml", check=False).stdout
    exited = f"the operator exited: {runner.future.result()!r}\n" if runner.future.done() else ""
    pytest.fail(
        f"the canary MemoryWorkspace was not Ready in {CANARY_SECONDS:.0f} s\n{exited}--- object\n{state}"
        "--- operator log\n" + "\n".join(log[-80:]),
        pytrace=False,
    )


class _Records(logging.Handler):
    """Keeps the formatted records of kopf's loggers in a list (for a failing canary)."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(self.format(record))


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
def operator(
    services: Services, admin_key: str, operator_kubeconfig: Path, memplane_crds: KubeCluster
) -> Iterator[KopfRunner]:
    """The operator in-process (KopfRunner, its own thread and loop) for namespaces t-*,
    as the ServiceAccount; yielded once it has taken a canary MemoryWorkspace to Ready
    (kopf starts its watchers after it returns from startup); its exit is checked at the end."""
    registry = kopf.OperatorRegistry()
    register(registry, operator_settings(services, admin_key))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(operator_kubeconfig)  # read by kopf's login and by kr8s
    log: list[str] = []
    records = _Records(log)
    logging.getLogger("kopf").addHandler(records)
    try:
        with KopfRunner(["run", "--standalone", "--namespace=t-*"], registry=registry, timeout=60) as runner:
            _canary(memplane_crds, runner, log)
            logging.getLogger("kopf").removeHandler(records)
            yield runner
    finally:
        logging.getLogger("kopf").removeHandler(records)
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
    assert runner.exception is None, runner.output[-4000:]
