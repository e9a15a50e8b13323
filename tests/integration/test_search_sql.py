"""SearchMemories' one statement (`memplane.server.storage.search`) against the real database:
its fusion is `memplane.server.retrieval.fusion.fuse`, its BM25 is Okapi BM25 over the stored
tsvectors, its lexical candidates stay within the postings budget, no filter value is
written into its text, and the document frequencies it reads (`lexeme_df`) equal a
recount after every kind of write."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from psycopg import sql

from memplane.domain.filters import Condition, MemoryFilter, Operator
from memplane.domain.models import ConversationMessage, MessageRole, NewMemory, Scope, Workspace
from memplane.domain.ranking import Ranking, knob_types
from memplane.server.app import App
from memplane.server.retrieval.fusion import FusionMethod, fuse
from memplane.server.storage import search as search_sql
from memplane.server.storage import search_bm25
from memplane.server.storage.retention import delete_expired_memories
from memplane.server.storage.search import SearchRow, SearchSpec
from memplane.text.segment import segment
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors

K1, B = 1.2, 0.75

TEXTS = [
    "Caroline went to the LGBTQ support group on Tuesday",
    "Melanie painted a sunrise over the lake last year",
    "Caroline is researching adoption agencies",
    "Melanie ran a charity race for mental health",
    "the support group made Caroline feel accepted",
    "Melanie's kids love the beach and the lake",
    "Caroline wants to become a counselor for transgender youth",
    "Melanie signed up for a pottery class",
    "a lake trip with the kids in the summer",
    "Caroline gave a talk at a school about her journey",
    "the pottery class was Melanie's favourite part of the week",
    "Caroline's friends threw her a birthday party",
]


def spec(**overrides: object) -> SearchSpec:
    """A spec of every statement path's defaults here; *overrides* by SearchSpec or Ranking
    field name (rrf, dbsf, zscore: True picks that fusion; WEIGHTED otherwise)."""
    knobs = {name: overrides.pop(name) for name in list(overrides) if name in knob_types()}
    chosen = [FusionMethod(m) for m in ("rrf", "dbsf", "zscore") if overrides.pop(m, False)]
    knobs = {"fusion": chosen[0] if chosen else FusionMethod.WEIGHTED, "vector_weight": 0.5, "rrf_k": 60, **knobs}
    values: dict[str, object] = {
        "use_vector": True,
        "use_lexical": True,
        "depth": 50,
        "top_k": 50,
        "min_score": 0.0,
        "exact": True,
        "prefilter": False,
        "lexical_budget": 20_000,
        "lexical_cap": 20_000,
        "ranking": Ranking(**knobs),  # type: ignore[arg-type]
        "k1": K1,
        "b": B,
    }
    values.update(overrides)
    return SearchSpec(**values)  # type: ignore[arg-type]


async def run(
    app: App, ws: Workspace, s: SearchSpec, text: str, vector: np.ndarray | None, flt: MemoryFilter | None = None
) -> list[SearchRow]:
    async with app.db.tenant_pipeline(ws.key, {}) as conn:
        cursors = await search_sql.send(
            conn, ws, [(segment(text), vector)], s, flt or MemoryFilter(), now=datetime.now(UTC)
        )
    return (await search_sql.read(cursors))[0]


async def seeded(app: App, tenant_factory: TenantFactory, texts: list[str] = TEXTS) -> tuple[Workspace, np.ndarray]:
    ws = await tenant_factory()
    vectors = unit_vectors(len(texts) + 1, seed=909)
    await app.writeback.add(
        principal(ws),
        ws,
        [NewMemory(content=t, embedding=tuple(float(x) for x in vectors[i])) for i, t in enumerate(texts)],
    )
    return ws, vectors[-1]


async def df_table(app: App, ws: Workspace) -> dict[str, int]:
    """lexeme_df summed over shards (zero counts left by deletes dropped)."""
    async with app.db.tenant(ws.key) as conn:
        cur = await conn.execute(
            "SELECT lexeme, sum(df)::int AS n FROM lexeme_df WHERE workspace_key = %s GROUP BY lexeme"
            " HAVING sum(df) <> 0",
            (ws.key,),
        )
        return {r["lexeme"]: r["n"] for r in await cur.fetchall()}


async def df_recount(app: App, ws: Workspace) -> dict[str, int]:
    """Document frequencies counted from the memories themselves."""
    async with app.db.tenant(ws.key) as conn:
        cur = await conn.execute(
            "SELECT u.lexeme, count(*)::int AS n FROM memories m CROSS JOIN LATERAL unnest(m.lexical) u"
            " WHERE m.workspace_key = %s GROUP BY u.lexeme",
            (ws.key,),
        )
        return {r["lexeme"]: r["n"] for r in await cur.fetchall()}


async def assert_df_exact(app: App, ws: Workspace) -> None:
    expected = await df_recount(app, ws)
    assert expected, "the workspace should hold lexemes to count"
    assert await df_table(app, ws) == expected


@pytest.mark.parametrize("method", [FusionMethod.WEIGHTED, FusionMethod.RRF, FusionMethod.DBSF, FusionMethod.ZSCORE])
async def test_fusion_in_sql_equals_fuse(app: App, tenant_factory: TenantFactory, method: FusionMethod) -> None:
    ws, query_vector = await seeded(app, tenant_factory)
    text = "Caroline support group at the lake"
    how = {
        "rrf": method is FusionMethod.RRF,
        "dbsf": method is FusionMethod.DBSF,
        "zscore": method is FusionMethod.ZSCORE,
    }
    vector_only = await run(app, ws, spec(use_lexical=False, vector_weight=0.7, **how), text, query_vector)
    lexical_only = await run(app, ws, spec(use_vector=False, vector_weight=0.7, **how), text, None)
    hybrid = await run(app, ws, spec(vector_weight=0.7, **how), text, query_vector)
    assert len(vector_only) == len(TEXTS)
    assert 0 < len(lexical_only) < len(TEXTS)

    def raw(rows: list[SearchRow], signal: str) -> list[tuple[str, float]]:
        ranked = sorted(rows, key=lambda r: getattr(r, signal)[2])
        return [(r.memory.id, getattr(r, signal)[0]) for r in ranked]

    expected = fuse(
        raw(vector_only, "vector"), raw(lexical_only, "lexical"), method=method, vector_weight=0.7, rrf_k=60
    )
    assert [h.id for h in expected] == [r.memory.id for r in hybrid]
    for want, got in zip(expected, hybrid, strict=True):
        assert got.score == pytest.approx(want.score, abs=1e-9)
        for signal in ("vector", "lexical"):
            w, g = getattr(want, signal), getattr(got, signal)
            assert (w is None) == (g is None)
            if w is not None and g is not None:
                assert g == pytest.approx((w.score, w.normalized, w.rank), abs=1e-9)
    # min_score and top_k trim the fused list, as SearchMemories documents.
    cut = expected[3].score
    trimmed = await run(app, ws, spec(vector_weight=0.7, min_score=cut, top_k=3, **how), text, query_vector)
    assert [r.memory.id for r in trimmed] == [h.id for h in expected if h.score >= cut][:3]


async def okapi(app: App, ws: Workspace, text: str) -> tuple[dict[str, float], int]:
    """Okapi BM25 (k1, b) of every memory of *ws* holding a lexeme of *text*, computed in
    Python from the stored tsvectors; and the largest term frequency among them."""
    async with app.db.tenant(ws.key) as conn:
        cur = await conn.execute(
            "SELECT m.id::text AS id, m.lexical_length, u.lexeme, cardinality(u.positions) AS tf"
            " FROM memories m CROSS JOIN LATERAL unnest(m.lexical) u WHERE m.workspace_key = %s",
            (ws.key,),
        )
        rows = await cur.fetchall()
        cur = await conn.execute(
            "SELECT array_agg(DISTINCT u.lexeme) AS q FROM unnest(to_tsvector('english', %s)) u", (segment(text),)
        )
        got = await cur.fetchone()
    assert got is not None
    query = set(got["q"])
    lengths = {r["id"]: r["lexical_length"] for r in rows}
    n, avgdl = len(lengths), sum(lengths.values()) / len(lengths)
    df: dict[str, int] = {}
    for r in rows:
        df[r["lexeme"]] = df.get(r["lexeme"], 0) + 1
    expected: dict[str, float] = {}
    for r in rows:
        if r["lexeme"] not in query:
            continue
        idf = math.log(1 + (n - df[r["lexeme"]] + 0.5) / (df[r["lexeme"]] + 0.5))
        tf, dl = r["tf"], r["lexical_length"]
        expected[r["id"]] = expected.get(r["id"], 0.0) + idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
    return expected, max((r["tf"] for r in rows if r["lexeme"] in query), default=0)


@pytest.fixture(params=["ts_rank", "unnest"])
def bm25_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each of BM25's two computations of the term frequencies (`search_bm25.BM25`): from
    ts_rank (a query of at most BM25_RANK_TERMS lexemes, all the tests' queries) and from
    the unnested tsvectors (the limit set to 0 here)."""
    if request.param == "unnest":
        monkeypatch.setattr(search_sql, "BM25_RANK_TERMS", 0)
    return str(request.param)


@pytest.mark.parametrize("prefilter", [False, True])
async def test_bm25_equals_okapi_over_the_stored_tsvectors(
    app: App, tenant_factory: TenantFactory, prefilter: bool, bm25_path: str
) -> None:
    ws, _ = await seeded(app, tenant_factory)
    text = "Melanie's pottery class at the lake"
    expected, _ = await okapi(app, ws, text)
    # prefilter: every row of the filter is a candidate; BM25 keeps those holding a lexeme.
    hits = await run(app, ws, spec(use_vector=False, prefilter=prefilter), text, None)
    assert {h.memory.id: h.lexical[0] for h in hits if h.lexical} == pytest.approx(expected, rel=1e-9)
    assert [h.memory.id for h in hits] == sorted(expected, key=lambda i: (-expected[i], i))


async def test_lexical_candidates_are_the_rarest_lexemes_within_the_budget(
    app: App, tenant_factory: TenantFactory
) -> None:
    texts = [f"coffee morning number {i}" for i in range(30)] + ["coffee with a zebra", "a zebra at the zoo"]
    ws, _ = await seeded(app, tenant_factory, texts)
    everything = await run(app, ws, spec(use_vector=False), "coffee zebra", None)
    assert len(everything) == 32
    # A budget of one posting still takes the rarest lexeme ("zebra", 2 postings), and no more.
    rarest = await run(app, ws, spec(use_vector=False, lexical_budget=1), "coffee zebra", None)
    assert sorted(h.memory.content for h in rarest) == ["a zebra at the zoo", "coffee with a zebra"]
    assert rarest[0].memory.content == "coffee with a zebra"  # scored with every lexeme: it holds both
    # "zebra" then "coffee" (31 postings) fit in 33, not in 32.
    within = await run(app, ws, spec(use_vector=False, lexical_budget=32), "coffee zebra", None)
    assert len(within) == 2
    both = await run(app, ws, spec(use_vector=False, lexical_budget=33), "coffee zebra", None)
    assert len(both) == 32
    # The cap bounds the candidates even when the rarest lexeme alone is in more memories.
    capped = await run(app, ws, spec(use_vector=False, lexical_budget=1, lexical_cap=5), "coffee", None)
    assert len(capped) == 5


async def test_filter_values_are_bound_never_written_into_the_statement(
    app: App, tenant_factory: TenantFactory
) -> None:
    ws = await tenant_factory()
    vectors = unit_vectors(3, seed=77)
    secret_user, secret_topic = "user-8c1e52", "topic-5f03aa"
    await app.writeback.add(
        principal(ws),
        ws,
        [
            NewMemory(
                content="the launch plan",
                scope=Scope(user_id=secret_user),
                metadata={"topic": secret_topic},
                embedding=tuple(float(x) for x in vectors[0]),
            ),
            NewMemory(
                content="the launch plan",
                scope=Scope(user_id=secret_user),
                metadata={"topic": "other"},
                embedding=tuple(float(x) for x in vectors[1]),
            ),
        ],
    )
    created_after = datetime.now(UTC) - timedelta(days=1)
    flt = MemoryFilter(
        user_id=secret_user,
        metadata=Condition(("topic",), Operator.EQ, secret_topic),
        created_after=created_after,
    )
    for prefilter in (False, True):
        query, params = search_sql.statement(spec(prefilter=prefilter), flt, datetime.now(UTC), 384)
        async with app.db.tenant(ws.key) as conn:
            text = query.as_string(conn)
        for secret in (secret_user, secret_topic, created_after.isoformat()[:19], "launch"):
            assert secret not in text
        assert secret_user in params.values.values()
        hits = await run(app, ws, spec(prefilter=prefilter), "launch plan", vectors[2], flt)
        assert [h.memory.metadata["topic"] for h in hits] == [secret_topic]


async def test_document_frequencies_equal_a_recount_after_every_kind_of_write(
    app: App, tenant_factory: TenantFactory
) -> None:
    ws, _ = await seeded(app, tenant_factory)
    await assert_df_exact(app, ws)
    mine = await app.writeback.add(
        principal(ws),
        ws,
        [
            NewMemory(content="Caroline adopted a puppy named Oscar", scope=Scope(user_id="u1")),
            NewMemory(content="Oscar the puppy chews shoes", scope=Scope(user_id="u1")),
            NewMemory(content="the puppy expired", expires_at=datetime.now(UTC) + timedelta(seconds=1)),
        ],
    )
    await assert_df_exact(app, ws)
    await app.writeback.update(
        principal(ws), ws, mine[0].id, NewMemory(content="Caroline adopted a kitten"), ["content"]
    )
    await assert_df_exact(app, ws)
    await app.writeback.update(principal(ws), ws, mine[0].id, NewMemory(content="", name="kitten Luna"), ["name"])
    await assert_df_exact(app, ws)
    await app.writeback.delete(principal(ws), ws, mine[1].id)
    await assert_df_exact(app, ws)
    await app.conversations.write(
        principal(ws),
        ws,
        Scope(user_id="u2", session_id="s1"),
        [
            ConversationMessage(content="I planted tomatoes today", role=MessageRole.USER),
            ConversationMessage(content="Tomatoes like full sun", role=MessageRole.ASSISTANT),
        ],
    )
    await assert_df_exact(app, ws)
    await app.writeback.delete_by_scope(principal(ws), ws, Scope(user_id="u2"))
    await assert_df_exact(app, ws)
    await app.writeback.delete_by_scope(principal(ws), ws, Scope(user_id="u1"))
    await assert_df_exact(app, ws)
    await delete_expired_memories(app.db, now=datetime.now(UTC) + timedelta(hours=2))
    assert "expir" not in await df_recount(app, ws)  # the sweep erased it ...
    await assert_df_exact(app, ws)  # ... and its counts


async def test_concurrent_writers_of_shared_lexemes_keep_exact_counts(app: App, tenant_factory: TenantFactory) -> None:
    ws, _ = await seeded(app, tenant_factory)
    vectors = unit_vectors(8 * 10, seed=4242)

    async def writer(w: int) -> None:
        items = [
            NewMemory(
                content=f"shared words apple banana cherry writer{w} item{i}",
                embedding=tuple(float(x) for x in vectors[w * 10 + i]),
            )
            for i in range(10)
        ]
        stored = await app.writeback.add(principal(ws), ws, items)
        for memory in stored[:3]:
            await app.writeback.delete(principal(ws), ws, memory.id)

    await asyncio.wait_for(asyncio.gather(*(writer(w) for w in range(8))), timeout=120)
    await assert_df_exact(app, ws)
    counts = await df_table(app, ws)
    assert counts["appl"] == counts["banana"] == 8 * 7
    async with app.db.tenant(ws.key) as conn:  # the sharded counters sum to a recount
        cur = await conn.execute(
            "SELECT (SELECT sum(memory_count) FROM workspace_stats) AS n,"
            " (SELECT sum(lexical_length_sum) FROM workspace_stats) AS len,"
            " (SELECT sum(content_bytes) FROM workspace_stats) AS bytes,"
            " (SELECT count(*) FROM memories) AS rows, (SELECT sum(lexical_length) FROM memories) AS row_len,"
            " (SELECT sum(content_bytes) FROM memories) AS row_bytes"
        )
        row = await cur.fetchone()
    assert row is not None
    assert (row["n"], row["len"], row["bytes"]) == (row["rows"], row["row_len"], row["row_bytes"])
    assert row["rows"] == len(TEXTS) + 8 * 7


def _nodes(plan: dict[str, object]) -> list[dict[str, object]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan tree."""
    children = plan.get("Plans", [])
    assert isinstance(children, list)
    return [plan, *(n for child in children for n in _nodes(child))]


async def test_whole_workspace_lexical_candidates_never_scan_the_partition(
    app: App, tenant_factory: TenantFactory
) -> None:
    # Row-level security evaluates the policy before any condition that is not leakproof,
    # and `@@` is not: a tenant's `lexical @@ q` could not use the GIN index, and a search
    # without a narrowing filter read every memory of the workspace (1.8 s at 1M).
    ws, _ = await seeded(app, tenant_factory)
    s = spec(use_vector=False, exact=False)
    query, params = search_sql.statement(s, MemoryFilter(), datetime.now(UTC), ws.embedding_dimensions)
    values = {**params.values, "ws": ws.key, "text": segment("Caroline at the lake"), "vector": None}
    # Sequential scans off: on 12 rows the planner would rightly prefer one; what matters
    # is whether any other path exists (PostgreSQL still scans when none does).
    async with app.db.tenant_pipeline(ws.key, {"enable_seqscan": "off"}) as conn:
        cur = await conn.execute(b"EXPLAIN (FORMAT JSON) " + query.as_bytes(conn), values)
    [row] = await cur.fetchall()
    nodes = _nodes(row["QUERY PLAN"][0]["Plan"])
    filtered = [n for n in nodes if "@@" in str(n.get("Filter", ""))]  # a scan testing each row it reads
    assert not filtered, filtered
    assert any(n.get("Function Name") == "memplane_lexical_candidates" for n in nodes)
    hits = await run(app, ws, s, "Caroline at the lake", None)
    assert {h.memory.content for h in hits} == {t for t in TEXTS if "Caroline" in t or "lake" in t}


async def test_lexical_candidates_function_answers_only_for_the_transactions_workspace(
    app: App, tenant_factory: TenantFactory
) -> None:
    mine, _ = await seeded(app, tenant_factory)
    theirs, _ = await seeded(app, tenant_factory)
    call = (
        "SELECT count(*) AS n FROM memplane_lexical_candidates("
        "%s, to_tsquery('english', 'Caroline'), now(), false, false, 100)"
    )
    async with app.db.tenant(mine.key) as conn:
        own = await (await conn.execute(call, (mine.key,))).fetchone()
        other = await (await conn.execute(call, (theirs.key,))).fetchone()
    assert own is not None
    assert other is not None
    assert own["n"] == sum("Caroline" in t for t in TEXTS)
    assert other["n"] == 0  # their memories match too, but this transaction is not theirs


async def test_bm25_counts_repeated_lexemes_and_lengths(
    app: App, tenant_factory: TenantFactory, bm25_path: str
) -> None:
    # Term frequencies above one, up to the 255 positions to_tsvector keeps of a lexeme (the
    # ts_rank path recovers each from a sum of 1/j^2), lengths that differ, and a query
    # lexeme no memory holds.
    texts = [
        "lake lake lake and the lake house",
        "the lake",
        "a pottery class by the lake, pottery every week, pottery again",
        "nothing to see here at all today",
        " ".join(["kiln"] * 17),
        " ".join(["kiln glaze"] * 100),
        " ".join(["kiln"] * 300),  # 255 positions kept
    ] + [f"filler memory number {i} about the weather" for i in range(20)]
    ws, _ = await seeded(app, tenant_factory, texts)
    text = "pottery lake zeppelin"
    expected, most = await okapi(app, ws, text)
    assert most == 4  # "lake" four times
    kiln, kiln_most = await okapi(app, ws, "kiln")
    assert kiln_most == 255  # to_tsvector keeps at most MAXNUMPOS - 1 positions of a lexeme
    hits = await run(app, ws, spec(use_vector=False), "kiln", None)
    assert {h.memory.id: h.lexical[0] for h in hits if h.lexical} == pytest.approx(kiln, rel=1e-9)
    hits = await run(app, ws, spec(use_vector=False), text, None)
    assert {h.memory.id: h.lexical[0] for h in hits if h.lexical} == pytest.approx(expected, rel=1e-9)
    assert [h.memory.id for h in hits] == sorted(expected, key=lambda i: (-expected[i], i))


@pytest.mark.parametrize("prefilter", [False, True])
async def test_rm3_expansion_reaches_memories_sharing_only_feedback_lexemes(
    app: App, tenant_factory: TenantFactory, prefilter: bool
) -> None:
    ws, _ = await seeded(app, tenant_factory)
    text = "LGBTQ support group"
    lexical = {"use_vector": False, "prefilter": prefilter}
    plain = await run(app, ws, spec(**lexical), text, None)
    expanded = await run(app, ws, spec(**lexical, prf_terms=10, prf_docs=2, prf_weight=0.5), text, None)
    plain_texts = {r.memory.content for r in plain}
    expanded_texts = [r.memory.content for r in expanded]
    # The two support-group memories are the feedback; "caroline" is among their lexemes, so
    # Caroline's other memories, which share no lexeme with the query, become candidates.
    assert "Caroline is researching adoption agencies" not in plain_texts
    assert "Caroline is researching adoption agencies" in expanded_texts
    assert expanded_texts[0] == "Caroline went to the LGBTQ support group on Tuesday"
    assert len(expanded) > len(plain)
    off = await run(app, ws, spec(**lexical, prf_terms=0, prf_docs=2, prf_weight=0.5), text, None)
    assert [(r.memory.id, r.score) for r in off] == [(r.memory.id, r.score) for r in plain]


@pytest.mark.parametrize("lexeme", ["o'brien", "c:\\windows", "x:*", "a & b", "!", "''"])
async def test_a_term_query_matches_its_lexeme_verbatim_and_nothing_else(app: App, lexeme: str) -> None:
    """The tsquery BM25 ranks a lexeme with (`search_bm25.TERM_QUERY`; its quoting is the
    lexical candidates' OR query's too): quotes, backslashes and operator characters are
    the lexeme's own, never tsquery syntax (a prefix `:*`, an `&`)."""
    query = sql.SQL(search_bm25.TERM_QUERY.format(lexeme="%(lexeme)s"))
    async with app.db.admin() as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT array_to_tsvector(ARRAY[%(lexeme)s]) @@ {query} AS own,"
                " array_to_tsvector(ARRAY['xylophone', 'a', 'b', 'o', 'brien']) @@ {query} AS other"
            ).format(query=query),
            {"lexeme": lexeme},
        )
        row = await cur.fetchone()
    assert row == {"own": True, "other": False}
