"""Validation of a request's ranking knobs (`memplane.domain.ranking.Ranking`) against the
bounds of the settings of the same names, so a request may ask for what the server may be
configured with and nothing else."""

from __future__ import annotations

import math
from collections.abc import Mapping

from memplane.domain.ranking import FusionMethod, Knob, knob_types
from memplane.server.settings import MIN_WEIGHT, RetrievalSettings
from memplane.server.validation import Violations


def knob_bounds(name: str) -> tuple[float, float]:
    """The lowest and highest value of ranking knob *name*: its setting's `Field(ge=, le=)`.
    Raises `KeyError` for a knob whose setting has neither (tests/unit/test_ranking.py
    checks every knob has both)."""
    bounds = {
        key: getattr(m, key)
        for m in RetrievalSettings.model_fields[name].metadata
        for key in ("ge", "le")
        if hasattr(m, key)
    }
    return bounds["ge"], bounds["le"]


def check_ranking(v: Violations, prefix: str, overrides: Mapping[str, Knob]) -> None:
    """Add to *v* a violation, naming the field "<prefix>.<knob>", for each override of
    *overrides* outside its bounds (`knob_bounds`; NaN too), a positive weight under
    MIN_WEIGHT (it underflows PostgreSQL's float8 arithmetic), a fusion that is not a
    `FusionMethod`, or a name that is not a knob."""
    kinds = knob_types()
    for name, value in overrides.items():
        path = f"{prefix}.{name}"
        kind = kinds.get(name)
        if kind is None:
            v.add(path, "is not a ranking option")
        elif kind is FusionMethod:
            if not isinstance(value, FusionMethod):
                v.add(path, "must be a known fusion method")
        else:
            low, high = knob_bounds(name)
            if isinstance(value, FusionMethod) or not low <= value <= high:  # NaN fails too
                v.add(path, f"must be between {low:g} and {high:g}")
            elif kind is float and 0.0 < value < MIN_WEIGHT and not math.isnan(value):
                v.add(path, f"must be 0 or at least {MIN_WEIGHT:g} (a smaller weight underflows the arithmetic)")
