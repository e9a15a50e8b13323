"""database.clusters: several PostgreSQL clusters, read from the environment as JSON;
database.dsn alone is one cluster named "default"; both at once, two clusters of one
name, a name that is not a DNS label, a cluster without a dsn, JSON that is no list, and
text that is no JSON are refused when the settings are read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memplane.server.settings import DEFAULT_CLUSTER, ClusterSettings, DatabaseSettings, Settings


def test_clusters_come_from_the_environment_as_json_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "MEMPLANE_DATABASE__CLUSTERS",
        '[{"name": "a", "dsn": "postgresql://pg-a/app", "read_dsn": "postgresql://pg-a-ro/app"},'
        ' {"name": "b", "dsn": "postgresql://pg-b/app"}]',
    )
    clusters = Settings().database.cluster_list()
    assert clusters == [
        ClusterSettings(name="a", dsn="postgresql://pg-a/app", read_dsn="postgresql://pg-a-ro/app"),
        ClusterSettings(name="b", dsn="postgresql://pg-b/app"),
    ]


def test_one_dsn_is_one_cluster_named_default_and_nothing_is_the_embedded_server() -> None:
    one = DatabaseSettings(dsn="postgresql://pg/app", read_dsn="postgresql://pg-ro/app").cluster_list()
    assert one == [ClusterSettings(name=DEFAULT_CLUSTER, dsn="postgresql://pg/app", read_dsn="postgresql://pg-ro/app")]
    assert DatabaseSettings().cluster_list() is None


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"dsn": "postgresql://pg/app", "clusters": [{"name": "a", "dsn": "postgresql://pg-a/app"}]}, "not both"),
        (
            {"clusters": [{"name": "a", "dsn": "x"}, {"name": "a", "dsn": "y"}]},
            r"database\.clusters: names must be unique",
        ),
        ({"clusters": [{"name": "Cluster_A", "dsn": "x"}]}, r"clusters\.0\.name"),
        ({"clusters": [{"name": "a"}]}, r"clusters\.0\.dsn"),
    ],
)
def test_conflicting_or_misnamed_clusters_are_refused(given: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        DatabaseSettings(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ('{"name": "a", "dsn": "postgresql://pg-a/app"}', r"database\.clusters\s+Input should be a valid list"),
        ('[{"name": "a", "dsn": ', 'field "database"'),  # pydantic-settings names the group, not the key
    ],
)
def test_clusters_in_the_environment_that_are_no_list_or_no_json_are_refused(
    monkeypatch: pytest.MonkeyPatch, value: str, named: str
) -> None:
    monkeypatch.setenv("MEMPLANE_DATABASE__CLUSTERS", value)
    with pytest.raises(ValueError, match=named):
        Settings()
