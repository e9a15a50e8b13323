"""The ranking knobs are one concept (`memplane.domain.ranking.Ranking`): the proto message
RankingOptions, the dataclass and RetrievalSettings name the same fields with matching
types, and every conversion between them (request -> overrides, SDK keywords -> message,
settings -> defaults, flags -> options) goes by those names. A knob added to one of the
three and not the others fails here."""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing

import pytest
from google.protobuf.descriptor import FieldDescriptor

from memplane.cli import locomo
from memplane.client.aio import ranking_options
from memplane.domain.ranking import BOOST_NAMES, TERMS, TERMS_OFF, Boosts, FusionMethod, Ranking, knob_types
from memplane.errors import InvalidArgumentError
from memplane.server.api.retrieval import ranking_overrides
from memplane.server.retrieval.ranking import check_ranking, knob_bounds
from memplane.server.settings import MIN_WEIGHT, RetrievalSettings
from memplane.server.validation import Violations
from memplane.v1 import retrieval_pb2

PROTO = retrieval_pb2.RankingOptions.DESCRIPTOR
_PROTO_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_INT32: int,
    FieldDescriptor.TYPE_ENUM: FusionMethod,
}


def test_the_proto_message_the_dataclass_and_the_settings_name_the_same_knobs_with_the_same_types() -> None:
    proto = {f.name: _PROTO_TYPES[f.type] for f in PROTO.fields}
    assert proto == knob_types()
    settings = typing.get_type_hints(RetrievalSettings)
    for name, kind in knob_types().items():
        assert name in RetrievalSettings.model_fields, f"{name} has no setting (its server default)"
        if kind is FusionMethod:
            assert set(typing.get_args(settings[name])) == {m.value for m in FusionMethod}
        else:
            assert settings[name] is kind, name


def test_the_proto_enum_of_a_knob_names_the_dataclass_enum_members() -> None:
    names = {v.name for v in retrieval_pb2.FusionMethod.DESCRIPTOR.values}
    assert names == {"FUSION_METHOD_UNSPECIFIED"} | {f"FUSION_METHOD_{m.name}" for m in FusionMethod}


def test_terms_have_presence_on_the_wire_and_the_fusion_knobs_take_zero_as_unset() -> None:
    """A term's 0 turns it off, so it must be told from unset (`optional`); fusion,
    vector_weight and rrf_k read 0 as the server's default, as before RankingOptions."""
    for f in PROTO.fields:
        assert f.has_presence == (f.name in TERMS), f.name


def test_every_knob_has_bounds_its_setting_and_the_flags_share() -> None:
    defaults = Ranking.from_settings(RetrievalSettings())
    for name, kind in knob_types().items():
        if kind is FusionMethod:
            continue
        low, high = knob_bounds(name)
        assert low <= getattr(defaults, name) <= high, name


def test_the_boosts_are_the_score_boosts_message_and_each_term_has_its_weight() -> None:
    assert [f.name for f in retrieval_pb2.ScoreBoosts.DESCRIPTOR.fields] == list(BOOST_NAMES)
    assert all(f"{name}_weight" in knob_types() for name in BOOST_NAMES)
    boosts = Boosts(neighbour=0.1, speaker=0.2, time=0.3, phrase=0.4, when=0.5)
    assert retrieval_pb2.ScoreBoosts(**dataclasses.asdict(boosts)).phrase == pytest.approx(0.4)


def test_from_settings_takes_each_knob_by_name_and_the_vector_weight_of_the_fusion() -> None:
    s = RetrievalSettings(phrase_weight=0.25, prf_terms=7, rrf_k=42, vector_weight=0.55, zscore_vector_weight=0.45)
    ranking = Ranking.from_settings(s)
    assert (ranking.fusion, ranking.vector_weight, ranking.rrf_k) == (FusionMethod.ZSCORE, 0.45, 42)
    assert (ranking.phrase_weight, ranking.prf_terms) == (0.25, 7)
    assert Ranking.resolve(s, {"fusion": FusionMethod.RRF}).vector_weight == 0.5
    assert Ranking.resolve(s, {"fusion": FusionMethod.WEIGHTED}).vector_weight == 0.55
    assert Ranking.resolve(s, {"fusion": FusionMethod.DBSF, "vector_weight": 0.8}).vector_weight == 0.8
    assert Ranking.resolve(s, {"phrase_weight": 0.0}).phrase_weight == 0.0  # 0 is off, not unset
    assert not Ranking.resolve(s, TERMS_OFF).boosted
    with pytest.raises(TypeError, match="not a ranking knob: speed"):
        ranking.with_overrides({"speed": 1})


def test_a_request_sets_the_fields_it_carries_zero_of_a_term_included() -> None:
    assert ranking_overrides(retrieval_pb2.RankingOptions()) == {}
    options = retrieval_pb2.RankingOptions(
        fusion=retrieval_pb2.FUSION_METHOD_DBSF, vector_weight=0.0, rrf_k=0, phrase_weight=0.0, prf_terms=3
    )
    assert ranking_overrides(options) == {"fusion": FusionMethod.DBSF, "phrase_weight": 0.0, "prf_terms": 3}
    with pytest.raises(InvalidArgumentError, match=r"ranking\.fusion: must be a known fusion method"):
        ranking_overrides(retrieval_pb2.RankingOptions(fusion=99))  # type: ignore[arg-type]


def test_the_sdk_routes_ranking_keywords_by_name_and_refuses_an_unknown_one() -> None:
    base = retrieval_pb2.RankingOptions(rrf_k=30)
    options = ranking_options(base, {"phrase_weight": 0.0, "when_weight": None, "fusion": 1})
    assert options.HasField("phrase_weight")
    assert not options.HasField("when_weight")
    assert (options.rrf_k, options.fusion) == (30, retrieval_pb2.FUSION_METHOD_RRF)
    assert not base.HasField("phrase_weight")  # a copy
    with pytest.raises(TypeError, match="phrase_wieght"):
        ranking_options(None, {"phrase_wieght": 0.3})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("neighbour_window", 11, "must be between 0 and 10"),
        ("prf_terms", -1, "must be between 0 and 50"),
        ("rrf_k", -5, "must be between 1 and 10000"),
        ("time_weight", math.nan, "must be between 0 and 1"),
        ("vector_weight", 2.0, "must be between 0 and 1"),
        ("when_weight", 1e-300, f"must be 0 or at least {MIN_WEIGHT:g}"),
        ("speed", 1, "is not a ranking option"),
    ],
)
def test_an_override_out_of_its_settings_bounds_is_refused_naming_its_field(
    name: str, value: float, message: str
) -> None:
    v = Violations()
    check_ranking(v, "ranking", {"phrase_weight": MIN_WEIGHT, "prf_terms": 0, name: value})
    with pytest.raises(InvalidArgumentError) as caught:
        v.raise_if_any()
    assert [(x.field, x.description[: len(message)]) for x in caught.value.violations] == [(f"ranking.{name}", message)]


def test_each_knob_is_an_eval_flag_of_its_own_name() -> None:
    parser = argparse.ArgumentParser()
    locomo._ranking_flags(parser)
    ns = parser.parse_args(["--phrase-weight", "0.3", "--neighbour-window", "0", "--fusion", "rrf"])
    assert locomo._ranking(ns) == {"phrase_weight": 0.3, "neighbour_window": 0, "fusion": 1}
    assert locomo._ranking(parser.parse_args([])) == {}
    for name in knob_types():
        assert parser.get_default(name) in (None, "default"), name
    with pytest.raises(SystemExit):
        parser.parse_args(["--when-weight", "1e-9"])
