"""What every SandboxClass type the operator drives through a backend must do, end to end
against the real API server and the in-process operator: one test class (`SandboxCases`,
plus `UnreachableCases` for a backend that can be out of reach) run once per type by a
`Driver` (tests/e2e/operator/test_sandbox_{docker,pod,e2b}.py) that knows how to look at
that type's sandboxes from outside the operator.

The sandbox is made and recorded in status.sandbox, suspended when idle and resumed on
activity with its files, destroyed or kept by reclaimPolicy (at deletion and when the
workspace moves to another class), adopted after a crash between create and status write;
a bad parameter is a condition naming the field; an unreachable backend is retried and
holds a deletion until it answers."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from memplane_operator.sandbox.backed import ACTIVITY_ANNOTATION
from tests.e2e.operator.kubeobjects import apply, condition, get, wait_for, wait_ready, workspace
from tests.fix_kube import KubeCluster


@dataclass(frozen=True)
class Seen:
    """A sandbox as its backend holds it: its SandboxClass and whether it runs."""

    class_name: str
    running: bool


@dataclass(frozen=True)
class BadCase:
    """Class parameters that the API server takes and the operator must refuse: the
    SandboxReady reason and what its message says."""

    params: dict[str, Any]
    reason: str
    says: str


class Driver:
    """One SandboxClass type seen from outside the operator (subclassed per type)."""

    type: ClassVar[str]
    root: ClassVar[str | None] = "/sandbox"  # status.sandbox.root, when fixed
    files: ClassVar[bool] = True  # whether `write` / `read` reach the sandbox's files here

    def params(self) -> dict[str, Any]:
        """The type's part of a working class spec ({"docker": {...}})."""
        raise NotImplementedError

    def bad(self) -> list[BadCase]:
        """Parameters to refuse, each naming its field or the backend's refusal."""
        raise NotImplementedError

    async def held(self, tenant: str) -> dict[str, Seen]:
        """The backend's sandboxes of *tenant* (not being deleted), by reference."""
        raise NotImplementedError

    async def settle(self, namespace: str, class_name: str, tenant: str) -> None:
        """Do what the sandbox's environment would do by itself to make it ready (a
        kubelet reporting a Pod Ready); nothing where the backend's ensure is enough."""

    async def make(self, namespace: str, class_name: str, tenant: str) -> str:
        """Make the sandbox the operator would, as a reconcile cut short after the
        backend's create would leave it (no status); its reference."""
        raise NotImplementedError

    async def write(self, ref: str, name: str, data: bytes) -> None:
        """Write *name* under the sandbox root (when `files`)."""
        raise NotImplementedError

    async def read(self, ref: str, name: str) -> bytes:
        """Read *name* under the sandbox root (when `files`)."""
        raise NotImplementedError

    async def cleanup(self, class_name: str) -> None:
        """Remove every sandbox of the class the test left."""


class UnreachableDriver(Driver):
    """A type whose backend can be taken out of reach and brought back."""

    async def go_away(self, kube: KubeCluster, class_name: str) -> None:
        raise NotImplementedError

    async def come_back(self, kube: KubeCluster, class_name: str) -> None:
        raise NotImplementedError

    unreachable_says: ClassVar[str]  # what SandboxReady's message quotes while it is away


def sandbox_class(name: str, kind: str, params: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A SandboxClass manifest."""
    return {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "SandboxClass",
        "metadata": {"name": name},
        "spec": {"type": kind, **params, **spec},
    }


async def patch_workspace(kube: KubeCluster, namespace: str, name: str, patch: dict[str, Any]) -> None:
    await kube.akubectl("patch", "memoryworkspace", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def state_is(state: str) -> str:
    return f"jsonpath={{.status.sandbox.state}}={state}"


def reason_is(reason: str) -> str:
    return f"jsonpath={{.status.conditions[?(@.type=='SandboxReady')].reason}}={reason}"


def synced_is(reason: str) -> str:
    """The SandboxSynced reason *reason* (the operator's file sync), for `wait_for`."""
    return f"jsonpath={{.status.conditions[?(@.type=='SandboxSynced')].reason}}={reason}"


class SandboxCases:
    """The cases every backed type passes; a module sets `driver` (a fixture) and gets
    `sandbox_class_name` (a fresh class of that type, removed at the end)."""

    @pytest.fixture
    async def sandbox_class_name(self, kube: KubeCluster, driver: Driver) -> AsyncIterator[str]:
        name = f"{driver.type}-{secrets.token_hex(4)}"
        await apply(kube, sandbox_class(name, driver.type, driver.params()))
        yield name
        await kube.akubectl("delete", "sandboxclass", name, "--ignore-not-found")
        await driver.cleanup(name)

    async def ready(self, kube: KubeCluster, driver: Driver, namespace: str, name: str) -> dict[str, Any]:
        """The MemoryWorkspace *name* once Ready, its sandbox settled by the driver."""
        obj = await get(kube, "memoryworkspace", name, namespace)
        spec = obj["spec"]
        class_name = spec["sandbox"]["sandboxClassName"]
        await driver.settle(namespace, class_name, spec["tenantId"])
        return await wait_ready(kube, namespace, name)

    async def test_made_suspended_when_idle_and_resumed_on_activity_with_its_files(
        self, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(k8s_namespace, "files", sandbox={"sandboxClassName": sandbox_class_name})
        tenant = manifest["spec"]["tenantId"]
        await apply(kube, manifest)
        ready = await self.ready(kube, driver, k8s_namespace, "files")
        sandbox = ready["status"]["sandbox"]
        assert (sandbox["className"], sandbox["type"], sandbox["state"]) == (
            sandbox_class_name, driver.type, "Running",
        )  # fmt: skip
        if driver.root is not None:
            assert sandbox["root"] == driver.root
        assert condition(ready, "SandboxReady")["reason"] == "Provisioned"
        assert await driver.held(tenant) == {sandbox["ref"]: Seen(sandbox_class_name, True)}
        if driver.files:
            await driver.write(sandbox["ref"], "note.md", b"kept while suspended")

        await patch_workspace(kube, k8s_namespace, "files", {"spec": {"sandbox": {"idleTimeout": "1s"}}})
        await wait_for(kube, state_is("Suspended"), "memoryworkspace/files", k8s_namespace)
        suspended = await get(kube, "memoryworkspace", "files", k8s_namespace)
        assert condition(suspended, "SandboxReady")["reason"] == "Suspended"
        assert condition(suspended, "Ready")["status"] == "True"  # suspended is the state asked for
        assert await driver.held(tenant) == {sandbox["ref"]: Seen(sandbox_class_name, False)}

        used = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await patch_workspace(
            kube, k8s_namespace, "files",
            {"metadata": {"annotations": {ACTIVITY_ANNOTATION: used}}, "spec": {"sandbox": {"idleTimeout": "1h"}}},
        )  # fmt: skip
        await driver.settle(k8s_namespace, sandbox_class_name, tenant)
        await wait_for(kube, state_is("Running"), "memoryworkspace/files", k8s_namespace)
        resumed = await get(kube, "memoryworkspace", "files", k8s_namespace)
        assert resumed["status"]["sandbox"]["ref"] == sandbox["ref"]  # the same sandbox, resumed
        assert resumed["status"]["sandbox"]["lastActivityTime"] >= used
        assert await driver.held(tenant) == {sandbox["ref"]: Seen(sandbox_class_name, True)}
        if driver.files:
            assert await driver.read(sandbox["ref"], "note.md") == b"kept while suspended"

    async def test_the_sandbox_class_idle_timeout_applies_to_workspaces_without_one(
        self, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        await apply(kube, sandbox_class(sandbox_class_name, driver.type, driver.params(), idleTimeout="1s"))
        manifest = workspace(k8s_namespace, "idle", sandbox={"sandboxClassName": sandbox_class_name})
        tenant = manifest["spec"]["tenantId"]
        await apply(kube, manifest)
        await driver.settle(k8s_namespace, sandbox_class_name, tenant)
        await wait_for(kube, state_is("Suspended"), "memoryworkspace/idle", k8s_namespace)
        assert [seen.running for seen in (await driver.held(tenant)).values()] == [False]

    @pytest.mark.parametrize("policy", ["Delete", "Retain"])
    async def test_reclaim_policy_decides_the_sandbox_at_deletion(
        self, policy: str, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(
            k8s_namespace, "gone", sandbox={"sandboxClassName": sandbox_class_name}, reclaimPolicy=policy
        )
        tenant = manifest["spec"]["tenantId"]
        await apply(kube, manifest)
        ref = (await self.ready(kube, driver, k8s_namespace, "gone"))["status"]["sandbox"]["ref"]
        await kube.akubectl("delete", "memoryworkspace", "gone", "-n", k8s_namespace, "--timeout=60s")
        expected = {} if policy == "Delete" else {ref: Seen(sandbox_class_name, False)}  # Retain: kept, suspended
        assert await driver.held(tenant) == expected

    @pytest.mark.parametrize("policy", ["Delete", "Retain"])
    async def test_moving_to_another_class_releases_the_old_sandbox_by_reclaim_policy(
        self, policy: str, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        other = f"{sandbox_class_name}-b"
        await apply(kube, sandbox_class(other, driver.type, driver.params()))
        try:
            manifest = workspace(
                k8s_namespace, "moves", sandbox={"sandboxClassName": sandbox_class_name}, reclaimPolicy=policy
            )
            tenant = manifest["spec"]["tenantId"]
            await apply(kube, manifest)
            old = (await self.ready(kube, driver, k8s_namespace, "moves"))["status"]["sandbox"]["ref"]
            await patch_workspace(kube, k8s_namespace, "moves", {"spec": {"sandbox": {"sandboxClassName": other}}})
            await wait_for(
                kube, f"jsonpath={{.status.sandbox.className}}={other}", "memoryworkspace/moves", k8s_namespace
            )
            new = (await self.ready(kube, driver, k8s_namespace, "moves"))["status"]["sandbox"]["ref"]
            expected = {new: Seen(other, True)}
            if policy == "Retain":
                expected[old] = Seen(sandbox_class_name, False)
            assert await driver.held(tenant) == expected
        finally:
            await kube.akubectl("delete", "memoryworkspace", "moves", "-n", k8s_namespace, "--timeout=60s")
            await kube.akubectl("delete", "sandboxclass", other)
            await driver.cleanup(other)

    async def test_a_sandbox_made_before_a_crash_is_adopted_not_duplicated(
        self, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(k8s_namespace, "adopt", sandbox={"sandboxClassName": sandbox_class_name})
        tenant = manifest["spec"]["tenantId"]
        ref = await driver.make(k8s_namespace, sandbox_class_name, tenant)
        await apply(kube, manifest)
        ready = await self.ready(kube, driver, k8s_namespace, "adopt")
        assert ready["status"]["sandbox"]["ref"] == ref
        assert list(await driver.held(tenant)) == [ref]

    async def test_bad_parameters_are_conditions_naming_the_field(
        self, kube: KubeCluster, k8s_namespace: str, driver: Driver, sandbox_class_name: str
    ) -> None:
        cases = driver.bad()
        names = [f"{sandbox_class_name}-bad{i}" for i in range(len(cases))]
        await apply(kube, *(sandbox_class(n, driver.type, c.params) for n, c in zip(names, cases, strict=True)))
        try:
            await apply(
                kube, *(workspace(k8s_namespace, n, sandbox={"sandboxClassName": n}) for n in names)
            )  # fmt: skip
            for name, case in zip(names, cases, strict=True):
                await wait_for(kube, reason_is(case.reason), f"memoryworkspace/{name}", k8s_namespace)
                obj = await get(kube, "memoryworkspace", name, k8s_namespace)
                assert case.says in condition(obj, "SandboxReady")["message"]
                assert condition(obj, "Ready")["status"] == "False"
                assert condition(obj, "DatabaseReady")["status"] == "True"  # the rest is provisioned
                assert obj["status"]["phase"] == "Failed"
        finally:
            for name in names:
                await kube.akubectl("delete", "memoryworkspace", name, "-n", k8s_namespace, "--timeout=60s")
            await kube.akubectl("delete", "sandboxclass", *names)
            for name in names:
                await driver.cleanup(name)


class UnreachableCases:
    """The cases of a backend that can be out of reach (docker, e2b; a pod sandbox's
    backend is the API server the operator itself needs)."""

    async def test_an_unreachable_backend_is_retried_and_holds_deletion_until_it_answers(
        self, kube: KubeCluster, k8s_namespace: str, driver: UnreachableDriver, sandbox_class_name: str
    ) -> None:
        manifest = workspace(k8s_namespace, "wait", sandbox={"sandboxClassName": sandbox_class_name})
        tenant = manifest["spec"]["tenantId"]
        away = workspace(k8s_namespace, "away", sandbox={"sandboxClassName": sandbox_class_name})
        await apply(kube, manifest)
        await wait_ready(kube, k8s_namespace, "wait")
        await driver.go_away(kube, sandbox_class_name)
        try:
            await apply(kube, away)  # a new workspace meanwhile: BackendUnavailable, retried
            await wait_for(kube, reason_is("BackendUnavailable"), "memoryworkspace/away", k8s_namespace)
            obj = await get(kube, "memoryworkspace", "away", k8s_namespace)
            assert driver.unreachable_says in condition(obj, "SandboxReady")["message"]
            assert obj["status"]["phase"] == "Pending"  # never served yet: waiting for the backend
            await kube.akubectl("delete", "memoryworkspace", "wait", "-n", k8s_namespace, "--wait=false")
            await wait_for(kube, "jsonpath={.status.phase}=Deleting", "memoryworkspace/wait", k8s_namespace)
            held = await get(kube, "memoryworkspace", "wait", k8s_namespace)
            assert "waiting for the sandbox backend" in condition(held, "Ready")["message"]
            assert len(await driver.held(tenant)) == 1  # still there: nothing reached it
        finally:
            await driver.come_back(kube, sandbox_class_name)  # the retried finalizer destroys it
        await wait_for(kube, "delete", "memoryworkspace/wait", k8s_namespace)
        assert await driver.held(tenant) == {}
        await wait_ready(kube, k8s_namespace, "away")  # and the retried ensure makes the other's
        await kube.akubectl("delete", "memoryworkspace", "away", "-n", k8s_namespace, "--timeout=60s")
