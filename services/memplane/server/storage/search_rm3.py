"""Pseudo-relevance feedback for the lexical leg of the search statement: RM3.

RM3 (relevance model 3: Abdul-Jaleel et al., "UMass at TREC 2004: Novelty and HARD",
TREC 2004; Lavrenko & Croft, "Relevance-based language models", SIGIR 2001), as Anserini
runs it over BM25 (Lin et al., "Anserini", SIGIR 2017, with fbDocs 10, fbTerms 10,
originalQueryWeight 0.5 by default): the first BM25 pass's best `prf_docs` memories are
taken as relevant, each weighted by its share of their summed BM25 scores, P(d|q); a
lexeme's weight in the relevance model is P(t|R) = sum_d P(t|d) P(d|q), with P(t|d) its
term frequency over the memory's length; the `prf_terms` heaviest lexemes, normalised to
sum 1, are mixed with the query's own lexemes (each 1/|q|) as
prf_weight * P(t|q) + (1 - prf_weight) * P(t|R); a second BM25 pass scores the
candidates of that expanded query with each lexeme's term weighted by it.

All of it is CTEs of the one search statement (`memplane.server.storage.search`), after the
first pass `bm25_0` and before the second `bm25`: the extra database work is reading
the feedback memories' tsvectors (by primary key), the expansion lexemes' document
frequencies (by key) and a second candidate set and BM25 over it.
"""

from __future__ import annotations

from psycopg import sql

from memplane.server.storage.search_bm25 import TERM_QUERY

_RM3 = sql.SQL(
    "fb AS MATERIALIZED (SELECT b.id, b.score / nullif(sum(b.score) OVER (), 0) AS p"
    "   FROM (SELECT id, score FROM bm25_0 ORDER BY score DESC, id LIMIT %(prf_docs)s) b),"
    " rm AS MATERIALIZED (SELECT u.lexeme, sum(fb.p * cardinality(u.positions)::float8"
    "   / greatest(m.lexical_length, 1)) AS p FROM fb JOIN memories m ON m.workspace_key = %(ws)s AND m.id = fb.id"
    "   CROSS JOIN LATERAL unnest(m.lexical) u GROUP BY u.lexeme ORDER BY p DESC, u.lexeme LIMIT %(prf_terms)s),"
    " qx AS MATERIALIZED (SELECT t.lexeme, sum(t.qw) AS qw FROM ("
    "   SELECT x.lexeme, %(prf_weight)s::float8 / greatest(cardinality(lex.lexemes), 1) AS qw"
    "     FROM lex CROSS JOIN LATERAL unnest(lex.lexemes) x(lexeme)"
    "   UNION ALL SELECT rm.lexeme, (1 - %(prf_weight)s::float8) * rm.p / nullif((SELECT sum(p) FROM rm), 0) FROM rm"
    "   ) t WHERE t.qw > 0 GROUP BY t.lexeme),"
    " dfx AS MATERIALIZED (SELECT qx.lexeme, qx.qw, coalesce(sum(d.df), 0)::float8 AS df FROM qx"
    "   LEFT JOIN lexeme_df d ON d.workspace_key = %(ws)s AND d.lexeme = qx.lexeme GROUP BY qx.lexeme, qx.qw),"
    " wx AS MATERIALIZED (SELECT dfx.lexeme, dfx.df, dfx.qw, ln(1 + (stats.n - dfx.df + 0.5) / (dfx.df + 0.5)) AS idf,"
    "   sum(dfx.df) OVER (ORDER BY dfx.df, dfx.lexeme) AS cumulative, {query} AS query FROM dfx, stats),"
    " {candidates}"
)


def rm3_ctes(candidates: sql.Composable) -> sql.Composable:
    """The RM3 CTEs (fb, rm, qx, dfx, wx) and *candidates*, the CTE of the expanded query's
    candidates (`memplane.server.storage.search.lexical_candidates` over "wx"); they read the first
    pass `bm25_0`, `lex` and `stats`, and need the parameters prf_docs, prf_terms and
    prf_weight besides the search's own."""
    return _RM3.format(candidates=candidates, query=sql.SQL(TERM_QUERY.format(lexeme="dfx.lexeme")))
