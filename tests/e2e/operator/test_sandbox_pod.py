"""SandboxClass type pod end to end (tests/e2e/operator/sandbox_cases.py) against the real
API server and the in-process operator: the Pod and claim it makes in the workspace's
namespace, looked at with kubectl. No kubelet runs here, so no Pod ever runs by itself:
the operator reports SandboxReady=False (PodNotReady) until the test writes the Pod's
Ready status through the status subresource, as a kubelet would (`PodDriver.settle`). The
sandbox's files are not reachable without a kubelet (exec): the pod backend's file I/O
runs in tests/contract (pod-io, on Podman). An unreachable backend is not a case here:
the pod backend is the API server the operator itself runs against."""

from __future__ import annotations

import json
from typing import Any

import kr8s.asyncio
import pytest

from memplane.sandbox.pod import PodSandboxes
from memplane_operator.backends.pod import CLASS_LABEL, WAITING_REASON, name_prefix
from tests.e2e.operator.kubeobjects import (
    apply,
    condition,
    event_with,
    events_during,
    example,
    get,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import BadCase, Driver, SandboxCases, Seen, reason_is
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.usefixtures("operator")
IMAGE = "registry.example/memplane-sandbox:1"  # never pulled: no kubelet
WATCH_SECONDS = 4


class PodDriver(Driver):
    """Pods and claims in the test's namespace, seen through kubectl."""

    type = "pod"
    files = False  # no kubelet: no exec into the Pod

    def __init__(self, kube: KubeCluster, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace

    def params(self) -> dict[str, Any]:
        return {"pod": {"image": IMAGE}}

    def bad(self) -> list[BadCase]:
        return [
            BadCase({"pod": {"image": "busy box"}}, "InvalidParameters", "spec.pod.image: 'busy box' is not an image"),
            BadCase(
                {"pod": {"image": IMAGE, "storageClassName": "Fast_SSD"}},
                "InvalidParameters",
                "spec.pod.storageClassName: 'Fast_SSD' is not an object name",
            ),
            BadCase(  # admission refuses a Pod of a RuntimeClass that does not exist
                {"pod": {"image": IMAGE, "runtimeClassName": "no-such-runtime"}},
                "BackendRefused",
                "cannot create the sandbox's Pod",
            ),
        ]

    async def _items(self, kind: str, tenant: str) -> list[dict[str, Any]]:
        found = await self.kube.akubectl(
            "get", kind, "-n", self.namespace, "-l", f"memplane.io/workspace={tenant}", "-o", "json"
        )
        return [i for i in json.loads(found.stdout)["items"] if not i["metadata"].get("deletionTimestamp")]

    async def held(self, tenant: str) -> dict[str, Seen]:
        """Each claim not being deleted, running when its Pod exists."""
        pods = {p["metadata"]["name"] for p in await self._items("pods", tenant)}
        claims = await self._items("pvc", tenant)
        assert pods <= {c["metadata"]["name"] for c in claims}  # never a Pod without its claim
        return {c["metadata"]["name"]: Seen(c["metadata"]["labels"][CLASS_LABEL], c["metadata"]["name"] in pods)
                for c in claims}  # fmt: skip

    async def settle(self, namespace: str, class_name: str, tenant: str) -> None:
        """Wait for the operator's Pod, then report it Ready as a kubelet would."""
        name = name_prefix(class_name) + tenant
        await self.kube.akubectl("wait", "--for=create", f"pod/{name}", "-n", namespace, "--timeout=90s", timeout=120)
        status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        await self.kube.akubectl(
            "patch", "-n", namespace, "pod", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
        )

    async def make(self, namespace: str, class_name: str, tenant: str) -> str:
        api = await kr8s.asyncio.api(kubeconfig=str(self.kube.kubeconfig))
        labels = {CLASS_LABEL: class_name}
        made = PodSandboxes(api, namespace, IMAGE, name_prefix=name_prefix(class_name), labels=labels)
        return (await made.provision(tenant)).ref


@pytest.fixture
def driver(kube: KubeCluster, k8s_namespace: str) -> PodDriver:
    return PodDriver(kube, k8s_namespace)


class TestPodSandboxes(SandboxCases):
    """The cases of sandbox_cases.py on pod, and what only a Pod does."""

    async def test_a_pod_not_ready_is_reported_and_its_objects_have_the_workspace_s_shape(
        self, kube: KubeCluster, k8s_namespace: str, driver: PodDriver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(
            k8s_namespace, "waits", sandbox={"sandboxClassName": sandbox_class_name, "storageSize": "2Gi"}
        )
        tenant = manifest["spec"]["tenantId"]
        name = name_prefix(sandbox_class_name) + tenant
        await apply(kube, manifest)
        await wait_for(kube, reason_is(WAITING_REASON), "memoryworkspace/waits", k8s_namespace)
        waiting = await get(kube, "memoryworkspace", "waits", k8s_namespace)
        says = condition(waiting, "SandboxReady")["message"]
        assert f"waiting for the Pod: pod {name} is Pending" in says
        assert condition(waiting, "Ready")["status"] == "False"
        assert waiting["status"]["phase"] == "Pending"  # waiting for what will come
        pending = await event_with(kube, k8s_namespace, "waits", "SandboxPending")
        assert pending["type"] == "Normal"
        assert f"waiting for the Pod: pod {name} is Pending" in pending["message"]
        # One Event when the wait began, none per retry (the step is retried every second here).
        assert await events_during(kube, k8s_namespace, "waits", WATCH_SECONDS) == []
        assert {k: waiting["status"]["sandbox"][k] for k in ("ref", "root", "state")} == {
            "ref": name, "root": "/sandbox", "state": "Pending",
        }  # fmt: skip

        pod = await get(kube, "pod", name, k8s_namespace)
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("MemoryWorkspace", "waits", waiting["metadata"]["uid"])
        assert pod["metadata"]["labels"][CLASS_LABEL] == sandbox_class_name
        assert pod["spec"]["containers"][0]["image"] == IMAGE
        claim = await get(kube, "pvc", name, k8s_namespace)
        assert "ownerReferences" not in claim["metadata"]  # reclaimPolicy decides the files' fate
        assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"  # spec.sandbox.storageSize

        await driver.settle(k8s_namespace, sandbox_class_name, tenant)
        ready = await wait_ready(kube, k8s_namespace, "waits")
        assert ready["status"]["sandbox"]["state"] == "Running"
        assert condition(ready, "SandboxReady")["reason"] == "Provisioned"

    async def test_a_pod_deleted_behind_the_operator_s_back_is_made_again(
        self, kube: KubeCluster, k8s_namespace: str, driver: PodDriver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(k8s_namespace, "drift", sandbox={"sandboxClassName": sandbox_class_name})
        tenant = manifest["spec"]["tenantId"]
        await apply(kube, manifest)
        ref = (await self.ready(kube, driver, k8s_namespace, "drift"))["status"]["sandbox"]["ref"]
        uid = (await get(kube, "pod", ref, k8s_namespace))["metadata"]["uid"]
        await kube.akubectl("delete", "pod", ref, "-n", k8s_namespace)  # returns once the Pod is gone
        # The operator's pass reports "waiting for the Pod: ... does not exist" (reason
        # WAITING_REASON) before its retry makes the new one, so wait on the Pod itself.
        await kube.akubectl("wait", "--for=create", f"pod/{ref}", "-n", k8s_namespace, "--timeout=90s", timeout=120)
        await wait_for(kube, reason_is(WAITING_REASON), "memoryworkspace/drift", k8s_namespace)
        # It served before: Degraded (a part unhealthy, retried by itself), not Pending nor Failed.
        await wait_for(kube, "jsonpath={.status.phase}=Degraded", "memoryworkspace/drift", k8s_namespace)
        assert (await get(kube, "pod", ref, k8s_namespace))["metadata"]["uid"] != uid
        assert await driver.held(tenant) == {ref: Seen(sandbox_class_name, True)}


async def test_the_pod_example_is_a_class_the_api_server_takes(kube: KubeCluster) -> None:
    sample = example("sandboxclass-pod.yaml")
    assert sample["spec"]["type"] == "pod"
    await kube.akubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(sample))
