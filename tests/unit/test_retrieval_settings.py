"""RetrievalSettings refuses a weight too small for PostgreSQL's float8 arithmetic (it raises
on underflow instead of rounding to 0), naming it; 0 (off) and MIN_WEIGHT are accepted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memplane.server.settings import MIN_WEIGHT, RetrievalSettings

# Every weight the settings have, read from the model (not from the validator's own list,
# so a weight added without the check fails here).
WEIGHTS = tuple(name for name in RetrievalSettings.model_fields if name.endswith("weight"))


def test_the_settings_have_weights_to_check() -> None:
    assert len(WEIGHTS) >= 7, WEIGHTS


@pytest.mark.parametrize("name", WEIGHTS)
def test_a_weight_under_min_weight_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ValidationError, match=name):
        RetrievalSettings(**{name: 1e-300})
    assert getattr(RetrievalSettings(**{name: 0.0}), name) == 0.0
    assert getattr(RetrievalSettings(**{name: MIN_WEIGHT}), name) == MIN_WEIGHT
