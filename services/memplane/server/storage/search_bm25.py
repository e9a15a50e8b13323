"""BM25 in the search statement (`memplane.server.storage.search`): the CTE that scores the
lexical candidates, and the pieces the lexical CTEs share with RM3's second pass
(`memplane.server.storage.search_rm3`). Okapi BM25 with Lucene's IDF (Robertson & Zaragoza
2009); every value a bound parameter (k1, b, depth, rank_terms, zeta_2)."""

from __future__ import annotations

import math

# Term frequencies from ts_rank: for a query of one lexeme and every weight 1, PostgreSQL's
# ts_rank (tsrank.c, calc_rank_or; normalization 0) is S / (pi^2 / 6) with S the sum of 1/j^2
# over the lexeme's positions j = 1..tf, and the tail of that series past n is
# 1/n - 1/(2n^2) + O(1/n^3), about 1/(n + 1/2): tf = round(1 / (pi^2/6 - S) - 1/2), exact for
# every tf a tsvector holds (1..256 positions; checked to 255, all to_tsvector keeps,
# in tests/integration/test_search_sql.py).
ZETA_2 = math.pi**2 / 6
"""The sum of 1/j^2 over every j >= 1 (bound as %(zeta_2)s)."""

BM25_RANK_TERMS = 12
"""Queries of at most this many lexemes take BM25's term frequencies from ts_rank, one call
per (candidate, lexeme): ~30 % less database time than unnesting each candidate's tsvector
where most candidates hold a lexeme (a speaker's name in a per-user search: 6 lexemes, 663
candidates, 1.75 against 2.5 ms), level at 8 rare lexemes, and slower past it as the calls
grow with the lexemes (16 rare: 2.2 against 1.75 ms; 32 common: level). Measured on LoCoMo's
rows with the statement's BM25 alone."""

BM25 = (
    "{name} AS ((SELECT c.id, sum(t.qw * t.idf * x.tf * (%(k1)s + 1)"
    "   / (x.tf + %(k1)s * (1 - %(b)s + %(b)s * c.lexical_length / stats.avgdl))) AS score"
    "   FROM {cand} c CROSS JOIN {terms} t CROSS JOIN LATERAL (SELECT r.r,"
    "     round(1 / (%(zeta_2)s - r.r * %(zeta_2)s) - 0.5) AS tf"
    "     FROM (SELECT ts_rank('{{1,1,1,1}}', c.lexical, t.query, 0)::float8 AS r) r) x CROSS JOIN stats"
    "   WHERE x.r > 0 AND (SELECT count(*) FROM {terms}) <= %(rank_terms)s"
    "   GROUP BY c.id ORDER BY score DESC, c.id LIMIT %(depth)s)"
    " UNION ALL (SELECT c.id, sum(t.qw * t.idf * cardinality(u.positions) * (%(k1)s + 1)"
    "   / (cardinality(u.positions) + %(k1)s * (1 - %(b)s + %(b)s * c.lexical_length / stats.avgdl)))"
    "   AS score FROM {cand} c CROSS JOIN LATERAL unnest(ts_filter(setweight(c.lexical, 'A',"
    "     (SELECT array_agg(lexeme) FROM {terms})), '{{a}}')) u JOIN {terms} t ON t.lexeme = u.lexeme"
    "   CROSS JOIN stats WHERE (SELECT count(*) FROM {terms}) > %(rank_terms)s"
    "   GROUP BY c.id ORDER BY score DESC, c.id LIMIT %(depth)s))"
)
"""Okapi BM25 of the candidates in CTE {cand} over the lexemes of CTE {terms} (lexeme, its
tsquery, idf and a query weight qw, 1 for a query's own lexemes), the depth best. One of two
equal computations runs (the other's condition is false before it starts): up to
BM25_RANK_TERMS lexemes, each (candidate, lexeme) pair's term frequency from ts_rank
(above); past it, each candidate's tsvector cut to the query's lexemes (ts_filter
keeps those setweight marked) and unnested."""

QUOTED_LEXEME = r"'''' || replace(replace({lexeme}, '\', '\\'), '''', '''''') || ''''"
"""The lexeme *lexeme* as tsquery input: inside single quotes, its backslashes and quotes
doubled, so the tsquery holds it verbatim (never operators, no dictionary)."""

TERM_QUERY = "(" + QUOTED_LEXEME + ")::tsquery"
"""A tsquery matching exactly the lexeme *lexeme*."""
