"""Compile a `MemoryFilter` into a SQL condition over the `memories` row alias ``m``.

Every value is a bound parameter (`Params`): the statement text depends only on the
filter's shape (which fields, which operators), never on its values, so psycopg prepares
it once and values never appear in SQL text (nor in the trace spans that copy it).
Numbers compare numerically and strings lexicographically; a comparison against a key of
another JSON type is false.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from memplane.domain.filters import All, AnyOf, Condition, MemoryFilter, MetadataExpr, Operator

_ORDER_OPS = {Operator.LT: "<", Operator.LTE: "<=", Operator.GT: ">", Operator.GTE: ">="}


class Params:
    """Named parameters of one statement: `bind(value)` returns its placeholder."""

    def __init__(self, **initial: Any) -> None:
        self.values: dict[str, Any] = dict(initial)
        self._n = 0

    def bind(self, value: Any, cast: str = "") -> sql.Composable:
        """A placeholder for *value* (with ``::cast`` when given, e.g. "jsonb", "uuid[]")."""
        name = f"f{self._n}"
        self._n += 1
        self.values[name] = value
        placeholder = sql.Placeholder(name)
        return sql.SQL("{}::{}").format(placeholder, sql.SQL(cast)) if cast else placeholder


def compile_filter(flt: MemoryFilter, params: Params, now: datetime) -> sql.Composed:
    """The WHERE conjuncts (without the workspace) for *flt*, evaluated at time *now*,
    with their values added to *params*."""
    parts: list[sql.Composable] = []
    for column, value in (("user_id", flt.user_id), ("agent_id", flt.agent_id), ("session_id", flt.session_id)):
        if value:
            parts.append(sql.SQL("m.{} = {}").format(sql.Identifier(column), params.bind(value)))
    if flt.types:
        parts.append(sql.SQL("m.type = ANY({})").format(params.bind([t.value for t in flt.types], "text[]")))
    if flt.ids:
        parts.append(sql.SQL("m.id = ANY({})").format(params.bind(list(flt.ids), "uuid[]")))
    if flt.created_after is not None:
        parts.append(sql.SQL("m.created_at >= {}").format(params.bind(flt.created_after)))
    if flt.created_before is not None:
        parts.append(sql.SQL("m.created_at < {}").format(params.bind(flt.created_before)))
    if not flt.include_superseded or not flt.include_expired:
        at = params.bind(now, "timestamptz")
        if not flt.include_superseded:
            parts.append(sql.SQL("(m.valid_to IS NULL OR m.valid_to > {now}) AND m.valid_from <= {now}").format(now=at))
        if not flt.include_expired:
            parts.append(sql.SQL("(m.expires_at IS NULL OR m.expires_at > {})").format(at))
    if flt.metadata is not None:
        parts.append(_compile_expr(flt.metadata, params))
    if not parts:
        return sql.Composed([sql.SQL("TRUE")])
    return sql.SQL(" AND ").join(sql.SQL("({})").format(p) for p in parts)


def _compile_expr(expr: MetadataExpr, params: Params) -> sql.Composable:
    if isinstance(expr, Condition):
        return _compile_condition(expr, params)
    if isinstance(expr, All):
        return sql.SQL("({})").format(sql.SQL(" AND ").join(_compile_expr(e, params) for e in expr.operands))
    if isinstance(expr, AnyOf):
        return sql.SQL("({})").format(sql.SQL(" OR ").join(_compile_expr(e, params) for e in expr.operands))
    return sql.SQL("(NOT coalesce({}, false))").format(_compile_expr(expr.operand, params))


def _compile_condition(cond: Condition, params: Params) -> sql.Composable:  # noqa: PLR0911 - one per operator
    path = params.bind(list(cond.path), "text[]")
    at = sql.SQL("(m.metadata #> {})").format(path)
    text_at = sql.SQL("(m.metadata #>> {})").format(path)
    op, value = cond.operator, cond.value
    if op is Operator.EXISTS:
        return sql.SQL("({} IS NOT NULL)").format(at)
    if op is Operator.EQ:
        return sql.SQL("coalesce({} = {}, false)").format(at, params.bind(Jsonb(value), "jsonb"))
    if op is Operator.NE:
        return sql.SQL("coalesce({} <> {}, true)").format(at, params.bind(Jsonb(value), "jsonb"))
    if op is Operator.IN:
        return sql.SQL("coalesce({} = ANY(ARRAY(SELECT jsonb_array_elements({}))), false)").format(
            at, params.bind(Jsonb(value), "jsonb")
        )
    if op is Operator.CONTAINS:
        return sql.SQL(
            "coalesce(CASE jsonb_typeof({at}) WHEN 'array' THEN {at} @> jsonb_build_array({v})"
            " WHEN 'string' THEN jsonb_typeof({v}) = 'string' AND strpos({text_at}, {v} #>> '{{}}') > 0"
            " ELSE false END, false)"
        ).format(at=at, v=params.bind(Jsonb(value), "jsonb"), text_at=text_at)
    symbol = sql.SQL(_ORDER_OPS[op])
    if isinstance(value, bool) or not isinstance(value, int | float):
        return sql.SQL("coalesce(jsonb_typeof({}) = 'string' AND {} {} {}, false)").format(
            at, text_at, symbol, params.bind(str(value), "text")
        )
    return sql.SQL(
        "coalesce(CASE WHEN jsonb_typeof({at}) = 'number' THEN ({text_at})::numeric {op} {v} END, false)"
    ).format(at=at, text_at=text_at, op=symbol, v=params.bind(value, "numeric"))
