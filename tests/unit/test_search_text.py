"""The search statement's text is composed once per shape (`memplane.server.storage.search.statement`
caches it by `_shape(spec)` and the filter's condition): whatever a request changes, the
cached text must be the text composed afresh for that very request. Each field of
`SearchSpec` and of its `Ranking` is varied from several bases (a field added later is varied
too), so a value that changes the text but is left out of the cache key fails here."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.domain.filters import Condition, MemoryFilter, Operator
from memplane.domain.ranking import FusionMethod, Ranking
from memplane.server.storage import search as search_sql
from memplane.server.storage.filters import Params, compile_filter
from memplane.server.storage.search import SearchSpec

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
BASE = SearchSpec(
    use_vector=True,
    use_lexical=True,
    depth=50,
    top_k=10,
    min_score=0.0,
    exact=False,
    prefilter=False,
    lexical_budget=20_000,
    lexical_cap=5_000,
    ranking=Ranking(fusion=FusionMethod.WEIGHTED, vector_weight=0.5, rrf_k=60),
    k1=1.2,
    b=0.75,
)
BASES = [
    BASE,
    dataclasses.replace(
        BASE,
        exact=True,
        prefilter=True,
        ranking=dataclasses.replace(BASE.ranking, fusion=FusionMethod.ZSCORE, neighbour_window=2, neighbour_weight=0.6),
    ),
    dataclasses.replace(
        BASE,
        context_turns=2,
        ranking=dataclasses.replace(BASE.ranking, speaker_weight=0.4, time_weight=0.2, phrase_weight=0.2, prf_terms=10),
    ),
]
FILTERS = [
    MemoryFilter(),
    MemoryFilter(user_id="u1"),
    MemoryFilter(user_id="u2", session_id="s", metadata=Condition(("topic",), Operator.EQ, "x")),
    MemoryFilter(include_superseded=True, include_expired=True),
]


def variants(value: Any) -> list[Any]:
    """Values of a field's type, including its "off" value."""
    if isinstance(value, FusionMethod):
        return list(FusionMethod)
    if isinstance(value, bool):
        return [False, True]
    if isinstance(value, int):
        return [0, 1, 2, 60]
    return [0.0, 1e-6, 0.3, 1.0]


def specs() -> list[SearchSpec]:
    out = []
    for base in BASES:
        for field in dataclasses.fields(SearchSpec):
            if field.name != "ranking":
                out += [dataclasses.replace(base, **{field.name: v}) for v in variants(getattr(base, field.name))]
        for field in dataclasses.fields(Ranking):
            for v in variants(getattr(base.ranking, field.name)):
                out.append(dataclasses.replace(base, ranking=dataclasses.replace(base.ranking, **{field.name: v})))
    return out


@pytest.mark.parametrize("flt", FILTERS, ids=repr)
def test_the_cached_text_is_the_text_composed_for_each_request(flt: MemoryFilter) -> None:
    seen = set()
    for spec in specs():
        query, params = search_sql.statement(spec, flt, NOW, 384)
        fresh = Params()
        where = compile_filter(flt, fresh, NOW)
        want = search_sql.compose(spec, where, not flt.narrows, 384).as_string(None)
        assert query.as_string(None) == want, spec
        assert {k: repr(params.values[k]) for k in fresh.values} == {k: repr(v) for k, v in fresh.values.items()}
        seen.add(want)
    assert len(seen) > 10  # the fields do change the text: the check is not vacuous


@pytest.mark.parametrize("flt", FILTERS[:2], ids=repr)
def test_the_positional_text_numbers_each_name_once_and_is_the_cached_text(flt: MemoryFilter) -> None:
    """What a search sends (`_positional`, for psycopg's raw cursor) is `statement`'s text
    with each `%(name)s` as its `$n`, one number per name, numbered 1.. in order of first use."""
    for spec in specs()[::7]:
        query, params = search_sql.statement(spec, flt, NOW, 384)
        where = compile_filter(flt, Params(), NOW).as_string(None)
        text, names = search_sql._positional(search_sql._shape(spec), where, not flt.narrows, 384)
        assert len(set(names)) == len(names)
        per_query = {"ws", "text", "vector", "names", "phrases", "time_from", "time_to", "asks_when"}
        assert set(names) <= {*params.values, *per_query}
        used = [int(n) for n in re.findall(r"\$(\d+)", text)]
        assert sorted(set(used)) == list(range(1, len(names) + 1))
        back = re.sub(r"\$(\d+)", lambda m, names=names: f"%({names[int(m.group(1)) - 1]})s", text)
        assert back == query.as_string(None).replace("%%", "%")
