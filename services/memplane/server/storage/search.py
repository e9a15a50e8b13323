"""Hybrid search as one SQL statement: vector candidates, lexical candidates scored by
BM25, fusion and the rows returned, every value a bound parameter.

One query, one statement (a search of several queries sends one per query in one
pipeline: one round trip). Its parts, as CTEs:
- lex, df, stats, w: the query's lexemes (at most MAX_QUERY_LEXEMES), their document
  frequencies read by key from `lexeme_df` (kept current on write, migration 0006), N and
  the average document length from `workspace_stats`, and Lucene's BM25 IDF,
  ln(1 + (N - df + 0.5) / (df + 0.5)) (Robertson & Zaragoza 2009);
- cand, bm25: the lexical candidates and their Okapi BM25 (k1, b). Three ways to find the
  candidates, chosen by the caller: *prefilter* (a filter known to select few rows: every
  one of those rows, read through the btree scope indexes; BM25's join with the query's
  lexemes drops those holding none, so an @@ test first would only repeat that work: it
  cost ~14 % of a per-user search on LoCoMo, `bench/search_plan.py --per-user`); else the
  GIN index with the rarest lexemes only, as many as keep their summed postings within
  *lexical_budget* (at least the rarest one): a memory that holds only common lexemes
  scores too low to matter, and the candidates stay bounded at any workspace size (the
  idea of WAND and of Lucene's max-score pruning, reduced to choosing the query terms).
  At most *lexical_cap* candidates are scored: when even the rarest lexeme is in more
  memories than that, the first *lexical_cap* of them in the index's (physical) order
  are — every lexeme of such a query is common, its lexical signal weak, and the vector
  candidates carry it;
- vec: the *depth* nearest by cosine, exactly (a btree-read scope, sorted) or through the
  partition's HNSW index with pgvector's iterative scan (set for the transaction by the
  caller: hnsw.ef_search, hnsw.iterative_scan) merged with the exact order of the rows
  not yet in the graph (`vector_indexed` false: `memplane.server.storage.vector_index`);
- vs, ls, combined, fused: each signal's scores on the fusion's scale (min-max, DBSF's,
  or z-scores) with ranks, then RRF, WEIGHTED, DBSF or ZSCORE exactly as
  `memplane.server.retrieval.fusion.fuse` (which stays the reference: a test compares them);
- with RM3 on (`prf_terms`), the lexical leg's first pass is `bm25_0` and a second pass
  over the expanded query is `bm25` (`memplane.server.storage.search_rm3`);
- top: min_score and top_k, after the neighbourhood, speaker, time and phrase terms when
  any is on (fused score + boosts, over the query's largest such sum:
  `memplane.server.storage.search_boosts`); then the memory rows.
A term that is off adds nothing to the statement's text.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncCursor, AsyncRawCursor, sql
from psycopg.raw_cursor import RawCursorMixin

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import Memory, MemoryType, Workspace
from memplane.domain.ranking import BOOST_NAMES, Boosts, FusionMethod, Ranking
from memplane.server.storage.database import Connection
from memplane.server.storage.filters import Params, compile_filter
from memplane.server.storage.rows import MEMORY_COLUMNS, memory_from_row
from memplane.server.storage.search_bm25 import BM25, BM25_RANK_TERMS, QUOTED_LEXEME, TERM_QUERY, ZETA_2
from memplane.server.storage.search_boosts import CONTEXT_COLUMN, boosts_from_row, term_values, top_cte
from memplane.server.storage.search_rm3 import rm3_ctes

Cursor = Any  # psycopg.AsyncCursor[dict[str, Any]]

TS_CONFIG = "english"
MAX_QUERY_LEXEMES = 64  # lexemes of one query used for BM25 (a 4 KiB query rarely has more)


@dataclass(frozen=True)
class SearchSpec:
    """How to search (the same for every query of a request): which signals and plans,
    the cut, the server's BM25 and RM3 constants, and the request's `Ranking` whole."""

    use_vector: bool
    use_lexical: bool
    depth: int  # candidates per signal
    top_k: int
    min_score: float
    exact: bool  # vector: sort the filtered rows instead of walking HNSW
    prefilter: bool  # lexical: test @@ on the filtered rows instead of walking GIN
    lexical_budget: int  # postings the GIN candidate query may cover (see the module docstring)
    lexical_cap: int  # candidates the GIN candidate query returns at most
    ranking: Ranking  # fusion, its weight and k, the query-aware terms, RM3's lexemes (prf_terms)
    k1: float
    b: float
    prf_docs: int = 10  # RM3 feedback memories
    prf_weight: float = 0.5  # RM3: the original query's share of the expanded query
    context_turns: int = 0  # transcript turns returned each side of a hit

    @property
    def rrf(self) -> bool:
        """Whether the fusion is RRF."""
        return self.ranking.fusion is FusionMethod.RRF

    @property
    def dbsf(self) -> bool:
        """Whether the fusion is DBSF."""
        return self.ranking.fusion is FusionMethod.DBSF

    @property
    def zscore(self) -> bool:
        """Whether the fusion is ZSCORE."""
        return self.ranking.fusion is FusionMethod.ZSCORE

    @property
    def prf_terms(self) -> int:
        """RM3 expansion lexemes (0: no pseudo-relevance feedback)."""
        return self.ranking.prf_terms

    @property
    def boosted(self) -> bool:
        """Whether any query-aware term (`memplane.domain.ranking.Boosts`) is on."""
        return self.ranking.boosted

    @property
    def neighbours(self) -> bool:
        """Whether the neighbourhood term is on."""
        return self.ranking.neighbours


@dataclass(frozen=True)
class QueryText:
    """One query's own values: its segmented text (lexical), its vector (None without the
    vector signal), the names it mentions (lower-case, `memplane.server.retrieval.query.query_names`),
    the interval [time_from, time_to) it names (None: none) and whether it asks for a time
    (`memplane.server.retrieval.query.asks_when`)."""

    text: str
    vector: np.ndarray | None
    names: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()  # quoted phrases, segmented
    time_from: datetime | None = None
    time_to: datetime | None = None
    asks_when: bool = False


@dataclass(frozen=True)
class SearchRow:
    """One fused hit: the memory, its fused score, each signal's raw score, normalised
    score and rank (None where the signal did not retrieve it), and what the neighbourhood,
    speaker, time, phrase and when terms added (weighted; 0 when off)."""

    memory: Memory
    score: float
    vector: tuple[float, float, int] | None
    lexical: tuple[float, float, int] | None
    boosts: Boosts = field(default_factory=Boosts)
    context: tuple[ContextTurn, ...] = ()
    cosine: float | None = None  # the hit's cosine to the query (None without the vector signal)
    lexical_max: float | None = None  # the query's BM25 scale (`_LEXICAL_MAX`; None without the lexical signal)


@dataclass(frozen=True)
class ContextTurn:
    """A transcript turn next to a hit: its position relative to the hit (-1 before),
    message id, author name and text."""

    offset: int
    message_id: str
    name: str
    content: str


# The OR tsquery of the lexemes of CTE w that pass {cond}, each quoted for tsquery input
# (`QUOTED_LEXEME`).
_TSQUERY = sql.SQL(
    "(SELECT CASE WHEN count(*) = 0 THEN NULL ELSE array_to_string(array_agg({quoted}), ' | ')::tsquery END"
    " FROM {terms} w {cond})"
)
_QUOTED = sql.SQL(QUOTED_LEXEME.format(lexeme="w.lexeme"))


_RAREST = sql.SQL("WHERE w.cumulative <= %(lexical_budget)s OR w.cumulative = w.df")  # or the rarest one


# A signal's scores on one scale, over the query's candidates of that signal: min-max (best
# 1, worst 0; all 1 when tied), or DBSF's mean -/+ 3 standard deviations clipped to 0..1.
_MIN_MAX = sql.SQL(
    "CASE WHEN max(score) OVER () > min(score) OVER ()"
    " THEN (score - min(score) OVER ()) / (max(score) OVER () - min(score) OVER ()) ELSE 1 END"
)
_DBSF = sql.SQL(
    "CASE WHEN stddev_pop(score) OVER () > 0"
    " THEN least(greatest((score - avg(score) OVER () + 3 * stddev_pop(score) OVER ())"
    "   / (6 * stddev_pop(score) OVER ()), 0), 1) ELSE 1 END"
)


_Z = sql.SQL(
    "CASE WHEN stddev_pop(score) OVER () > 0 THEN (score - avg(score) OVER ()) / stddev_pop(score) OVER () ELSE 0 END"
)


def _norm(spec: SearchSpec) -> sql.Composable:
    if spec.rrf:
        return _MIN_MAX
    if spec.dbsf:
        return _DBSF
    return _Z if spec.zscore else _MIN_MAX


def lexical_candidates(spec: SearchSpec, where: sql.Composable, whole: bool, terms: str, name: str) -> sql.Composable:
    """CTE *name*: the lexical candidates (id, lexical, lexical_length) of the lexemes in CTE
    *terms* (lexeme, df, cumulative), found one of the three ways of the module docstring
    (the prefilter's rows are read by the call for terms "w", CTE `cand`; RM3's expanded
    query reuses them)."""
    ident = sql.Identifier(name)
    if spec.prefilter:
        if terms != "w":  # the expanded query's candidates: the same rows
            return sql.SQL("{name} AS (SELECT * FROM cand)").format(name=ident)
        # Inlined into each of BM25's two branches (only one runs) rather than copied into
        # a work table first, as a CTE read twice would be; with RM3 the expanded query
        # reads the same rows again, and the copy is kept.
        return sql.SQL(
            "{name} AS {materialized} (SELECT m.id, m.lexical, m.lexical_length FROM memories m"
            "  WHERE m.workspace_key = %(ws)s AND {where})"
        ).format(name=ident, where=where, materialized=sql.SQL("" if spec.prf_terms > 0 else "NOT MATERIALIZED"))
    tsquery = _TSQUERY.format(quoted=_QUOTED, terms=sql.Identifier(terms), cond=_RAREST)
    if whole:
        # Row-level security keeps a tenant's `@@` off the GIN index (not leakproof):
        # memplane_lexical_candidates (migration 0010) reads it as the owner, for this
        # workspace only, and applies the validity filter (all a whole-workspace filter holds).
        return sql.SQL(
            "{name} AS MATERIALIZED (SELECT c.id, c.lexical, c.lexical_length FROM memplane_lexical_candidates("
            "   %(ws)s, {tsquery}, %(at)s::timestamptz, %(superseded)s, %(expired)s, %(lexical_cap)s) c)"
        ).format(name=ident, tsquery=tsquery)
    return sql.SQL(
        "{name} AS MATERIALIZED (SELECT m.id, m.lexical, m.lexical_length FROM memories m"
        "  WHERE m.workspace_key = %(ws)s AND m.lexical @@ {tsquery} AND {where} LIMIT %(lexical_cap)s)"
    ).format(name=ident, where=where, tsquery=tsquery)


def _lexical_ctes(spec: SearchSpec, where: sql.Composable, whole: bool) -> sql.Composable:
    first = "bm25_0" if spec.prf_terms > 0 else "bm25"
    parts = [
        sql.SQL(
            "lex AS MATERIALIZED (SELECT coalesce((array_agg(DISTINCT u.lexeme ORDER BY u.lexeme))[1:%(max_lexemes)s],"
            "   '{{}}') AS lexemes FROM unnest(to_tsvector(%(ts_config)s::regconfig, %(text)s)) u),"
            " df AS MATERIALIZED (SELECT x.lexeme, coalesce(sum(d.df), 0)::float8 AS df"
            "   FROM lex CROSS JOIN LATERAL unnest(lex.lexemes) x(lexeme)"
            "   LEFT JOIN lexeme_df d ON d.workspace_key = %(ws)s AND d.lexeme = x.lexeme GROUP BY x.lexeme),"
            " stats AS MATERIALIZED (SELECT greatest(s.memory_count, 1)::float8 AS n,"
            "   greatest(s.lexical_length_sum::float8 / greatest(s.memory_count, 1), 1) AS avgdl"
            "   FROM workspace_stats s WHERE s.workspace_key = %(ws)s),"
            " w AS MATERIALIZED (SELECT df.lexeme, df.df, ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5)) AS idf,"
            "   1::float8 AS qw, sum(df.df) OVER (ORDER BY df.df, df.lexeme) AS cumulative, {query} AS query"
            "   FROM df, stats)"
        ).format(query=sql.SQL(TERM_QUERY.format(lexeme="df.lexeme"))),
        lexical_candidates(spec, where, whole, "w", "cand"),
        sql.SQL(BM25).format(name=sql.Identifier(first), cand=sql.Identifier("cand"), terms=sql.Identifier("w")),
    ]
    if spec.prf_terms > 0:
        parts.append(rm3_ctes(lexical_candidates(spec, where, whole, "wx", "candx")))
        parts.append(
            sql.SQL(BM25).format(name=sql.Identifier("bm25"), cand=sql.Identifier("candx"), terms=sql.Identifier("wx"))
        )
    parts.append(
        sql.SQL(
            "ls AS (SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank, {norm} AS norm FROM bm25)"
        ).format(norm=_norm(spec))
    )
    return sql.SQL(", ").join(parts)


def _vector_ctes(spec: SearchSpec, where: sql.Composable, dimensions: int) -> sql.Composable:
    cast = sql.SQL("vector({})").format(sql.Literal(dimensions))  # the index's expression: a type, not a value
    distance = sql.SQL("(m.embedding::{cast} <=> %(vector)s::{cast})").format(cast=cast)
    ranks = sql.SQL(
        " vs AS (SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank, {norm} AS norm FROM vec)"
    ).format(norm=_norm(spec))
    if spec.exact:  # + 0 hides the order from HNSW: every row of the scope, sorted
        return sql.SQL(
            "vec AS (SELECT m.id, 1 - {distance} AS score FROM memories m"
            "   WHERE m.workspace_key = %(ws)s AND {where} ORDER BY {distance} + 0 LIMIT %(depth)s),{ranks}"
        ).format(distance=distance, where=where, ranks=ranks)
    # The graph holds the rows the vector indexer has reached (its index is partial, WHERE
    # vector_indexed: migration 0020); the rest, the backlog of the last moments' writes,
    # are few and sorted exactly, so a search sees every committed memory.
    return sql.SQL(
        "vec AS (SELECT id, score FROM ("
        "   (SELECT m.id, 1 - {distance} AS score FROM memories m"
        "     WHERE m.workspace_key = %(ws)s AND {where} AND m.vector_indexed ORDER BY {distance} LIMIT %(depth)s)"
        "   UNION ALL"
        "   (SELECT m.id, 1 - {distance} AS score FROM memories m"
        "     WHERE m.workspace_key = %(ws)s AND {where} AND NOT m.vector_indexed ORDER BY {distance} + 0"
        "     LIMIT %(depth)s)) graph_and_backlog ORDER BY score DESC, id LIMIT %(depth)s),{ranks}"
    ).format(distance=distance, where=where, ranks=ranks)


_EMPTY_SIGNAL = sql.SQL(
    "SELECT NULL::uuid AS id, NULL::float8 AS score, NULL::bigint AS rank, NULL::float8 AS norm WHERE false"
)

_FUSION = (
    " weights AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM vs) THEN %(vector_weight)s::float8 ELSE 0 END AS wv,"
    "   CASE WHEN EXISTS (SELECT 1 FROM ls) THEN 1 - %(vector_weight)s::float8 ELSE 0 END AS wl,"
    "   (SELECT min(norm) FROM vs) AS v_floor, (SELECT min(norm) FROM ls) AS l_floor),"
    " combined AS (SELECT coalesce(vs.id, ls.id) AS id,"
    "   CASE WHEN %(rrf)s"
    "     THEN (coalesce(weights.wv / (%(rrf_k)s + vs.rank), 0) + coalesce(weights.wl / (%(rrf_k)s + ls.rank), 0))"
    "          / ((weights.wv + weights.wl) / (%(rrf_k)s + 1))"
    "     WHEN %(zscore)s"
    "     THEN coalesce(weights.wv * coalesce(vs.norm, weights.v_floor), 0)"
    "          + coalesce(weights.wl * coalesce(ls.norm, weights.l_floor), 0)"
    "     ELSE (coalesce(weights.wv * vs.norm, 0) + coalesce(weights.wl * ls.norm, 0)) / (weights.wv + weights.wl)"
    "   END AS score,"
    "   vs.score AS v_score, vs.norm AS v_norm, vs.rank AS v_rank, ls.score AS l_score, ls.norm AS l_norm,"
    "   ls.rank AS l_rank"
    "   FROM vs FULL JOIN ls ON vs.id = ls.id CROSS JOIN weights WHERE weights.wv + weights.wl > 0),"
    " fused AS (SELECT id, CASE WHEN NOT %(zscore)s OR %(rrf)s THEN score"
    "     WHEN max(score) OVER () > min(score) OVER ()"
    "     THEN (score - min(score) OVER ()) / (max(score) OVER () - min(score) OVER ()) ELSE 1 END AS score,"
    "   v_score, v_norm, v_rank, l_score, l_norm, l_rank FROM combined)"
)


def _cosine(dimensions: int) -> sql.Composable:
    """Every returned hit's cosine similarity to the query, also of a hit the vector leg
    did not retrieve (the relevance reads it: `memplane.server.retrieval.relevance`)."""
    cast = sql.SQL("vector({})").format(sql.Literal(dimensions))
    return sql.SQL("1 - (m.embedding::{cast} <=> %(vector)s::{cast})").format(cast=cast)


_LEXICAL_MAX = sql.SQL("(SELECT coalesce(sum(w.idf), 0) FROM w)")
"""The BM25 of a memory of average length holding each of the query's lexemes once: the sum
of their IDFs (tf (k1 + 1) / (tf + k1) is 1 at tf 1 and avgdl), the scale of the lexical
part of the relevance."""


def compose(spec: SearchSpec, where: sql.Composable, whole: bool, dimensions: int) -> sql.Composed:
    """The search statement's text for *spec*, filter condition *where* (over the whole
    workspace when *whole*) and vectors of *dimensions*, uncached (`statement` caches it)."""
    parts: list[sql.Composable] = []
    if spec.use_lexical:
        parts.append(_lexical_ctes(spec, where, whole))
    else:
        parts.append(sql.SQL("ls AS ({})").format(_EMPTY_SIGNAL))
    if spec.use_vector:
        parts.append(_vector_ctes(spec, where, dimensions))
    else:
        parts.append(sql.SQL("vs AS ({})").format(_EMPTY_SIGNAL))
    return sql.SQL(
        "WITH {parts}, {fusion}, {top}"
        " SELECT {cols}, top.score AS fused_score, top.v_score, top.v_norm, top.v_rank, top.l_score, top.l_norm,"
        "   top.l_rank, {boosts}, {context} AS context, {cosine} AS cosine, {lexical_max} AS l_max"
        " FROM top JOIN memories m ON m.workspace_key = %(ws)s AND m.id = top.id"
        " ORDER BY top.score DESC, top.id"
    ).format(
        parts=sql.SQL(", ").join(parts),
        cosine=_cosine(dimensions) if spec.use_vector else sql.SQL("NULL::float8"),
        lexical_max=_LEXICAL_MAX if spec.use_lexical else sql.SQL("NULL::float8"),
        fusion=sql.SQL(_FUSION),
        top=top_cte(spec.boosted, spec.neighbours),
        cols=sql.SQL(MEMORY_COLUMNS),
        boosts=sql.SQL(", ".join(f"top.b_{name}" for name in BOOST_NAMES)),
        context=CONTEXT_COLUMN if spec.context_turns > 0 else sql.SQL("NULL::json"),
    )


def _shape(spec: SearchSpec) -> SearchSpec:
    """*spec* with every value the statement binds as a parameter set to one value, keeping
    what its text depends on (which signals, paths, norm and terms): the cache key of
    `_text`. tests/unit/test_search_text.py varies each field to check it."""
    return dataclasses.replace(
        spec,
        depth=0,
        top_k=0,
        min_score=0.0,
        lexical_budget=0,
        lexical_cap=0,
        ranking=spec.ranking.shape(),
        k1=0.0,
        b=0.0,
        prf_docs=0,
        prf_weight=0.0,
        context_turns=min(spec.context_turns, 1),
    )


@functools.lru_cache(maxsize=256)
def _text(shape: SearchSpec, where: str, whole: bool, dimensions: int) -> sql.SQL:
    # Composing the ~6 KB statement and rendering it took ~0.14 ms of Python per search.
    return sql.SQL(compose(shape, sql.SQL(where), whole, dimensions).as_string(None))


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


@functools.lru_cache(maxsize=256)
def _positional(shape: SearchSpec, where: str, whole: bool, dimensions: int) -> tuple[str, tuple[str, ...]]:
    """`_text` in PostgreSQL's own placeholders ($1, $2, ...; a name used twice is one
    parameter) and the parameter names in their order, for psycopg's raw cursor.

    psycopg converts `%(name)s` to `$n` on every execute, and caches that conversion only
    for statements up to 4,096 bytes (psycopg/_queries.py, MAX_CACHED_STATEMENT_LENGTH):
    this ~6.5 KB text was split by its regular expression afresh per search, ~7 % of the
    server's Python per search (py-spy, bench/peers_sql.py at one client)."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(1) is None:
            raise ValueError(f"a bare '%' in the search statement at {m.start()}")
        return f"${names.setdefault(m.group(1), len(names) + 1)}"

    text = _PLACEHOLDER.sub(number, _text(shape, where, whole, dimensions).as_string(None))
    return text, tuple(names)


_RAW_ATTRIBUTE = "_memplane_raw_cursor"


def _raw_cursor_class(factory: type[AsyncCursor[Any]]) -> type[AsyncCursor[Any]]:
    """The connection's cursor class (psycopg's, or the telemetry's traced subclass of it,
    whose execute makes the database span) with psycopg's raw-query mixin, as
    `psycopg.AsyncRawCursor` is made of `AsyncCursor`. Made once per class and kept on that
    class, not in a table here: the telemetry makes a new class per connection, and a
    table would keep every one the process ever opened."""
    if factory is AsyncCursor:
        return AsyncRawCursor
    if issubclass(factory, RawCursorMixin):
        return factory
    raw: type[AsyncCursor[Any]] | None = factory.__dict__.get(_RAW_ATTRIBUTE)
    if raw is None:
        raw = type(f"Raw{factory.__name__}", (RawCursorMixin, factory), {})
        setattr(factory, _RAW_ATTRIBUTE, raw)
    return raw


def statement(spec: SearchSpec, flt: MemoryFilter, now: datetime, dimensions: int) -> tuple[sql.SQL, Params]:
    """The search statement of one query and its parameters (the query's own values,
    `text` and `vector`, are set by the caller). Its text depends only on the shape of
    *spec* and of *flt* (values are parameters) and is composed once per shape."""
    where, params = _bound(spec, flt, now)
    return _text(_shape(spec), where, not flt.narrows, dimensions), params


def _bound(spec: SearchSpec, flt: MemoryFilter, now: datetime) -> tuple[str, Params]:
    """The filter's condition (its text) and the request's parameter values."""
    params = Params()
    where = compile_filter(flt, params, now).as_string(None)
    params.values.update(
        ws=0,
        depth=spec.depth,
        top_k=spec.top_k,
        min_score=spec.min_score,
        rrf=spec.rrf,
        zscore=spec.zscore and not spec.dbsf,
        rrf_k=spec.ranking.rrf_k,
        vector_weight=spec.ranking.vector_weight,
        k1=spec.k1,
        b=spec.b,
        max_lexemes=MAX_QUERY_LEXEMES,
        rank_terms=BM25_RANK_TERMS,
        zeta_2=ZETA_2,
        lexical_budget=spec.lexical_budget,
        lexical_cap=spec.lexical_cap,
        ts_config=TS_CONFIG,
        at=now,
        superseded=flt.include_superseded,
        expired=flt.include_expired,
    )
    if spec.context_turns > 0:
        params.values.update(context_turns=spec.context_turns, turn_type=MemoryType.EPISODIC.value)
    if spec.prf_terms > 0:
        params.values.update(prf_terms=spec.prf_terms, prf_docs=spec.prf_docs, prf_weight=spec.prf_weight)
    if spec.boosted:
        params.values.update(term_values(spec.ranking))
    return where, params


def _signal(row: dict[str, Any], prefix: str) -> tuple[float, float, int] | None:
    if row[f"{prefix}_rank"] is None:
        return None
    return float(row[f"{prefix}_score"]), float(row[f"{prefix}_norm"]), int(row[f"{prefix}_rank"])


async def send(
    conn: Connection,
    workspace: Workspace,
    queries: Sequence[QueryText | tuple[str, np.ndarray | None]],
    spec: SearchSpec,
    flt: MemoryFilter,
    *,
    now: datetime,
) -> list[Cursor]:
    """Send one statement per query (a `QueryText`, or (segmented text, vector or None));
    return their cursors, to be `read` after the pipeline block of
    `Database.tenant_pipeline` (all of it is one round trip)."""
    where, params = _bound(spec, flt, now)
    text, names = _positional(_shape(spec), where, not flt.narrows, workspace.embedding_dimensions)
    raw_cursor = _raw_cursor_class(conn.cursor_factory)
    cursors = []
    for item in queries:
        q = item if isinstance(item, QueryText) else QueryText(item[0], item[1])
        values = query_values(params, workspace.key, q, spec)
        cursor: Cursor = raw_cursor(conn)
        await cursor.execute(text, [values[name] for name in names])
        cursors.append(cursor)
    return cursors


def query_values(params: Params, workspace_key: int, q: QueryText, spec: SearchSpec) -> dict[str, Any]:
    """The values of `statement`'s text for one query *q* in workspace *workspace_key*:
    *params* (the request's) with the query's own."""
    values = {**params.values, "ws": workspace_key, "text": q.text, "vector": q.vector}
    if spec.boosted:
        values.update(
            names=list(q.names),
            phrases=list(q.phrases),
            time_from=q.time_from,
            time_to=q.time_to,
            asks_when=q.asks_when,
        )
    return values


async def read(cursors: list[Cursor]) -> list[list[SearchRow]]:
    """The fused hits of each query, best first, at most top_k each."""
    return [
        [
            SearchRow(
                memory=memory_from_row(r),
                score=float(r["fused_score"]),
                vector=_signal(r, "v"),
                lexical=_signal(r, "l"),
                boosts=boosts_from_row(r),
                context=tuple(
                    ContextTurn(int(c["offset"]), str(c["id"]), str(c["name"]), str(c["content"]))
                    for c in r["context"] or ()
                ),
                cosine=None if r["cosine"] is None else float(r["cosine"]),
                lexical_max=None if r["l_max"] is None else float(r["l_max"]),
            )
            for r in await cur.fetchall()
        ]
        for cur in cursors
    ]


def merge_queries(per_query: list[list[SearchRow]]) -> list[tuple[SearchRow, int]]:
    """The hits of several queries as one list: each memory once, with its best-scoring
    row and the index of the query that gave it, best first (ties by id)."""
    best: dict[str, tuple[SearchRow, int]] = {}
    for index, rows in enumerate(per_query):
        for row in rows:
            if row.memory.id not in best or row.score > best[row.memory.id][0].score:
                best[row.memory.id] = (row, index)
    return sorted(best.values(), key=lambda p: (-p[0].score, p[0].memory.id))
