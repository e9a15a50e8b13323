"""How a search ranks: the fusion of its signals and its query-aware terms, as one value.

`Ranking` is the one definition of the ranking knobs. Each field has the name of its
`memplane.v1.RankingOptions` field (SearchMemoriesRequest.ranking) and of its
`RetrievalSettings` default (MEMPLANE_RETRIEVAL__<NAME>); every conversion (settings, the
request, the client SDK's keywords, `memplane eval locomo`'s flags, the search statement's
parameters) goes by those names, and tests/unit/test_ranking.py fails when the three drift
apart. A new knob is a field here, in the proto message, in the settings, and the SQL that
reads it (`memplane.server.storage.search_boosts` for a term).

`Boosts` is what each query-aware term added to one hit: a field per term, whose weight is
the Ranking field `<term>_weight` and whose SQL column is `b_<term>`.

Pure data: no settings, no protobuf (the client SDK and storage both read this module).
"""

from __future__ import annotations

import enum
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any


class FusionMethod(enum.StrEnum):
    """How signals combine (`memplane.server.retrieval.fusion` is the reference)."""

    RRF = "rrf"
    WEIGHTED = "weighted"
    DBSF = "dbsf"
    ZSCORE = "zscore"


Knob = int | float | FusionMethod
"""The value of one ranking knob."""

RRF_VECTOR_WEIGHT = 0.5
"""The vector weight of RRF when a request leaves it unset: equal weights (no setting)."""


def _knob(help_text: str, *, term: bool = False) -> dict[str, object]:
    """A Ranking field's metadata: its one-line *help* (`memplane eval locomo`'s flag) and
    whether it is a query-aware term or RM3 (*term*: off by default, `TERMS_OFF`)."""
    return {"help": help_text, "term": term}


@dataclass(frozen=True)
class Ranking:
    """The ranking of one search, every knob resolved (`from_settings`, then a request's
    `with_overrides`). Weights are 0 to 1 (0, or at least `memplane.server.settings.MIN_WEIGHT`);
    a term whose weight (or window, or lexeme count) is 0 is off and adds nothing to the
    search statement. The bounds of each knob are those of its setting."""

    fusion: FusionMethod = field(metadata=_knob("fusion of the vector and lexical signals in hybrid mode"))
    vector_weight: float = field(metadata=_knob("vector weight of the fusion (the lexical weight is 1 minus it)"))
    rrf_k: int = field(metadata=_knob("RRF constant k"))
    neighbour_window: int = field(
        default=0, metadata=_knob("turns each side whose fused score a hit borrows", term=True)
    )
    neighbour_weight: float = field(default=0.0, metadata=_knob("weight of the neighbourhood term", term=True))
    speaker_weight: float = field(
        default=0.0, metadata=_knob("boost of a hit whose speaker the question names", term=True)
    )
    time_weight: float = field(
        default=0.0, metadata=_knob("boost of a hit dated in the interval the question names", term=True)
    )
    phrase_weight: float = field(
        default=0.0, metadata=_knob("boost of a hit holding a phrase the question quotes", term=True)
    )
    when_weight: float = field(
        default=0.0,
        metadata=_knob("boost of a hit holding a relative time expression when the question asks when", term=True),
    )
    prf_terms: int = field(default=0, metadata=_knob("RM3 expansion lexemes of the lexical signal", term=True))

    @classmethod
    def from_settings(cls, settings: Any, fusion: FusionMethod | None = None) -> Ranking:
        """The server's ranking: each field the attribute of the same name of *settings*
        (`memplane.server.settings.RetrievalSettings`), for fusion method *fusion* (None: the
        settings' own). The vector weight is the method's default: `RRF_VECTOR_WEIGHT` for
        RRF, `zscore_vector_weight` for ZSCORE, `vector_weight` for WEIGHTED and DBSF."""
        values = {name: kind(getattr(settings, name)) for name, kind in knob_types().items()}
        method = fusion or FusionMethod(str(values["fusion"]))
        weights = {FusionMethod.RRF: RRF_VECTOR_WEIGHT, FusionMethod.ZSCORE: settings.zscore_vector_weight}
        values.update(fusion=method, vector_weight=float(weights.get(method, values["vector_weight"])))
        return cls(**values)

    @classmethod
    def resolve(cls, settings: Any, overrides: Mapping[str, Knob]) -> Ranking:
        """The ranking of a request: the server's (`from_settings`, for the request's fusion
        method when it names one) with the request's *overrides* (`with_overrides`)."""
        fusion = overrides.get("fusion")
        return cls.from_settings(settings, FusionMethod(str(fusion)) if fusion is not None else None).with_overrides(
            overrides
        )

    def with_overrides(self, overrides: Mapping[str, Knob]) -> Ranking:
        """This ranking with *overrides* (field name -> value; a field absent keeps this
        ranking's value). Raises `TypeError` naming an unknown field."""
        unknown = sorted(set(overrides) - set(knob_types()))
        if unknown:
            raise TypeError(f"not a ranking knob: {', '.join(unknown)}")
        return replace(self, **overrides)  # type: ignore[arg-type]

    @property
    def neighbours(self) -> bool:
        """Whether the neighbourhood term is on (a window and a weight)."""
        return self.neighbour_window > 0 and self.neighbour_weight > 0

    @property
    def boosted(self) -> bool:
        """Whether any query-aware term (`Boosts`) is on."""
        weights = (getattr(self, f"{name}_weight") for name in BOOST_NAMES if name != "neighbour")
        return self.neighbours or any(w > 0 for w in weights)

    def shape(self) -> Ranking:
        """This ranking with each number reduced to whether it is on (0 or 1) and the fusion
        kept: what the search statement's text depends on (its values are parameters)."""
        values: dict[str, Knob] = {}
        for name, kind in knob_types().items():
            value = getattr(self, name)
            values[name] = value if kind is FusionMethod else kind(value > 0)
        return Ranking(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Boosts:
    """What each query-aware term added to a hit's fusion score, already weighted (0: the
    term is off or did not apply). The term's weight is `Ranking.<name>_weight`."""

    neighbour: float = 0.0
    speaker: float = 0.0
    time: float = 0.0
    phrase: float = 0.0
    when: float = 0.0


BOOST_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Boosts))
"""The query-aware terms, in the order of `Boosts` (and of their SQL columns b_<name>)."""

KNOB_HELP: dict[str, str] = {f.name: f.metadata["help"] for f in fields(Ranking)}
"""One line of help per knob, for command-line flags."""

TERMS: tuple[str, ...] = tuple(f.name for f in fields(Ranking) if f.metadata["term"])
"""The knobs of the query-aware terms and RM3 (0 turns each off); the others shape the fusion."""

TERMS_OFF: Mapping[str, float] = dict.fromkeys(TERMS, 0)
"""Overrides turning every query-aware term and RM3 off: the search as before issue 14."""


@functools.cache
def knob_types() -> dict[str, type[Any]]:
    """Each Ranking field's name and type (int, float or FusionMethod), in field order."""
    hints = typing.get_type_hints(Ranking)
    return {f.name: hints[f.name] for f in fields(Ranking)}
