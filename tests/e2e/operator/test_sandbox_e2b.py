"""SandboxClass type e2b end to end (tests/e2e/operator/sandbox_cases.py) against the real
API server and the in-process operator, whose real `e2b` SDK talks to loopback fakes of
E2B's control plane and envd (tests/fake_e2b.py, tests/fake_envd.py), selected as any SDK
user would: `E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_HTTP_VERSION` in the operator's
environment. The API key is read from a Secret in the operator's namespace. The fake's
sandboxes are looked at directly (state, metadata, files on the host)."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.filesync.convert import memory_from_proto
from memplane.mdview.names import file_name
from memplane.sandbox import SandboxHandle
from memplane.sandbox.e2b import METADATA_KEY, E2BSandboxes
from memplane.v1 import memory_pb2
from memplane_operator.backends.e2b import CLASS_METADATA, NAMESPACE_METADATA
from tests.e2e.operator.conftest import OPERATOR_NAMESPACE
from tests.e2e.operator.kubeobjects import (
    apply,
    condition,
    eventually,
    example,
    get,
    secret_env,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import (
    BadCase,
    SandboxCases,
    Seen,
    UnreachableCases,
    UnreachableDriver,
    reason_is,
    synced_is,
)
from tests.fake_e2b import FakeE2B
from tests.fix_kube import KubeCluster
from tests.fix_process import Services

pytestmark = pytest.mark.usefixtures("operator")
TEMPLATE = "memplane-sandbox"
NOWHERE = "http://127.0.0.1:1"  # nothing listens: connection refused


class E2BDriver(UnreachableDriver):
    """Sandboxes of the fake E2B, seen directly."""

    type = "e2b"
    root = None  # under the fake sandbox's home, a host directory
    unreachable_says = "E2B is unreachable"

    def __init__(self, cloud: FakeE2B, secret: str, environment: pytest.MonkeyPatch) -> None:
        self.cloud, self.secret, self.environment = cloud, secret, environment

    def params(self, key: str = "api-key", template: str = TEMPLATE) -> dict[str, object]:
        return {"e2b": {"template": template, "apiKeySecretRef": {"name": self.secret, "key": key}}}

    def bad(self) -> list[BadCase]:
        return [
            BadCase(self.params(template="my template"), "InvalidParameters", "spec.e2b.template: 'my template'"),
            BadCase(
                {"e2b": {"template": TEMPLATE, "apiKeySecretRef": {"name": "no-such-secret", "key": "api-key"}}},
                "InvalidParameters",
                f"spec.e2b.apiKeySecretRef: Secret {OPERATOR_NAMESPACE}/no-such-secret does not exist",
            ),
            BadCase(
                self.params(key="missing"),
                "InvalidParameters",
                f"spec.e2b.apiKeySecretRef: Secret {OPERATOR_NAMESPACE}/{self.secret} has no key 'missing'",
            ),
            BadCase(self.params(key="wrong"), "BackendRefused", "E2B rejected the API key"),
        ]

    async def held(self, tenant: str) -> dict[str, Seen]:
        with self.cloud.lock:
            boxes = [b for b in self.cloud.sandboxes.values() if b.metadata.get(METADATA_KEY) == tenant]
        return {b.sandbox_id: Seen(b.metadata[CLASS_METADATA], b.state == "running") for b in boxes}

    async def make(self, namespace: str, class_name: str, tenant: str) -> str:
        metadata = {CLASS_METADATA: class_name, NAMESPACE_METADATA: namespace}
        made = E2BSandboxes(template=TEMPLATE, metadata=metadata, connection=self.cloud.connection())
        return (await made.ensure(tenant)).ref

    async def write(self, ref: str, name: str, data: bytes) -> None:
        (self.cloud.sandboxes[ref].home / "memplane" / name).write_bytes(data)

    async def read(self, ref: str, name: str) -> bytes:
        return (self.cloud.sandboxes[ref].home / "memplane" / name).read_bytes()

    async def cleanup(self, class_name: str) -> None:
        backend = E2BSandboxes(connection=self.cloud.connection())
        with self.cloud.lock:
            left = [b for b in self.cloud.sandboxes.values() if b.metadata.get(CLASS_METADATA) == class_name]
        for box in left:
            await backend.destroy(SandboxHandle("e2b", box.metadata[METADATA_KEY], box.sandbox_id, ""))

    async def go_away(self, kube: KubeCluster, class_name: str) -> None:
        self.environment.setenv("E2B_API_URL", NOWHERE)

    async def come_back(self, kube: KubeCluster, class_name: str) -> None:
        self.environment.setenv("E2B_API_URL", self.cloud.api_url)


@pytest.fixture(scope="module")
def cloud() -> Iterator[FakeE2B]:
    with FakeE2B() as fake:
        yield fake


@pytest.fixture
def driver(kube: KubeCluster, cloud: FakeE2B, monkeypatch: pytest.MonkeyPatch) -> Iterator[E2BDriver]:
    """The fake E2B as the operator's SDK sees it (its environment), and a Secret with its
    key (api-key) and a key it refuses (wrong) in the operator's namespace."""
    monkeypatch.setenv("E2B_API_URL", cloud.api_url)
    monkeypatch.setenv("E2B_SANDBOX_URL", cloud.sandbox_url)
    monkeypatch.setenv("E2B_HTTP_VERSION", "1.1")
    monkeypatch.delenv("E2B_API_KEY", raising=False)  # only the Secret's key may be used
    secret = f"e2b-{secrets.token_hex(4)}"
    kube.kubectl(
        "create", "secret", "generic", secret, "-n", OPERATOR_NAMESPACE,
        f"--from-literal=api-key={cloud.api_key}", "--from-literal=wrong=e2b_not-the-key",
    )  # fmt: skip
    yield E2BDriver(cloud, secret, monkeypatch)
    kube.kubectl("delete", "secret", secret, "-n", OPERATOR_NAMESPACE, "--ignore-not-found")


class TestE2BSandboxes(SandboxCases, UnreachableCases):
    """The cases of sandbox_cases.py on e2b, and what only its key does."""

    async def test_a_memory_added_over_grpc_is_synced_into_the_e2b_sandbox(
        self, kube: KubeCluster, k8s_namespace: str, driver: E2BDriver, sandbox_class_name: str, services: Services
    ) -> None:
        sandbox = {"sandboxClassName": sandbox_class_name, "syncInterval": "1s"}
        await apply(kube, workspace(k8s_namespace, "syncs", sandbox=sandbox))
        ready = await wait_ready(kube, k8s_namespace, "syncs")
        key = (await secret_env(kube, k8s_namespace, ready["status"]["secretName"]))["MEMPLANE_API_KEY"]
        item = memory_pb2.MemoryInput(content="Erin keeps the on-call rota", name="Rota")
        async with AsyncMemplaneClient(services.target, key) as client:
            memory = (await client.add_memories([item]))[0]
        ref = ready["status"]["sandbox"]["ref"]
        path = f"Memory/{file_name(memory_from_proto(memory))}"

        async def synced() -> bytes | None:
            with contextlib.suppress(FileNotFoundError):
                return await driver.read(ref, path)
            return None

        text = (await eventually(synced, what=f"{path} in the E2B sandbox")).decode()
        assert f"memplane_id: {memory.id}" in text
        await wait_for(kube, synced_is("Synced"), "memoryworkspace/syncs", k8s_namespace)

    async def test_a_rotated_key_in_the_secret_is_used_at_the_next_pass(
        self, kube: KubeCluster, k8s_namespace: str, driver: E2BDriver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(k8s_namespace, "rotates", sandbox={"sandboxClassName": sandbox_class_name})
        await apply(kube, manifest)
        ref = (await wait_ready(kube, k8s_namespace, "rotates"))["status"]["sandbox"]["ref"]
        wrong = {"data": {"api-key": "ZTJiX25vdC10aGUta2V5"}}  # base64 of e2b_not-the-key
        await kube.akubectl("patch", "secret", driver.secret, "-n", OPERATOR_NAMESPACE, "-p", json.dumps(wrong))
        await wait_for(kube, reason_is("BackendRefused"), "memoryworkspace/rotates", k8s_namespace)
        refused = await get(kube, "memoryworkspace", "rotates", k8s_namespace)
        assert "E2B rejected the API key" in condition(refused, "SandboxReady")["message"]
        right = {"stringData": {"api-key": driver.cloud.api_key}}
        await kube.akubectl("patch", "secret", driver.secret, "-n", OPERATOR_NAMESPACE, "-p", json.dumps(right))
        await wait_for(kube, reason_is("Provisioned"), "memoryworkspace/rotates", k8s_namespace)
        assert (await get(kube, "memoryworkspace", "rotates", k8s_namespace))["status"]["sandbox"]["ref"] == ref


async def test_the_e2b_example_is_a_class_the_api_server_takes(kube: KubeCluster) -> None:
    sample = example("sandboxclass-e2b.yaml")
    assert sample["spec"]["type"] == "e2b"
    await kube.akubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(sample))
