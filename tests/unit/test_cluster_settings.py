"""database.clusters: several PostgreSQL clusters, read from the environment as JSON;
database.dsn alone is one cluster named "default"; both at once, two clusters of one
name, or a name that is not a DNS label are refused when the settings are read."""

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
        ({"clusters": [{"name": "a", "dsn": "x"}, {"name": "a", "dsn": "y"}]}, "unique"),
        ({"clusters": [{"name": "Cluster_A", "dsn": "x"}]}, "name"),
    ],
)
def test_conflicting_or_misnamed_clusters_are_refused(given: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        DatabaseSettings(**given)  # type: ignore[arg-type]
