"""Compile a `MemoryFilter` into a SQL condition over the `memories` row alias ``m``.

Values are always bound as parameters; only validated metadata key paths and fixed
operators reach the SQL text (as `sql.Literal`s). Numbers compare numerically and
strings lexicographically; a comparison against a key of another JSON type is false.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg import sql

from memplane.domain.filters import All, AnyOf, Condition, MemoryFilter, MetadataExpr, Operator

_ORDER_OPS = {Operator.LT: "<", Operator.LTE: "<=", Operator.GT: ">", Operator.GTE: ">="}


def compile_filter(flt: MemoryFilter, now: datetime) -> sql.Composed:
    """The WHERE conjuncts (without the workspace) for *flt*, evaluated at time *now*."""
    parts: list[sql.Composable] = []
    for column, value in (("user_id", flt.user_id), ("agent_id", flt.agent_id), ("session_id", flt.session_id)):
        if value:
            parts.append(sql.SQL("m.{} = {}").format(sql.Identifier(column), sql.Literal(value)))
    if flt.types:
        parts.append(sql.SQL("m.type = ANY({})").format(sql.Literal([t.value for t in flt.types])))
    if flt.ids:
        parts.append(sql.SQL("m.id = ANY({}::uuid[])").format(sql.Literal(list(flt.ids))))
    if flt.created_after is not None:
        parts.append(sql.SQL("m.created_at >= {}").format(sql.Literal(flt.created_after)))
    if flt.created_before is not None:
        parts.append(sql.SQL("m.created_at < {}").format(sql.Literal(flt.created_before)))
    if not flt.include_superseded:
        parts.append(
            sql.SQL("(m.valid_to IS NULL OR m.valid_to > {now}) AND m.valid_from <= {now}").format(now=sql.Literal(now))
        )
    if not flt.include_expired:
        parts.append(sql.SQL("(m.expires_at IS NULL OR m.expires_at > {})").format(sql.Literal(now)))
    if flt.metadata is not None:
        parts.append(_compile_expr(flt.metadata))
    if not parts:
        return sql.Composed([sql.SQL("TRUE")])
    return sql.SQL(" AND ").join(sql.SQL("({})").format(p) for p in parts)


def _compile_expr(expr: MetadataExpr) -> sql.Composable:
    if isinstance(expr, Condition):
        return _compile_condition(expr)
    if isinstance(expr, All):
        return sql.SQL("({})").format(sql.SQL(" AND ").join(_compile_expr(e) for e in expr.operands))
    if isinstance(expr, AnyOf):
        return sql.SQL("({})").format(sql.SQL(" OR ").join(_compile_expr(e) for e in expr.operands))
    return sql.SQL("(NOT coalesce({}, false))").format(_compile_expr(expr.operand))


def _jsonb(value: Any) -> sql.Composable:
    return sql.SQL("{}::jsonb").format(sql.Literal(json.dumps(value)))


def _compile_condition(cond: Condition) -> sql.Composable:  # noqa: PLR0911 - one return per operator
    at = sql.SQL("(m.metadata #> {})").format(sql.Literal(list(cond.path)))
    text_at = sql.SQL("(m.metadata #>> {})").format(sql.Literal(list(cond.path)))
    op, value = cond.operator, cond.value
    if op is Operator.EXISTS:
        return sql.SQL("({} IS NOT NULL)").format(at)
    if op is Operator.EQ:
        return sql.SQL("coalesce({} = {}, false)").format(at, _jsonb(value))
    if op is Operator.NE:
        return sql.SQL("coalesce({} <> {}, true)").format(at, _jsonb(value))
    if op is Operator.IN:
        return sql.SQL("coalesce({} = ANY(ARRAY(SELECT jsonb_array_elements({}))), false)").format(at, _jsonb(value))
    if op is Operator.CONTAINS:
        return sql.SQL(
            "coalesce(CASE jsonb_typeof({at}) WHEN 'array' THEN {at} @> jsonb_build_array({v})"
            " WHEN 'string' THEN jsonb_typeof({v}) = 'string' AND strpos({text_at}, {v} #>> '{{}}') > 0"
            " ELSE false END, false)"
        ).format(at=at, v=_jsonb(value), text_at=text_at)
    symbol = sql.SQL(_ORDER_OPS[op])
    if isinstance(value, bool) or not isinstance(value, int | float):
        return sql.SQL("coalesce(jsonb_typeof({}) = 'string' AND {} {} {}, false)").format(
            at, text_at, symbol, sql.Literal(str(value))
        )
    return sql.SQL(
        "coalesce(CASE WHEN jsonb_typeof({at}) = 'number' THEN ({text_at})::numeric {op} {v} END, false)"
    ).format(at=at, text_at=text_at, op=symbol, v=sql.Literal(value))
