"""The `kube` fixture's control plane behaves like a real cluster's: what the apiserver and the
controller-manager decide (CRDs, validation, garbage collection, namespace finalisation, TokenRequest,
RBAC) is real. Nothing here sleeps: each test waits on the object itself (`kubectl wait`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.fix_kube import KubeCluster, KubeCommandError, random_namespace_name

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.tests.memplane.io}
spec:
  group: tests.memplane.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
"""


def widget(name: str, size: int) -> str:
    return json.dumps(
        {"apiVersion": "tests.memplane.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}}
    )


def test_apiserver_answers_version_and_readyz(kube: KubeCluster) -> None:
    version = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == version["clientVersion"]["gitVersion"]
    assert kube.kubectl("get", "--raw", "/readyz").stdout == "ok"
    assert kube.server.startswith("https://127.0.0.1:")


def test_crd_becomes_established_and_validates(kube: KubeCluster, k8s_namespace: str) -> None:
    kube.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    try:
        kube.kubectl("wait", "--for=condition=established", "--timeout=30s", "crd/widgets.tests.memplane.io")
        kube.kubectl("create", "-n", k8s_namespace, "-f", "-", input=widget("ok", 3))
        assert kube.kubectl("get", "-n", k8s_namespace, "widget", "ok", "-o", "jsonpath={.spec.size}").stdout == "3"

        rejected = kube.kubectl("create", "-n", k8s_namespace, "-f", "-", input=widget("bad", 0), check=False)
        assert rejected.returncode != 0
        assert "spec.size" in rejected.stderr
        assert "greater than or equal to 1" in rejected.stderr
    finally:
        kube.kubectl("delete", "crd", "widgets.tests.memplane.io", "--wait=false", "--ignore-not-found", check=False)


def test_owner_reference_child_is_garbage_collected(kube: KubeCluster, k8s_namespace: str) -> None:
    kube.kubectl("create", "configmap", "owner", "-n", k8s_namespace)
    uid = kube.kubectl("get", "configmap", "owner", "-n", k8s_namespace, "-o", "jsonpath={.metadata.uid}").stdout
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "namespace": k8s_namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}],
        },
    }
    kube.kubectl("create", "-f", "-", input=json.dumps(child))

    kube.kubectl("delete", "configmap", "owner", "-n", k8s_namespace)  # background propagation: the GC's job

    kube.kubectl("wait", "--for=delete", "--timeout=60s", "configmap/child", "-n", k8s_namespace)
    gone = kube.kubectl("get", "configmap", "child", "-n", k8s_namespace, check=False)
    assert "NotFound" in gone.stderr


def test_namespace_deletion_finishes(kube: KubeCluster) -> None:
    name = random_namespace_name()
    kube.kubectl("create", "namespace", name)
    kube.kubectl("create", "configmap", "content", "-n", name)

    kube.kubectl("delete", "namespace", name, "--wait=false")

    kube.kubectl("wait", "--for=delete", "--timeout=60s", f"namespace/{name}")
    assert "NotFound" in kube.kubectl("get", "namespace", name, check=False).stderr


def test_service_account_token_authenticates_and_rbac_denies_secrets(
    kube: KubeCluster, k8s_namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("create", "serviceaccount", "reader", "-n", k8s_namespace)
    kube.kubectl("create", "secret", "generic", "hidden", "--from-literal=k=v", "-n", k8s_namespace)
    token = kube.kubectl("create", "token", "reader", "-n", k8s_namespace, "--duration=10m").stdout.strip()
    sa_config = kube.kubeconfig_for_token(token, tmp_path / "reader.kubeconfig", namespace=k8s_namespace)

    review = json.loads(kube.kubectl("auth", "whoami", "-o", "json", kubeconfig=sa_config).stdout)
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{k8s_namespace}:reader"

    can_i = kube.kubectl("auth", "can-i", "get", "secrets", kubeconfig=sa_config, check=False)
    assert (can_i.returncode, can_i.stdout.strip()) == (1, "no")
    denied = kube.kubectl("get", "secret", "hidden", kubeconfig=sa_config, check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr
    assert f'"system:serviceaccount:{k8s_namespace}:reader" cannot get resource "secrets"' in denied.stderr

    forged = kube.kubeconfig_for_token(token[:-4] + "AAAA", tmp_path / "forged.kubeconfig")
    assert "Unauthorized" in kube.kubectl("auth", "whoami", kubeconfig=forged, check=False).stderr


def test_helm_installs_and_uninstalls_a_chart(kube: KubeCluster, k8s_namespace: str, tmp_path: Path) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\nkubeVersion: '>=1.29.0-0'\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\n"
        "metadata: {name: '{{ .Release.Name }}-cfg'}\n"
        "data: {greeting: '{{ .Values.greeting }}'}\n"
    )

    kube.helm("install", "rel", str(chart), "-n", k8s_namespace, "--set", "greeting=hello")

    data = kube.kubectl("get", "configmap", "rel-cfg", "-n", k8s_namespace, "-o", "jsonpath={.data.greeting}").stdout
    assert data == "hello"
    kube.helm("uninstall", "rel", "-n", k8s_namespace)
    assert json.loads(kube.helm("list", "-n", k8s_namespace, "-o", "json").stdout) == []


async def test_akubectl_runs_concurrently_and_reports_errors(kube: KubeCluster) -> None:
    default, system = await asyncio.gather(
        kube.akubectl("get", "namespace", "default", "-o", "json"),
        kube.akubectl("get", "namespace", "kube-system", "-o", "json"),
    )
    assert json.loads(default.stdout)["metadata"]["name"] == "default"
    assert json.loads(system.stdout)["metadata"]["name"] == "kube-system"

    missing = await kube.akubectl("get", "namespace", "no-such-namespace", check=False)
    assert missing.returncode == 1
    assert "NotFound" in missing.stderr
    with pytest.raises(KubeCommandError, match="NotFound"):
        await kube.akubectl("get", "namespace", "no-such-namespace")
