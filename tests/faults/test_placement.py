"""Workspaces placed over several PostgreSQL clusters (issue 30, item 1), with real parts
only: two and three PostgreSQL clusters of their own (initdb'd from the embedded server's
binaries, as `killable_postgres`), one memplane server in this process over all of them
(`database.clusters`), real gRPC.

- Every RPC of the four services works for a workspace on each cluster, and its rows are
  on that cluster only; the placement rule (fewest workspaces, first on a tie) and an
  explicit placement hold; an unknown placement is INVALID_ARGUMENT naming the field.
- One cluster killed (SIGKILL of its postmaster and backends): its workspaces' calls are
  UNAVAILABLE within a second each, the other clusters' workspaces read and write as
  before, and health says which cluster is down (`cluster/<name>` NOT_SERVING, the
  services SERVING); started again, its workspaces are served again by themselves.

On the code before placement, `database.clusters` did not exist (the setting was
ignored and the embedded server started): no workspace's rows were on the clusters
these tests read, and no health name `cluster/<name>` existed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import SecretStr

from memplane.cli.main import main as cli_main
from memplane.client import AsyncMemplaneClient
from memplane.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from memplane.server.api.server import RunningServer
from memplane.server.app import App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.resources import migrate
from memplane.server.serving import serve
from memplane.server.settings import (
    ClusterSettings,
    DatabaseSettings,
    ExtractionSettings,
    LLMSettings,
    VectorIndexSettings,
)
from memplane.server.storage.migrate import apply_migrations
from memplane.v1 import memory_pb2, retrieval_pb2, writeback_pb2
from tests.e2e.test_extraction import SCOPE, USER, answer, fact, message
from tests.e2e.test_workspace_scoping import _every_rpc
from tests.fake_llm import FakeLLM
from tests.faults.conftest import KillablePostgres, ServerProcess
from tests.fix_process import free_port
from tests.fix_replica import StreamingReplica, _pg, server_owned_dir
from tests.fix_server import TestWorkspace, random_workspace_name, settings_for
from tests.support import mem

pytestmark = pytest.mark.timeout(600)

UNAVAILABLE_WITHIN_SECONDS = 1.0  # the bound for a call to a workspace on a cluster that is down
HEALTH_WITHIN_SECONDS = 5.0
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL
RETRIEVAL = "memplane.v1.RetrievalService"
DONE = writeback_pb2.EXTRACTION_JOB_STATUS_DONE


@pytest.fixture
def new_cluster(tmp_path: Path) -> Iterator[Callable[[str], KillablePostgres]]:
    """`new_cluster(name)`: a new, empty PostgreSQL cluster, started; all stopped after the test."""
    made: list[KillablePostgres] = []

    def make(name: str) -> KillablePostgres:
        pgdata = server_owned_dir(tmp_path / f"pg-{name}")
        _pg("initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust", "--encoding=utf8")
        cluster = KillablePostgres(pgdata, free_port())
        cluster.start()
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


@dataclass
class Placed:
    """A server over several clusters, its admin client and the clusters by name."""

    app: App
    target: str
    admin_key: str
    admin: AsyncMemplaneClient
    clusters: dict[str, KillablePostgres]
    clients: list[AsyncMemplaneClient]

    async def workspace(self, placement: str = "") -> TestWorkspace:
        """A new workspace (on *placement*, or where the rule puts it) with a key and a
        client that sends every call once (no retries: the test times each)."""
        name = random_workspace_name()
        info = await self.admin.create_workspace(name, placement=placement)
        key = await self.admin.create_api_key(name, "test")
        client = AsyncMemplaneClient(self.target, key.api_key, timeout=30.0, retry_reads=False)
        self.clients.append(client)
        return TestWorkspace(name=name, client=client, key=key.api_key, key_id=key.key_id, info=info)


@pytest.fixture
async def placed(
    new_cluster: Callable[[str], KillablePostgres], embedder: CachedEmbedder, admin_key: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Placed]]]:
    """`await placed(names, llm=None, extra=None, read_dsns=None)`: clusters of those names
    (the first the control cluster), then the *extra* ones given, and a server in this
    process over them, every service, migrations applied at start; *read_dsns*: a replica
    per cluster name (a paused replay does not count as stale); with *llm*, that fake
    endpoint is its LLM and one extraction worker runs per cluster."""
    started: list[tuple[App, RunningServer, Placed]] = []

    async def start(
        names: list[str],
        llm: FakeLLM | None = None,
        extra: dict[str, KillablePostgres] | None = None,
        read_dsns: dict[str, str] | None = None,
    ) -> Placed:
        clusters = {name: new_cluster(name) for name in names} | (extra or {})
        listed = [ClusterSettings(name=n, dsn=c.dsn, read_dsn=(read_dsns or {}).get(n)) for n, c in clusters.items()]
        update: dict[str, Any] = {
            "database": DatabaseSettings(clusters=listed, pool_timeout=5.0, replica_max_lag=3600.0),
            # The vector indexer's scan of every cluster for backlogs each second (not 30 s): rows a
            # pass missed (written in a transaction it ran before) reach the graph within the tests' wait.
            "vector_index": VectorIndexSettings(scan_interval_seconds=1.0),
        }
        if llm is not None:
            update["llm"] = LLMSettings(
                base_url=llm.base_url, api_key=SecretStr("sk-test"), model="fake", max_retries=0
            )
            update["extraction"] = ExtractionSettings(workers=1)
        settings = settings_for(tmp_path / "memplane", "", admin_key).model_copy(update=update)
        app = await build_app(settings, embedder=embedder)
        app.start()
        running = await serve(app, host="127.0.0.1", port=0)
        target = f"127.0.0.1:{running.port}"
        server = Placed(app, target, admin_key, AsyncMemplaneClient(target, admin_key, timeout=60.0), clusters, [])
        started.append((app, running, server))
        return server

    yield start
    for app, running, server in started:
        for client in [*server.clients, server.admin]:
            await client.close()
        await running.stop(0)
        await app.close()


def _sql(dsn: str, query: str, *params: object) -> object:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]  # test-only literal SQL
        return None if row is None else row[0]


def _key(server: Placed, name: str) -> int:
    """The workspace's key, from the control cluster's `workspaces`."""
    control = next(iter(server.clusters.values()))
    return int(_sql(control.dsn, "SELECT key FROM workspaces WHERE name = %s", name))  # type: ignore[call-overload]


async def _health(target: str, name: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        return int(reply.status)


async def _until_health(target: str, name: str, wanted: int) -> None:
    deadline = time.monotonic() + HEALTH_WITHIN_SECONDS
    while (status := await _health(target, name)) != wanted:
        assert time.monotonic() < deadline, (
            f"health {name!r} is {status}, not {wanted}, after {HEALTH_WITHIN_SECONDS} s"
        )
        await asyncio.sleep(0.05)


async def test_the_rule_and_an_explicit_placement_place_workspaces_and_an_unknown_one_is_refused(
    placed: Callable[..., Awaitable[Placed]],
) -> None:
    server = await placed(["east", "west"])
    first = await server.workspace()
    second = await server.workspace()
    third = await server.workspace()
    chosen = await server.workspace("west")
    # Fewest workspaces, the first configured of those on a tie: east, west, east; then as asked.
    assert [w.info.placement for w in (first, second, third, chosen)] == ["east", "west", "east", "west"]
    assert (await server.admin.get_workspace(second.name)).placement == "west"
    listed = {w.name: w.placement for w in (await server.admin.list_workspaces()).workspaces}
    assert listed[first.name] == "east"
    with pytest.raises(InvalidArgumentError) as refused:
        await server.admin.create_workspace(random_workspace_name(), placement="north")
    assert "placement" in str(refused.value)
    assert server.app.placement.counts() == {"east": 2, "west": 2}


async def test_every_rpc_works_for_a_workspace_on_each_of_two_clusters_and_its_rows_stay_there(
    placed: Callable[..., Awaitable[Placed]],
) -> None:
    server = await placed(["a", "b"])
    for name, there in server.clusters.items():
        ws = await server.workspace(name)
        other = await server.workspace(name)
        await other.client.add_memories([mem("a memory of another workspace")])
        await _every_rpc(ws, other, server.admin)  # deletes *other* at its end
        await ws.client.add_memories([mem(f"the ferry to {name} leaves at dawn")])
        hits = (await ws.client.search("ferry dawn", mode=LEXICAL)).hits
        assert [h.memory.content for h in hits] == [f"the ferry to {name} leaves at dawn"]
        key = _key(server, ws.name)
        assert _sql(there.dsn, "SELECT count(*) FROM memories WHERE workspace_key = %s", key) == 1
        assert _sql(there.dsn, "SELECT count(*) > 0 FROM memory_events WHERE workspace_key = %s", key) is True
        for elsewhere_name, elsewhere in server.clusters.items():
            if elsewhere_name != name:  # no partition of it; its row only on the control cluster (a)
                assert _sql(elsewhere.dsn, "SELECT to_regclass(%s)::text", f"memories_w{key}") is None
                control_row = 1 if elsewhere_name == "a" else 0
                assert _sql(elsewhere.dsn, "SELECT count(*) FROM workspaces WHERE key = %s", key) == control_row
        deadline = time.monotonic() + 30  # the vector indexer puts its small writes into its cluster's graph
        unindexed = "SELECT count(*) FROM memories WHERE workspace_key = %s AND NOT vector_indexed"
        while _sql(there.dsn, unindexed, key) != 0:
            assert time.monotonic() < deadline, f"memories of cluster {name} never indexed"
            await asyncio.sleep(0.1)
        usage = await server.admin.get_workspace_usage(ws.name)
        assert usage.memory_count == 1
        await server.admin.delete_workspace(ws.name)
        for cluster in server.clusters.values():  # gone everywhere, its placement too
            assert _sql(cluster.dsn, "SELECT to_regclass(%s)::text", f"memories_w{key}") is None
            assert _sql(cluster.dsn, "SELECT count(*) FROM workspaces WHERE key = %s", key) == 0
            assert _sql(cluster.dsn, "SELECT count(*) FROM placements WHERE workspace_key = %s", key) == 0


async def test_a_killed_cluster_makes_only_its_workspaces_unavailable_and_health_names_it(
    placed: Callable[..., Awaitable[Placed]], capsys: pytest.CaptureFixture[str]
) -> None:
    server = await placed(["a", "b", "c"])
    spaces = {name: await server.workspace(name) for name in server.clusters}
    for name, ws in spaces.items():
        await ws.client.add_memories([mem(f"the lighthouse on {name} logged a storm")])
    for name in ("a", "b"):
        await server.workspace(name)  # c has the fewest workspaces now
    for name in server.clusters:
        assert await _health(server.target, f"cluster/{name}") == health_pb2.HealthCheckResponse.SERVING

    server.clusters["c"].kill()
    down = spaces["c"].client
    for _ in range(3):  # the first finds its pooled connection broken; the next are refused at once
        began = time.monotonic()
        with pytest.raises(UnavailableError):
            await down.search("lighthouse storm", mode=LEXICAL)
        assert time.monotonic() - began < UNAVAILABLE_WITHIN_SECONDS
    began = time.monotonic()
    with pytest.raises(UnavailableError) as refused:  # refused before its text is embedded
        await down.add_memories([mem("written while its cluster is down")])
    assert time.monotonic() - began < UNAVAILABLE_WITHIN_SECONDS
    assert "database cluster 'c' unreachable for" in str(refused.value)
    for name in ("a", "b"):  # the others read and write as before
        client = spaces[name].client
        await client.add_memories([mem(f"the lighthouse on {name} logged a second storm")])
        assert len((await client.search("lighthouse storm", mode=LEXICAL)).hits) == 2
        await client.get_transcript("none")
    await _until_health(server.target, "cluster/c", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert await _health(server.target, "cluster/a") == health_pb2.HealthCheckResponse.SERVING
    assert await _health(server.target, "cluster/b") == health_pb2.HealthCheckResponse.SERVING
    assert await _health(server.target, RETRIEVAL) == health_pb2.HealthCheckResponse.SERVING  # not the control cluster
    # `memplane workspace list` lists every workspace, the down cluster's without its sizes
    argv = ["workspace", "list", "--target", server.target, "--api-key", server.admin_key]
    capsys.readouterr()
    assert await asyncio.get_running_loop().run_in_executor(None, cli_main, argv) == 0
    listed = {line.split("\t")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert listed[spaces["c"].name].endswith("\tcluster c")
    assert "\tunavailable\t" in listed[spaces["c"].name]
    assert re.search(r"\t2 memories\t\d+ bytes\t.*\tcluster a$", listed[spaces["a"].name])
    extra = await server.workspace()  # the rule passes over a cluster that is down, though it has the fewest
    assert extra.info.placement == "a"
    await extra.client.add_memories([mem("a new workspace's memory")])

    server.clusters["c"].start()
    await _until_health(server.target, "cluster/c", health_pb2.HealthCheckResponse.SERVING)
    hits = (await down.search("lighthouse storm", mode=LEXICAL)).hits
    assert [h.memory.content for h in hits] == ["the lighthouse on c logged a storm"]
    await down.add_memories([mem("the lighthouse on c logged a second storm")])
    assert len((await down.search("lighthouse storm", mode=LEXICAL)).hits) == 2


async def test_the_extraction_workers_run_the_queued_jobs_of_every_cluster(
    placed: Callable[..., Awaitable[Placed]], llm: FakeLLM
) -> None:
    """Jobs queued without waiting (no request runs them) are taken by the workers of their
    own cluster: before placement, one set of workers polled the one database."""
    server = await placed(["a", "b"], llm=llm)
    for name in server.clusters:
        ws = await server.workspace(name)
        llm.script(answer(fact("user", "Tea", f"Ana likes green tea on {name}.", ids=["q1"])))
        queued = await ws.client.write_conversation(SCOPE, [message("q1", USER, "I like green tea.")], extract=True)
        deadline = time.monotonic() + 30
        while (job := await ws.client.get_extraction_job(queued.extraction_job.id)).status != DONE:
            assert time.monotonic() < deadline, f"the job on cluster {name} was not run: {job}"
            await asyncio.sleep(0.05)
        listed = await ws.client.list_memories()
        assert [m.content for m in listed.memories if m.type == memory_pb2.MEMORY_TYPE_USER] == [
            f"Ana likes green tea on {name}."
        ]


async def test_migrations_run_on_every_cluster_and_a_cluster_without_them_is_named(
    new_cluster: Callable[[str], KillablePostgres], embedder: CachedEmbedder, admin_key: str, tmp_path: Path
) -> None:
    clusters = {name: new_cluster(name) for name in ("a", "b")}
    database = DatabaseSettings(
        clusters=[ClusterSettings(name=n, dsn=c.dsn) for n, c in clusters.items()], migrate_on_start=False
    )
    settings = settings_for(tmp_path / "memplane", "", admin_key).model_copy(update={"database": database})
    with pytest.raises(FailedPreconditionError, match="database cluster 'a' lacks migrations"):
        await build_app(settings, embedder=embedder)
    applied = await migrate(settings)  # what `memplane migrate` runs
    per_cluster = len(applied) // 2
    assert applied[0] == "a: 0001_init.sql"
    assert applied[per_cluster] == "b: 0001_init.sql"
    assert {name.split(": ")[0] for name in applied} == {"a", "b"}
    for cluster in clusters.values():
        assert _sql(cluster.dsn, "SELECT count(*) FROM schema_migrations") == per_cluster
    assert await migrate(settings) == []


async def test_a_cluster_down_at_start_leaves_the_others_served_and_joins_when_it_answers(
    placed: Callable[..., Awaitable[Placed]], new_cluster: Callable[[str], KillablePostgres]
) -> None:
    """Before, a server whose second cluster was down could not start at all (its
    migrations could not be applied), taking every cluster's workspaces down with it."""
    late = new_cluster("late")
    late.kill()
    server = await placed(["a"], extra={"late": late})
    assert await _health(server.target, "cluster/late") == health_pb2.HealthCheckResponse.NOT_SERVING
    assert await _health(server.target, RETRIEVAL) == health_pb2.HealthCheckResponse.SERVING
    here = await server.workspace()  # the rule passes over the cluster that is down
    assert here.info.placement == "a"
    await here.client.add_memories([mem("the ferry leaves at dawn")])
    began = time.monotonic()
    with pytest.raises(UnavailableError):
        await server.admin.create_workspace(random_workspace_name(), placement="late")
    assert time.monotonic() - began < UNAVAILABLE_WITHIN_SECONDS
    assert server.app.placement.counts() == {"a": 1, "late": 0}

    late.start()  # never migrated: the server applies its migrations when its probe reaches it
    await _until_health(server.target, "cluster/late", health_pb2.HealthCheckResponse.SERVING)
    there = await server.workspace("late")
    await there.client.add_memories([mem("the ferry to late leaves at noon")])
    assert [h.memory.content for h in (await there.client.search("ferry", mode=LEXICAL)).hits] == [
        "the ferry to late leaves at noon"
    ]
    assert _sql(late.dsn, "SELECT count(*) FROM memories WHERE workspace_key = %s", _key(server, there.name)) == 1


async def test_memplane_serve_takes_its_clusters_from_the_environment(
    new_cluster: Callable[[str], KillablePostgres], serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    """`memplane serve` as a process of its own, its clusters in MEMPLANE_DATABASE__CLUSTERS (JSON)."""
    clusters = {name: new_cluster(name) for name in ("one", "two")}
    listed = json.dumps([{"name": n, "dsn": c.dsn} for n, c in clusters.items()])
    server = await serve(None, MEMPLANE_DATABASE__CLUSTERS=listed)
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        info = await admin.create_workspace(random_workspace_name(), placement="two")
        key = (await admin.create_api_key(info.name, "test")).api_key
    assert info.placement == "two"
    async with AsyncMemplaneClient(server.target, key) as client:
        await client.add_memories([mem("the night train to two")])
        assert len((await client.search("night train", mode=LEXICAL)).hits) == 1
    assert _sql(clusters["two"].dsn, "SELECT count(*) FROM memories") == 1
    assert _sql(clusters["one"].dsn, "SELECT count(*) FROM memories") == 0
    # Its own health name, SERVING once its probe answered (a probe that timed out on a busy
    # machine reads NOT_SERVING until the next one: wait on the status, not the first read).
    await _until_health(server.target, "cluster/one", health_pb2.HealthCheckResponse.SERVING)


async def test_a_workspaces_reads_go_to_its_own_clusters_replica(
    placed: Callable[..., Awaitable[Placed]], new_cluster: Callable[[str], KillablePostgres], tmp_path: Path
) -> None:
    """Cluster b has a streaming replica (its read_dsn), cluster a none: a search of b's
    workspace without a token runs on b's replica (its replay paused, it misses the write
    made after the pause), one of a's workspace on a's primary (it sees every write)."""
    b = new_cluster("b")
    pgdata = server_owned_dir(tmp_path / "b-standby")
    _pg("pg_basebackup", "-D", str(pgdata), "-R", "-X", "stream", "-c", "fast", "-d", b.dsn)
    standby = StreamingReplica(b.dsn, pgdata, free_port())
    standby.start()
    try:
        server = await placed(["a"], extra={"b": b}, read_dsns={"b": standby.dsn})
        on_a, on_b = await server.workspace("a"), await server.workspace("b")
        for ws in (on_a, on_b):
            await ws.client.add_memories([mem("the harbour master keeps a blue logbook")])
        await asyncio.to_thread(standby.wait_replayed)
        await asyncio.to_thread(standby.pause_replay)
        try:
            for ws in (on_a, on_b):
                await ws.client.add_memories([mem("the harbour master lost the blue logbook at sea")])
            for ws, seen in ((on_a, 2), (on_b, 1)):
                async with AsyncMemplaneClient(server.target, ws.key) as stranger:  # holds no read token
                    assert len((await stranger.search("harbour logbook", mode=LEXICAL)).hits) == seen
            assert server.app.reads.stats["replica"] >= 1
            assert len((await on_b.client.search("harbour logbook", mode=LEXICAL)).hits) == 2  # its token: the primary
        finally:
            await asyncio.to_thread(standby.resume_replay)
    finally:
        standby.stop()


async def test_a_database_that_served_alone_cannot_join_as_another_cluster(
    new_cluster: Callable[[str], KillablePostgres], embedder: CachedEmbedder, admin_key: str, tmp_path: Path
) -> None:
    """Its workspaces' keys would collide with the control cluster's, and no key would
    reach them: the server refuses to start, naming the cluster and a workspace."""
    clusters = {name: new_cluster(name) for name in ("a", "b")}
    await apply_migrations(clusters["b"].dsn)
    _sql(
        clusters["b"].dsn,
        "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('alone', 'm', 4) RETURNING key",
    )
    database = DatabaseSettings(clusters=[ClusterSettings(name=n, dsn=c.dsn) for n, c in clusters.items()])
    settings = settings_for(tmp_path / "memplane", "", admin_key).model_copy(update={"database": database})
    with pytest.raises(FailedPreconditionError, match=r"database cluster 'b' holds 1 workspace\(s\) .*\(alone\)"):
        await build_app(settings, embedder=embedder)
