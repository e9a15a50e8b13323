"""The query-aware terms of the search statement (`memplane.server.storage.search`): neighbourhood,
speaker, time, phrase and when, as its last CTEs.

Over every fused candidate (CTE `fused`): its memory's speaker (``metadata.speaker``),
`valid_from` and place in its session's transcript (the seq of its first source message,
joined only when the neighbourhood term is on), the best fused score among the candidates
of the same session within `neighbour_window` turns, the sum
fused + neighbour_weight * that + speaker_weight * named + time_weight * dated +
phrase_weight * phrased + when_weight * timed, and the score: that sum over the largest sum among the query's
fused candidates (a window over all of them, before min_score and top_k), so the best
candidate scores 1, as ZSCORE's best does, and the rest keep their order (all 1 when the
largest sum is 0: the fusions' tie rule). min_score and top_k then cut that score, as
they cut the fused score with the terms off. Parameters: names (text[]), time_from, time_to (the
query's own; phrases, text[], the query's quoted phrases), asks_when (bool), neighbour_window,
neighbour_weight, speaker_weight, time_weight, phrase_weight, when_weight, and the constant
patterns `TIME_PATTERNS` (bound like every other value).
A candidate is *dated* when its valid_from, or valid_from moved by a relative expression of
its own text (`TIME_SHIFTS`: "last month" in a turn of 18 April dates it 18 March), lies in
[time_from, time_to); *timed* when the query asks for a time and its text holds a relative
time or duration expression (`TIME_EXPRESSION`).
A memory without a transcript position (AddMemories) is ordered within its scope session
by when it was written (its first event's id); one without a session has no neighbours.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from psycopg import sql

from memplane.domain.ranking import BOOST_NAMES, Boosts, Ranking

_UNIT = r"(?:days?|weeks?|weekends?|months?|years?)"
_NUMBER = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|couple\s+of|several|[0-9]+)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SPACE = r"\s+"
"""Between an expression's words: any whitespace, as the query's own are read
(`memplane.server.retrieval.query`): a turn's "last  week" or a line broken inside it counts."""
TIME_EXPRESSION = (
    rf"\m(?:yesterday|tomorrow|today|tonight|recently|the{_SPACE}other{_SPACE}day"
    rf"|(?:last|next|this|past){_SPACE}(?:{_UNIT}|night|morning|evening|summer|winter|spring|fall|autumn|{_WEEKDAY})"
    rf"|{_NUMBER}{_SPACE}{_UNIT}(?:{_SPACE}ago)?|on{_SPACE}{_WEEKDAY})\M"
)
r"""A relative time or duration expression (PostgreSQL ARE, matched case-insensitively with ~*;
\m and \M are its word boundaries): "yesterday", "last Friday", "next month", "3 years ago",
"for two months", "recently". The forms a turn dates its event by in LoCoMo's conversations
(read on conversations 1-5); rule-based taggers (HeidelTime, Strötgen & Gertz 2013) cover
many more."""

TIME_SHIFTS: tuple[tuple[str, timedelta], ...] = tuple(
    (pattern.replace(" ", _SPACE), shift)
    for pattern, shift in (
        (r"\myesterday\M", timedelta(days=-1)),
        (r"\mtomorrow\M", timedelta(days=1)),
        (r"\m(?:last week|last weekend|a week ago|past week)\M", timedelta(days=-7)),
        (r"\mnext week(?:end)?\M", timedelta(days=7)),
        (r"\m(?:last month|a month ago|past month)\M", timedelta(days=-30)),
        (r"\mnext month\M", timedelta(days=30)),
        (r"\m(?:last year|a year ago)\M", timedelta(days=-365)),
        (r"\mnext year\M", timedelta(days=365)),
    )
)
"""Relative expressions of a candidate's own text and how far each moves the time it is
dated at for the time term (a month as 30 days, a year as 365: the query's interval is
widened by `retrieval.time_slack_days` anyway)."""

TIME_PATTERNS: dict[str, object] = {
    "time_expression": TIME_EXPRESSION,
    "shift_patterns": [pattern for pattern, _ in TIME_SHIFTS],
    "shift_intervals": [shift for _, shift in TIME_SHIFTS],
}
"""The statement's constant parameters of the time and when terms."""

BOOST_COLUMNS = ", ".join(f"b_{name}" for name in BOOST_NAMES)
"""The columns of what each term added (`Boosts`), in its field order: b_neighbour, ..."""

_TOP = sql.SQL(
    " top AS (SELECT *, {zeros} FROM fused WHERE score >= %(min_score)s ORDER BY score DESC, id LIMIT %(top_k)s)"
).format(zeros=sql.SQL(", ".join(f"0::float8 AS b_{name}" for name in BOOST_NAMES)))

# What each term adds to a candidate (column b_<term>; every term of `Boosts` has one): over
# CTEs fused f, ctx (the candidate's memory read against the query) and nb (its neighbours).
_TERMS = {
    "neighbour": "%(neighbour_weight)s::float8 * coalesce(nb.score, 0)",
    "speaker": "CASE WHEN ctx.named THEN %(speaker_weight)s::float8 ELSE 0 END",
    "time": "CASE WHEN ctx.dated THEN %(time_weight)s::float8 ELSE 0 END",
    "phrase": "CASE WHEN ctx.phrased THEN %(phrase_weight)s::float8 ELSE 0 END",
    "when": "CASE WHEN ctx.timed THEN %(when_weight)s::float8 ELSE 0 END",
}

# The query-aware terms, over every fused candidate: its memory's speaker, time and place in
# its session's transcript (the first source message's seq), the best fused score among the
# candidates of the same session within the window, and the sum over the largest sum.
_CONTEXT = sql.SQL(
    " ph AS MATERIALIZED (SELECT phraseto_tsquery(%(ts_config)s::regconfig, p) AS query"
    "   FROM unnest(%(phrases)s::text[]) p),"
    " ctx AS MATERIALIZED (SELECT f.id, f.score, {session} AS session, {seq} AS seq,"
    "   coalesce(lower(m.metadata->>'speaker') = ANY(%(names)s::text[]), false) AS named,"
    "   coalesce(m.valid_from >= %(time_from)s::timestamptz AND m.valid_from < %(time_to)s::timestamptz, false)"
    "   OR (%(time_from)s::timestamptz IS NOT NULL AND EXISTS (SELECT 1"
    "     FROM unnest(%(shift_patterns)s::text[], %(shift_intervals)s::interval[]) s(pattern, shift)"
    "     WHERE m.valid_from + s.shift >= %(time_from)s::timestamptz"
    "     AND m.valid_from + s.shift < %(time_to)s::timestamptz"
    "     AND m.content ~* s.pattern)) AS dated,"
    "   EXISTS (SELECT 1 FROM ph WHERE m.lexical @@ ph.query) AS phrased,"
    "   %(asks_when)s::boolean AND m.content ~* %(time_expression)s AS timed"
    "   FROM fused f JOIN memories m ON m.workspace_key = %(ws)s AND m.id = f.id {transcript}),"
    " nb AS ({neighbours}),"
    " boosted AS (SELECT f.*, {terms}"
    "   FROM fused f JOIN ctx ON ctx.id = f.id LEFT JOIN nb ON nb.id = f.id),"
    " summed AS (SELECT *, score + {sum} AS total FROM boosted),"
    " rescaled AS (SELECT id, CASE WHEN max(total) OVER () > 0 THEN total / max(total) OVER () ELSE 1 END AS score,"
    "   v_score, v_norm, v_rank, l_score, l_norm, l_rank, {columns}"
    "   FROM summed),"
    " top AS (SELECT * FROM rescaled WHERE score >= %(min_score)s ORDER BY score DESC, id LIMIT %(top_k)s)"
)
_TRANSCRIPT = sql.SQL(
    "LEFT JOIN transcript_messages t ON t.workspace_key = %(ws)s AND t.session_id = m.source_session_id"
    " AND t.message_id = m.source_message_ids[1]"
)
_NEIGHBOURS = sql.SQL(
    "SELECT a.id, max(b.score) AS score FROM ctx a JOIN ctx b ON b.session = a.session"
    " AND b.seq BETWEEN a.seq - %(neighbour_window)s AND a.seq + %(neighbour_window)s AND b.id <> a.id GROUP BY a.id"
)
# A candidate's order within its session: its transcript position ("t:" + the transcript's
# session), else, for a memory of a scope session with no transcript (AddMemories), the
# order it was written in: the id of its first event ("w:" + the scope session; event ids
# of one write are consecutive, in request order; read through memory_events_memory_idx,
# an index-only scan). No session, no neighbours: the event is not looked up at all (a
# NULL session joins nothing in nb), which saved ~0.15 ms of a ~3.5 ms per-user search
# on LoCoMo's AddMemories rows (`bench/search_plan.py --terms`;
# docs/benchmarks/recall.md#cost-of-the-query-aware-terms).
_SESSION = sql.SQL(
    "CASE WHEN t.seq IS NOT NULL THEN 't:' || m.source_session_id ELSE 'w:' || nullif(m.session_id, '') END"
)
_POSITION = sql.SQL(
    "CASE WHEN t.seq IS NOT NULL THEN t.seq WHEN m.session_id <> ''"
    " THEN (SELECT min(e.id) FROM memory_events e WHERE e.workspace_key = %(ws)s AND e.memory_id = m.id) END"
)
_NO_NEIGHBOURS = sql.SQL("SELECT NULL::uuid AS id, NULL::float8 AS score WHERE false")


# The nearest context_turns turns each side of a hit in its session's transcript (not
# itself) written under the hit's own user_id and agent_id whose memory is current, in
# order, as a JSON array of {offset, id, name, content}; offset counts those turns (-1: the
# user's previous such turn), so another user's turns in a shared session id neither take
# a place in the window nor show in the offsets, and a deleted turn's place goes to the next
# one (a transcript is keyed by session id alone, which two users of a workspace may share:
# a search filtered to one must not return, or count, the other's words); [] without a
# transcript position, or when the turn its provenance names is another user's or agent's
# (AddMemories lets a client name any turn of the workspace: that must not return the
# other's words).
# A turn is context only while its memory is: its raw-turn memory (as migration 0013
# defines one: EPISODIC, metadata naming the message id; WriteConversation writes one
# per turn) of the same user and agent, provenance that one turn, current under the
# search's own validity flags (at, superseded, expired), read through
# memories_source_turn_idx (migration 0015); its content is that memory's (a correction
# replaces the turn's words; a deleted, closed or expired memory drops the turn; another
# memory naming the turn, a note or a fact drawn from it, never stands in for it). Of
# two such memories (a client's copy), the first written.
# Parameters: context_turns, turn_type (MemoryType.EPISODIC's value), at, superseded, expired.
_TURN_MEMORY = sql.SQL(
    "(SELECT t.content FROM memories t WHERE t.workspace_key = %(ws)s"
    "   AND t.source_session_id = n.session_id AND t.source_message_ids[1] = n.message_id"
    "   AND cardinality(t.source_message_ids) = 1 AND t.type = %(turn_type)s"
    "   AND t.user_id = n.user_id AND t.agent_id = n.agent_id AND t.metadata->>'message_id' = n.message_id"
    "   AND (%(superseded)s OR ((t.valid_to IS NULL OR t.valid_to > %(at)s) AND t.valid_from <= %(at)s))"
    "   AND (%(expired)s OR t.expires_at IS NULL OR t.expires_at > %(at)s)"
    "   ORDER BY t.created_at, t.id LIMIT 1)"
)
# One side of the window: the hit's own user's current turns before (<, DESC, side -1) or
# after it (>, ASC, side 1), nearest first, at most context_turns (the scan stops there);
# their offsets (-1, -2, ... and 1, 2, ...) are numbered over the rows kept.
_SIDE = sql.SQL(
    "(SELECT n.seq, n.message_id, n.name, tm.content, {side} AS side"
    " FROM transcript_messages n CROSS JOIN LATERAL {turn} tm"
    " WHERE n.workspace_key = %(ws)s AND n.session_id = h.session_id"
    "   AND n.user_id = h.user_id AND n.agent_id = h.agent_id AND n.seq {cmp} h.seq"
    " ORDER BY n.seq {order} LIMIT %(context_turns)s)"
)
CONTEXT_COLUMN = sql.SQL(
    "(SELECT coalesce(json_agg(json_build_object('offset', w.off, 'id', w.message_id, 'name', w.name,"
    "   'content', w.content) ORDER BY w.seq), '[]'::json)"
    " FROM transcript_messages h CROSS JOIN LATERAL (SELECT s.*,"
    "   s.side * row_number() OVER (PARTITION BY s.side ORDER BY s.side * s.seq) AS off"
    "   FROM ({before} UNION ALL {after}) s) w"
    " WHERE h.workspace_key = %(ws)s AND h.session_id = m.source_session_id AND h.message_id = m.source_message_ids[1]"
    "   AND h.user_id = m.user_id AND h.agent_id = m.agent_id)"
).format(
    before=_SIDE.format(side=sql.SQL("-1"), order=sql.SQL("DESC"), cmp=sql.SQL("<"), turn=_TURN_MEMORY),
    after=_SIDE.format(side=sql.SQL("1"), order=sql.SQL("ASC"), cmp=sql.SQL(">"), turn=_TURN_MEMORY),
)


def top_cte(boosted: bool, neighbours: bool) -> sql.Composable:
    """CTE `top`: the fused candidates (CTE `fused`) past min_score, best first, at most
    top_k, with what each term added (`BOOST_COLUMNS`; all 0 unless *boosted*; the
    transcript joined only for *neighbours*)."""
    if not boosted:
        return _TOP
    terms = sql.SQL(", ".join(f"{_TERMS[name]} AS b_{name}" for name in BOOST_NAMES))
    parts = {
        "terms": terms,
        "sum": sql.SQL(" + ".join(f"b_{name}" for name in BOOST_NAMES)),
        "columns": sql.SQL(BOOST_COLUMNS),
    }
    if neighbours:
        return _CONTEXT.format(session=_SESSION, seq=_POSITION, transcript=_TRANSCRIPT, neighbours=_NEIGHBOURS, **parts)
    return _CONTEXT.format(
        session=sql.SQL("NULL::text"),
        seq=sql.SQL("NULL::bigint"),
        transcript=sql.SQL(""),
        neighbours=_NO_NEIGHBOURS,
        **parts,
    )


def term_values(ranking: Ranking) -> dict[str, Any]:
    """The parameters of the terms' CTEs for *ranking* (bound when any term is on): each
    term's weight and the window by their Ranking names (the neighbourhood's weight 0
    unless the term is on), and `TIME_PATTERNS`."""
    values: dict[str, Any] = {f"{name}_weight": getattr(ranking, f"{name}_weight") for name in BOOST_NAMES}
    values.update(neighbour_window=ranking.neighbour_window, **TIME_PATTERNS)
    if not ranking.neighbours:
        values["neighbour_weight"] = 0.0
    return values


def boosts_from_row(row: Mapping[str, Any]) -> Boosts:
    """What each term added to a returned row (its b_<term> columns)."""
    return Boosts(**{name: float(row[f"b_{name}"]) for name in BOOST_NAMES})
