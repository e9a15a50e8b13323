"""The chart as helm renders it, and as the API server judges each rendering: lint, a matrix
of values, restricted security defaults, probes and ports, the schema (every value covered,
a bad value named by its JSON path), CRDs and RBAC identical to the operator's source."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from memplane.server.settings import Settings
from memplane_operator.rbac import cluster_rules, namespaced_rules, own_namespace_rules
from tests.e2e.chart.helmtools import CHART, REPO, by_kind, named, pod_specs, render, set_flags
from tests.fix_kube import KubeCluster, KubeCommandError

BASE = {"database.dsnSecret.name": "memplane-db"}
MATRIX: dict[str, dict[str, str]] = {
    "defaults": BASE,
    "bundled-postgresql": {"postgresql.enabled": "true"},
    "hpa": {
        **BASE,
        **{f"services.{c}.autoscaling.enabled": "true" for c in ("retrieval", "writeback", "compaction")},
    },
    "no-networkpolicy": {**BASE, "networkPolicy.enabled": "false"},
    "namespaced-rbac": {**BASE, "rbac.namespaced": "true", "operator.namespaces": '["team-a","team-b"]'},
    "metrics": {**BASE, "metrics.enabled": "true"},
    "no-operator-no-crds": {**BASE, "operator.enabled": "false", "crds.create": "false"},
    "console": {**BASE, "console.enabled": "true"},
    "console-one-namespace": {**BASE, "console.enabled": "true", "console.memoryWorkspaces.namespace": "team-a"},
    "several-clusters": {
        "database.clusters": json.dumps(
            [
                {
                    "name": "a",
                    "dsnSecret": {"name": "pg-a-app", "key": "uri"},
                    "readDsnSecret": {"name": "pg-a-ro", "key": "uri"},
                },
                {"name": "b", "dsnSecret": {"name": "pg-b-app", "key": "uri"}},
                {"name": "c", "dsnSecret": {"name": "pg-c-app", "key": "uri"}},
            ]
        )
    },
}
NAMESPACES = ("memplane", "team-a", "team-b")


@pytest.fixture(scope="module")
def cluster(kube: KubeCluster) -> KubeCluster:
    """The session's API server with the namespaces the renderings live in."""
    for name in NAMESPACES:
        kube.kubectl("create", "namespace", name, check=False)
    return kube


@pytest.mark.parametrize("case", list(MATRIX))
def test_every_rendering_lints_and_the_api_server_accepts_every_object(cluster: KubeCluster, case: str) -> None:
    values = MATRIX[case]
    cluster.helm("lint", "--strict", str(CHART), *set_flags(values))
    docs = render(cluster, values)
    for doc in docs:  # where `helm install -n memplane` would put them
        if doc["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            doc["metadata"].setdefault("namespace", "memplane")
    text = "\n---\n".join(json.dumps(d) for d in docs)
    # A real server-side validation (helm's --dry-run=server does not validate bodies).
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            continue  # the operator's own files byte for byte (labelled part-of: memplane only)
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "memplane", doc["metadata"]["name"]
        assert labels.get("app.kubernetes.io/instance") == "mp"
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"


# Pods that talk to the API server: the operator, the uninstall check (it lists MemoryWorkspaces)
# and the console (it lists them for the admin view).
WITH_TOKEN = {"mp-memplane-operator", "mp-memplane-uninstall-check", "mp-memplane-console"}


@pytest.mark.parametrize("volume_permissions", ["true", "false"])
def test_pods_run_restricted(cluster: KubeCluster, volume_permissions: str) -> None:
    values = {
        **MATRIX["bundled-postgresql"],
        "postgresql.volumePermissions.enabled": volume_permissions,
        "console.enabled": "true",
    }
    docs = render(cluster, values) + by_kind(render(cluster, values, "--is-upgrade"), "Job")
    specs = pod_specs(docs)
    assert {name for name, _ in specs} >= {
        "mp-memplane-console",
        "mp-memplane-retrieval",
        "mp-memplane-operator",
        "mp-memplane-postgresql",
        "mp-memplane-migrate-1",
        "mp-memplane-uninstall-check",
    }
    root = []
    for name, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            if context.get("runAsUser") == 0:
                root.append((name, container["name"], context["capabilities"]))
                continue
            assert context["capabilities"] == {"drop": ["ALL"]}, name
        assert (spec.get("automountServiceAccountToken") is False) is (name not in WITH_TOKEN), name
    # The one exception, which the `baseline` Pod Security level allows: a missing or empty
    # data directory given to the database's uid on a volume that ignores fsGroup.
    expected = [
        ("mp-memplane-postgresql", "volume-permissions", {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]})
    ]
    assert root == (expected if volume_permissions == "true" else [])


def _quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (cores, bytes)."""
    text = str(value)
    for suffix, factor in (
        ("Ki", 2**10),
        ("Mi", 2**20),
        ("Gi", 2**30),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
    ):
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * factor
    return float(text)


def test_the_default_requests_fit_a_small_node(cluster: KubeCluster) -> None:
    """Everything the trial of README.md#on-kubernetes installs (the four services at their replicas, the
    operator, the bundled PostgreSQL) asks at most half of a 2-core node's CPU and 2.5 GiB."""
    docs = render(cluster, MATRIX["bundled-postgresql"])
    cpu = memory = 0.0
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            requests = container["resources"]["requests"]
            cpu += _quantity(requests["cpu"]) * doc["spec"]["replicas"]
            memory += _quantity(requests["memory"]) * doc["spec"]["replicas"]
            # measured: a serve process is ~225 MiB resident after its first searches
            assert _quantity(container["resources"]["limits"]["memory"]) >= 512 * 2**20, doc["metadata"]["name"]
    assert cpu <= 1.0
    assert memory <= 2.5 * 2**30


def test_services_probes_and_ports(cluster: KubeCluster) -> None:
    docs = render(cluster, BASE)
    for component, grpc_name in (
        ("retrieval", "memplane.v1.RetrievalService"),
        ("writeback", "memplane.v1.WriteBackService"),
        ("compaction", "memplane.v1.CompactionService"),
        ("admin", "memplane.v1.AdminService"),
    ):
        deployment = named(docs, "Deployment", f"mp-memplane-{component}")
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][:3] == ["serve", "--services", component]
        assert container["readinessProbe"]["grpc"] == {"port": 50051, "service": grpc_name}
        assert container["livenessProbe"]["grpc"] == {"port": 50051}
        env = {e["name"]: e for e in container["env"]}
        assert env["MEMPLANE_DATABASE__DSN"]["valueFrom"]["secretKeyRef"] == {"name": "memplane-db", "key": "dsn"}
        assert env["MEMPLANE_DATABASE__MIGRATE_ON_START"]["value"] == "false"
        service = named(docs, "Service", f"mp-memplane-{component}")
        assert service["spec"]["ports"][0] == {
            "name": "grpc",
            "port": 50051,
            "targetPort": "grpc",
            "protocol": "TCP",
            "appProtocol": "grpc",
        }
    operator = named(docs, "Deployment", "mp-memplane-operator")
    assert operator["spec"]["replicas"] == 1
    assert operator["spec"]["strategy"] == {"type": "Recreate"}
    [container] = operator["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MEMPLANE_OPERATOR_ADMIN_TARGET"] == "mp-memplane-admin.memplane.svc:50051"
    assert (
        json.loads(env["MEMPLANE_OPERATOR_SERVICE_TARGETS"])["writeback"] == "mp-memplane-writeback.memplane.svc:50051"
    )
    # PDBs only where they protect something (2 replicas), never on a single replica.
    assert sorted(p["metadata"]["name"] for p in by_kind(docs, "PodDisruptionBudget")) == [
        "mp-memplane-retrieval",
        "mp-memplane-writeback",
    ]
    assert by_kind(docs, "HorizontalPodAutoscaler") == []
    job = named(docs, "Job", "mp-memplane-migrate-1")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_matrix_switches(cluster: KubeCluster) -> None:
    bundled = render(cluster, MATRIX["bundled-postgresql"])
    # The database is made by the install: each service pod migrates it first, the Job runs on upgrades.
    assert [j["metadata"]["name"] for j in by_kind(bundled, "Job")] == ["mp-memplane-uninstall-check"]
    job = named(render(cluster, MATRIX["bundled-postgresql"], "--is-upgrade"), "Job", "mp-memplane-migrate-1")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    [migrate] = named(bundled, "Deployment", "mp-memplane-retrieval")["spec"]["template"]["spec"]["initContainers"]
    assert migrate["command"][-1].endswith("; exec memplane migrate")
    assert 'pg_isready -q -d "$MEMPLANE_DATABASE__DSN"' in migrate["command"][-1]
    assert [m["name"] for m in migrate["volumeMounts"]] == ["tmp"]  # /tmp: the root is read-only
    no_migrations = render(cluster, {**MATRIX["bundled-postgresql"], "migrations.enabled": "false"})
    assert (
        "initContainers" not in named(no_migrations, "Deployment", "mp-memplane-retrieval")["spec"]["template"]["spec"]
    )
    assert (
        "initContainers"
        not in named(render(cluster, BASE), "Deployment", "mp-memplane-retrieval")["spec"]["template"]["spec"]
    )
    assert named(bundled, "StatefulSet", "mp-memplane-postgresql")
    hpa = render(cluster, MATRIX["hpa"])
    assert len(by_kind(hpa, "HorizontalPodAutoscaler")) == 3
    # Nothing live to read (helm template): a new Deployment starts at minReplicas.
    assert named(hpa, "Deployment", "mp-memplane-retrieval")["spec"]["replicas"] == 2
    assert named(hpa, "Deployment", "mp-memplane-compaction")["spec"]["replicas"] == 1
    assert by_kind(render(cluster, MATRIX["no-networkpolicy"]), "NetworkPolicy") == []
    namespaced = render(cluster, MATRIX["namespaced-rbac"])
    roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]): r["rules"] for r in by_kind(namespaced, "Role")}
    assert roles == {
        ("team-a", "mp-memplane-operator"): namespaced_rules(),
        ("team-b", "mp-memplane-operator"): namespaced_rules(),
        ("memplane", "mp-memplane-operator-class-secrets"): own_namespace_rules(),  # the release's namespace
    }
    assert named(namespaced, "ClusterRole", "mp-memplane-operator")["rules"] == cluster_rules()
    without = render(cluster, MATRIX["no-operator-no-crds"])
    assert not {"CustomResourceDefinition", "ClusterRole"} & {d["kind"] for d in without}
    metrics = render(cluster, {**MATRIX["metrics"], "metrics.serviceMonitor.enabled": "true"})
    [monitor] = by_kind(metrics, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert by_kind(render(cluster, MATRIX["metrics"]), "ServiceMonitor") == []  # off by default


def test_crds_and_rbac_are_the_operators_own(cluster: KubeCluster) -> None:
    for path in sorted((REPO / "operator/config/crd").glob("*.yaml")):
        chart_copy = (CHART / "templates/crds" / path.name).read_text().splitlines(keepends=True)
        source = path.read_text().splitlines(keepends=True)
        assert chart_copy[0] == source[0]  # the generated-file header
        assert chart_copy[1] == "{{- if .Values.crds.create }}\n"
        assert chart_copy[-1] == "{{- end }}\n"
        assert chart_copy[2:-1] == source[1:], path.name  # byte for byte
    docs = render(cluster, BASE)
    for crd in by_kind(docs, "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    role = yaml.safe_load((REPO / "operator/config/rbac/clusterrole.yaml").read_text())
    assert named(docs, "ClusterRole", "mp-memplane-operator")["rules"] == role["rules"]


def _leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(child, (*path, key))
    else:
        yield path


def _schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node = schema
    for part in path:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        props = node.get("properties")
        if props is None:
            return node  # a free-form object (resources, nodeSelector, ...)
        if part not in props:
            return None
        node = props[part]
    return node


def test_the_schema_covers_every_value_and_every_value_has_a_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [".".join(p) for p in _leaves(values) if _schema_at(schema, p) is None]
    assert missing == [], "values without a schema"
    for key, node in schema["properties"].items():
        if key != "config":
            assert key in values, f"{key} is in the schema but not in values.yaml"
        assert node.get("description") or "$ref" in node, key
    for key in schema["properties"]["services"]["properties"]:
        assert key in values["services"], key


def test_the_config_schema_is_settings_minus_what_the_chart_sets() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    managed = {"data_dir", "database.dsn", "database.read_dsn", "database.migrate_on_start", "auth.admin_key"}
    managed |= {"database.clusters"}
    managed |= {"auth.admin_key_file", "auth.bootstrap_default_workspace", "grpc.host", "grpc.port"}
    managed |= {"embedding.api_key", "llm.api_key", "rerank.api_key"}
    expected: set[str] = set()
    for name, field in Settings.model_fields.items():
        group = field.annotation
        if isinstance(group, type) and hasattr(group, "model_fields"):
            expected |= {f"{name}.{sub}" for sub in group.model_fields}
        else:
            expected.add(name)
    found = {
        f"{group}.{sub}" if "properties" in node else group
        for group, node in schema["properties"].items()
        for sub in (node.get("properties") or {None: None})
    }
    assert found == expected - managed


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"services.retrieval.replicas": "0"}, "at '/services/retrieval/replicas': minimum: got 0, want 1"),
        (
            {"config.retrieval.fusion": "best"},
            "at '/config/retrieval/fusion': value must be one of 'rrf', 'weighted', 'dbsf', 'zscore'",
        ),
        ({"config.grpc.port": "1"}, "at '/config/grpc': additional properties 'port' not allowed"),
        ({"image.pullPolicy": "Sometimes"}, "at '/image/pullPolicy'"),
        ({"typo": "1"}, "additional properties 'typo' not allowed"),
        ({"postgresql.storage.size": "lots"}, "at '/postgresql/storage/size'"),
        ({"operator.namespaces": '["Bad_NS"]'}, "at '/operator/namespaces/0'"),
        ({"services.writeback.pdb.minAvailable": '"half"'}, "at '/services/writeback/pdb/minAvailable'"),
        # Resource quantities, checked at install rather than by the API server after the
        # pre-upgrade migration Job has run.
        (
            {"services.retrieval.resources.requests.memory": "256MB"},
            "at '/services/retrieval/resources/requests/memory'",
        ),
        ({"services.admin.resources.limits.cpu": "1core"}, "at '/services/admin/resources/limits/cpu'"),
        ({"operator.resources.requests.memory": "-1Gi"}, "at '/operator/resources/requests/memory'"),
        ({"postgresql.resources.requests.cpu": "1O0m"}, "at '/postgresql/resources/requests/cpu'"),
        (
            {"migrations.resources.limits.ephemeral-storage": "1 Gi"},
            "at '/migrations/resources/limits/ephemeral-storage'",
        ),
        ({"services.compaction.resources.request": '{"cpu": 1}'}, "at '/services/compaction/resources'"),
    ],
)
def test_a_bad_value_names_its_json_path(cluster: KubeCluster, values: dict[str, str], message: str) -> None:
    with pytest.raises(KubeCommandError) as caught:
        render(cluster, {**BASE, **values})
    assert message in caught.value.stderr


def test_several_clusters_reach_every_services_pod_and_the_migration_job_from_their_secrets(
    cluster: KubeCluster,
) -> None:
    """database.clusters: each cluster's DSNs from its Secrets, and MEMPLANE_DATABASE__CLUSTERS
    naming them as $(VAR) references (Kubernetes expands them from the variables before it),
    which the services' settings read as those clusters; no single DSN beside them."""
    docs = render(cluster, MATRIX["several-clusters"])
    containers = [named(docs, "Job", "mp-memplane-migrate-1")["spec"]["template"]["spec"]["containers"][0]]
    containers += [
        named(docs, "Deployment", f"mp-memplane-{c}")["spec"]["template"]["spec"]["containers"][0]
        for c in ("retrieval", "writeback", "compaction", "admin")
    ]
    for container in containers:
        env = container["env"]
        by_name = {e["name"]: e for e in env}
        assert "MEMPLANE_DATABASE__DSN" not in by_name
        assert "MEMPLANE_DATABASE__READ_DSN" not in by_name
        secrets = {
            n: by_name[n]["valueFrom"]["secretKeyRef"]["name"] for n in by_name if n.startswith("MEMPLANE_CLUSTER_")
        }
        assert secrets == {
            "MEMPLANE_CLUSTER_0_DSN": "pg-a-app",
            "MEMPLANE_CLUSTER_0_READ_DSN": "pg-a-ro",
            "MEMPLANE_CLUSTER_1_DSN": "pg-b-app",
            "MEMPLANE_CLUSTER_2_DSN": "pg-c-app",
        }
        listed = by_name["MEMPLANE_DATABASE__CLUSTERS"]["value"]
        order = [e["name"] for e in env]
        for ref in re.findall(r"\$\((\w+)\)", listed):  # each defined before it: expandable
            assert order.index(ref) < order.index("MEMPLANE_DATABASE__CLUSTERS")
        expanded = re.sub(r"\$\((\w+)\)", lambda m: f"postgresql://{m.group(1).lower()}/app", listed)
        clusters = Settings.model_validate({"database": {"clusters": json.loads(expanded)}}).database.cluster_list()
        assert clusters is not None
        assert [(c.name, c.dsn, c.read_dsn) for c in clusters] == [
            ("a", "postgresql://memplane_cluster_0_dsn/app", "postgresql://memplane_cluster_0_read_dsn/app"),
            ("b", "postgresql://memplane_cluster_1_dsn/app", None),
            ("c", "postgresql://memplane_cluster_2_dsn/app", None),
        ]
    with pytest.raises(KubeCommandError) as caught:
        render(cluster, {**MATRIX["several-clusters"], "postgresql.enabled": "true"})
    assert "database.clusters needs postgresql.enabled=false" in caught.value.stderr


def test_a_missing_database_is_explained(cluster: KubeCluster) -> None:
    with pytest.raises(KubeCommandError) as caught:
        render(cluster, {})
    assert "database.dsnSecret.name is required" in caught.value.stderr


def test_config_becomes_environment_variables(cluster: KubeCluster) -> None:
    docs = render(
        cluster,
        {
            **BASE,
            "config.retrieval.fusion": "rrf",
            "config.limits.max_top_k": "1000000",
            "config.compaction.compact_ratio": "0.5",
        },
    )
    data = named(docs, "ConfigMap", "mp-memplane-config")["data"]
    assert data["MEMPLANE_RETRIEVAL__FUSION"] == "rrf"
    assert data["MEMPLANE_LIMITS__MAX_TOP_K"] == "1000000"  # not 1e+06
    assert data["MEMPLANE_COMPACTION__COMPACT_RATIO"] == "0.5"
    assert data["MEMPLANE_LOG_JSON"] == "true"
    for name, value in data.items():  # each one a real setting
        group, _, field = name.removeprefix("MEMPLANE_").lower().partition("__")
        assert Settings.model_validate({group: {field: value}} if field else {group: value})


def test_notes_print_a_workspace_the_api_server_accepts(cluster: KubeCluster, memplane_crds: KubeCluster) -> None:
    # crds.create=false: even a dry run refuses CRDs that exist on the cluster unowned by the release
    flags = set_flags({**BASE, "crds.create": "false"})
    done = cluster.helm("install", "mp", str(CHART), "--namespace", "memplane", "--dry-run=client", *flags)
    notes = done.stdout.split("NOTES:", 1)[1]
    manifest = re.search(r"^apiVersion: memplane.io/v1alpha1\n(?:.+\n)+?(?=\n)", notes, re.MULTILINE)
    assert manifest is not None, notes
    workspace = yaml.safe_load(manifest.group(0))
    assert workspace["kind"] == "MemoryWorkspace"
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(workspace))
    assert "secretRef:\n              name: support-bot-memplane" in notes
    assert "kubectl label namespace team-a memplane.io/client=true" in notes


def test_the_helm_test_pod_checks_every_service(cluster: KubeCluster) -> None:
    docs = render(cluster, BASE)
    pod = named(docs, "Pod", "mp-memplane-test-health")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # deleted passed or failed (no Pod outlives `helm test`, hence none `helm uninstall`),
    # the failure's logs printed by helm
    policy = pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert sorted(policy) == ["before-hook-creation", "hook-failed", "hook-succeeded"]
    assert pod["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed"
    checks = {c["name"]: c["args"] for c in pod["spec"]["containers"]}
    assert checks["retrieval"] == [
        "health",
        "--wait",
        "60",
        "--target",
        "mp-memplane-retrieval.memplane.svc:50051",
        "--service",
        "memplane.v1.RetrievalService",
    ]
    assert sorted(checks) == ["admin", "compaction", "retrieval", "writeback"]


@pytest.mark.parametrize("quantity", ["100m", "0.5", "1", "2Gi", "1500Mi", "1e3", "512k", ".5"])
def test_every_quantity_kubernetes_takes_is_accepted(cluster: KubeCluster, quantity: str) -> None:
    values = {
        **BASE,
        "services.retrieval.resources.requests.cpu": quantity,
        "operator.resources.limits.memory": quantity,
    }
    [deployment] = [
        d
        for d in render(cluster, values)
        if d["metadata"]["name"] == "mp-memplane-retrieval" and d["kind"] == "Deployment"
    ]
    assert str(deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]) == quantity


def test_the_bundled_database_runs_the_memplane_image_or_an_official_one(cluster: KubeCluster) -> None:
    own = named(render(cluster, MATRIX["bundled-postgresql"]), "StatefulSet", "mp-memplane-postgresql")
    spec = own["spec"]["template"]["spec"]
    [server] = spec["containers"]
    assert server["image"] == "localhost/memplane:0.1.0"
    assert server["command"] == ["memplane-postgres"]
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert {e["name"]: e.get("value") for e in server["env"]}["PGDATA"] == "/var/lib/postgresql/data/pgdata"
    assert server["readinessProbe"]["exec"]["command"][:5] == ["pg_isready", "-q", "-h", "127.0.0.1", "-p"]
    assert "-m fast" in server["lifecycle"]["preStop"]["exec"]["command"][-1]
    [init] = spec["initContainers"]
    assert init["command"] == ["memplane-postgres", "init-volume", "10001:10001"]
    official = {
        **MATRIX["bundled-postgresql"],
        "postgresql.image.repository": "docker.io/pgvector/pgvector",
        "postgresql.image.tag": "0.8.0-pg17",
    }
    other = named(render(cluster, official), "StatefulSet", "mp-memplane-postgresql")["spec"]["template"]["spec"]
    [server] = other["containers"]
    assert server["image"] == "docker.io/pgvector/pgvector:0.8.0-pg17"
    assert "command" not in server  # its own entry point
    assert other["securityContext"]["runAsUser"] == 999
    assert other["initContainers"][0]["command"] == [
        "memplane-postgres",
        "init-volume",
        "999:999",
    ]  # the memplane image's
    with pytest.raises(KubeCommandError) as caught:
        render(cluster, {k: v for k, v in official.items() if k != "postgresql.image.tag"})
    assert "postgresql.image.tag is required with postgresql.image.repository" in caught.value.stderr


def test_the_uninstall_check_is_a_pre_delete_hook_that_may_only_list_workspaces(cluster: KubeCluster) -> None:
    docs = render(cluster, {**BASE, "operator.namespaces": '["team-a","team-b"]'})
    hooks = [d for d in docs if d["metadata"]["name"] == "mp-memplane-uninstall-check"]
    assert sorted(d["kind"] for d in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for hook in hooks:
        assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert named(docs, "ClusterRole", "mp-memplane-uninstall-check")["rules"] == [
        {"apiGroups": ["memplane.io"], "resources": ["memoryworkspaces"], "verbs": ["list"]}
    ]
    job = named(docs, "Job", "mp-memplane-uninstall-check")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook-output-log-policy"] == "hook-failed"  # helm prints the refusal
    assert "hook-failed" not in annotations["helm.sh/hook-delete-policy"]  # kept for kubectl logs
    assert int(annotations["helm.sh/hook-weight"]) > int(
        named(docs, "ServiceAccount", "mp-memplane-uninstall-check")["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["memplane-uninstall-check"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert json.loads(env["MEMPLANE_CHECK_NAMESPACES"]) == ["team-a", "team-b"]
    assert env["MEMPLANE_RELEASE"] == "mp"
    assert env["MEMPLANE_RELEASE_NAMESPACE"] == "memplane"
    for off in ({"operator.uninstallCheck.enabled": "false"}, {"operator.enabled": "false"}):
        assert not [d for d in render(cluster, {**BASE, **off}) if "uninstall-check" in d["metadata"]["name"]]


def test_the_console_may_read_memoryworkspaces_and_nothing_else(cluster: KubeCluster) -> None:
    docs = render(cluster, MATRIX["console"])
    name = "mp-memplane-console"
    egress = named(docs, "NetworkPolicy", name)["spec"]["egress"]
    assert any({p["port"] for p in r["ports"]} == {443, 6443} for r in egress)  # the API server
    pod = named(docs, "Deployment", name)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (name, True)
    assert named(docs, "ServiceAccount", name)["automountServiceAccountToken"] is False
    assert named(docs, "ClusterRole", name)["rules"] == [
        {"apiGroups": ["memplane.io"], "resources": ["memoryworkspaces"], "verbs": ["get", "list", "watch"]}
    ]
    assert named(docs, "ClusterRoleBinding", name)["subjects"] == [
        {"kind": "ServiceAccount", "name": name, "namespace": "memplane"}
    ]
    assert "--kube-namespace" not in container["args"]

    one = render(cluster, MATRIX["console-one-namespace"])
    role = named(one, "Role", name)
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == named(docs, "ClusterRole", name)["rules"]
    assert named(one, "RoleBinding", name)["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": name,
    }
    [container] = named(one, "Deployment", name)["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--kube-namespace", "team-a"]

    off = render(cluster, {**MATRIX["console"], "console.memoryWorkspaces.enabled": "false"})
    kinds = {d["kind"] for d in off if d["metadata"]["name"] == name}
    assert kinds == {"Deployment", "Service", "NetworkPolicy"}
    assert named(off, "Deployment", name)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    egress = named(off, "NetworkPolicy", name)["spec"]["egress"]
    assert not any({p["port"] for p in r["ports"]} == {443, 6443} for r in egress)


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions with In) selects *labels*."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _admits(policy: dict[str, Any], labels: dict[str, str], port: int) -> bool:
    """Whether an ingress NetworkPolicy admits a Pod of this namespace with *labels* on *port*."""
    for rule in policy["spec"].get("ingress", []):
        if not any(p["port"] == port for p in rule.get("ports", [])):
            continue
        peers = rule.get("from")
        if peers is None or any(
            "podSelector" in p and "namespaceSelector" not in p and _matches(p["podSelector"], labels) for p in peers
        ):
            return True
    return False


def _pod_labels(docs: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    labels: dict[str, str] = named(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_console_reaches_the_admin_service_and_no_other_pod_does(cluster: KubeCluster) -> None:
    docs = render(cluster, MATRIX["console"])
    name = "mp-memplane-console"
    admin_policy = named(docs, "NetworkPolicy", "mp-memplane-admin")
    assert _admits(admin_policy, _pod_labels(docs, name), 50051)  # the admin view's calls
    assert _admits(admin_policy, _pod_labels(docs, "mp-memplane-operator"), 50051)
    for other in ("retrieval", "writeback", "compaction", "admin"):  # and no other Pod of the release
        assert not _admits(admin_policy, _pod_labels(docs, f"mp-memplane-{other}"), 50051), other
    assert not _admits(admin_policy, {"app": "anything"}, 50051)
    admin_labels = _pod_labels(docs, "mp-memplane-admin")
    egress = named(docs, "NetworkPolicy", name)["spec"]["egress"]
    assert any(
        _matches(p["podSelector"], admin_labels) and {q["port"] for q in r["ports"]} == {50051}
        for r in egress
        for p in r.get("to", [])
        if "podSelector" in p
    )
    [container] = named(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MEMPLANE_ADMIN_TARGET"] == "mp-memplane-admin.memplane.svc:50051"  # not the retrieval service
    without = render(cluster, BASE)  # no console: the operator and the helm test Pod only, as before
    assert not _admits(named(without, "NetworkPolicy", "mp-memplane-admin"), _pod_labels(docs, name), 50051)
