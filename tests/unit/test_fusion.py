"""Rank fusion (memplane.server.retrieval.fusion): RRF scaled to 0..1, weighted fusion on one
scale with a missing signal renormalised, deterministic ties."""

from __future__ import annotations

import pytest

from memplane.server.retrieval.fusion import FusionMethod, fuse

RRF_K = 60


def test_rrf_rank_one_in_both_signals_scores_exactly_one() -> None:
    hits = fuse(
        [("a", 0.9), ("b", 0.8)], [("a", 7.0), ("b", 3.0)], method=FusionMethod.RRF, vector_weight=0.5, rrf_k=RRF_K
    )
    assert [h.id for h in hits] == ["a", "b"]
    assert hits[0].score == pytest.approx(1.0)
    # b is rank 2 in both: (0.5/62 + 0.5/62) / (1/61)
    assert hits[1].score == pytest.approx(61 / 62)
    assert hits[0].vector is not None
    assert hits[0].vector.rank == 1
    assert hits[1].lexical is not None
    assert hits[1].lexical.rank == 2


def test_rrf_hit_from_one_signal_only_counts_that_signal() -> None:
    hits = fuse([("v", 0.9)], [("l", 5.0)], method=FusionMethod.RRF, vector_weight=0.5, rrf_k=RRF_K)
    by_id = {h.id: h for h in hits}
    assert by_id["v"].score == pytest.approx(0.5)
    assert by_id["l"].score == pytest.approx(0.5)
    assert by_id["v"].lexical is None
    assert by_id["l"].vector is None


def test_rrf_single_signal_search_renormalises_to_one() -> None:
    hits = fuse([], [("x", 2.0), ("y", 1.0)], method=FusionMethod.RRF, vector_weight=0.5, rrf_k=RRF_K)
    assert hits[0].id == "x"
    assert hits[0].score == pytest.approx(1.0)
    assert hits[1].score == pytest.approx(61 / 62)


def test_rrf_weights_terms_when_vector_weight_given() -> None:
    hits = fuse([("v", 0.9)], [("l", 5.0)], method=FusionMethod.RRF, vector_weight=0.8, rrf_k=RRF_K)
    by_id = {h.id: h for h in hits}
    assert by_id["v"].score == pytest.approx(0.8)
    assert by_id["l"].score == pytest.approx(0.2)
    assert [h.id for h in hits] == ["v", "l"]


def test_weighted_min_max_normalises_each_signal_over_its_candidates() -> None:
    hits = fuse(
        [("a", 0.9), ("b", 0.8), ("c", 0.7)],
        [("b", 10.0), ("c", 6.0), ("a", 2.0)],
        method=FusionMethod.WEIGHTED,
        vector_weight=0.7,
        rrf_k=RRF_K,
    )
    by_id = {h.id: h for h in hits}
    assert by_id["a"].vector is not None
    assert by_id["a"].vector.normalized == pytest.approx(1.0)
    assert by_id["b"].vector is not None
    assert by_id["b"].vector.normalized == pytest.approx(0.5)
    assert by_id["c"].lexical is not None
    assert by_id["c"].lexical.normalized == pytest.approx(0.5)
    assert by_id["a"].score == pytest.approx(0.7 * 1.0 + 0.3 * 0.0)
    assert by_id["b"].score == pytest.approx(0.7 * 0.5 + 0.3 * 1.0)
    assert by_id["c"].score == pytest.approx(0.7 * 0.0 + 0.3 * 0.5)
    assert [h.id for h in hits] == ["a", "b", "c"]


def test_weighted_compressed_cosines_do_not_drown_the_keyword_signal() -> None:
    # e5-style cosines crowd into 0.80-0.82; the exact keyword hit must still win (case C002).
    hits = fuse(
        [("vague", 0.82), ("exact", 0.80)],
        [("exact", 9.0), ("vague", 1.0)],
        method=FusionMethod.WEIGHTED,
        vector_weight=0.5,
        rrf_k=RRF_K,
    )
    assert [h.id for h in hits] == ["exact", "vague"]


def test_weighted_with_a_missing_signal_renormalises_instead_of_scaling_by_its_weight() -> None:
    # No keyword hit for this query: the best vector hit must score 1, not 0.7.
    hits = fuse([("a", 0.8), ("b", 0.6)], [], method=FusionMethod.WEIGHTED, vector_weight=0.7, rrf_k=RRF_K)
    assert [h.score for h in hits] == pytest.approx([1.0, 0.0])
    lexical_only = fuse(
        [], [("a", 4.0), ("b", 1.0), ("c", 2.5)], method=FusionMethod.WEIGHTED, vector_weight=0.7, rrf_k=RRF_K
    )
    assert [h.id for h in lexical_only] == ["a", "c", "b"]
    assert [h.score for h in lexical_only] == pytest.approx([1.0, 0.5, 0.0])


def test_weighted_lone_candidate_keeps_its_raw_score_and_scores_one() -> None:
    hits = fuse([("a", -0.3)], [], method=FusionMethod.WEIGHTED, vector_weight=0.7, rrf_k=RRF_K)
    assert hits[0].vector is not None
    assert hits[0].vector.score == pytest.approx(-0.3)
    assert hits[0].vector.normalized == 1.0
    assert hits[0].score == 1.0


@pytest.mark.parametrize("method", [FusionMethod.RRF, FusionMethod.WEIGHTED])
def test_ties_are_broken_by_id(method: FusionMethod) -> None:
    # Same rank pattern mirrored: c is rank 1 vector / 2 lexical, a the reverse → equal
    # fused scores in RRF; equal cosine and bm25 in WEIGHTED.
    vector = [("c", 0.5), ("a", 0.5)]
    lexical = [("a", 1.0), ("c", 1.0)]
    hits = fuse(vector, lexical, method=method, vector_weight=0.5, rrf_k=RRF_K)
    assert hits[0].score == pytest.approx(hits[1].score)
    assert [h.id for h in hits] == ["a", "c"]


def test_no_candidates_gives_no_hits() -> None:
    assert fuse([], [], method=FusionMethod.RRF, vector_weight=0.5, rrf_k=RRF_K) == []
    assert fuse([], [], method=FusionMethod.WEIGHTED, vector_weight=0.7, rrf_k=RRF_K) == []


def test_each_memory_appears_once() -> None:
    hits = fuse(
        [("a", 0.9), ("b", 0.5)],
        [("b", 3.0), ("a", 1.0), ("c", 0.5)],
        method=FusionMethod.RRF,
        vector_weight=0.5,
        rrf_k=RRF_K,
    )
    assert sorted(h.id for h in hits) == ["a", "b", "c"]


def test_dbsf_normalises_between_mean_minus_and_plus_three_deviations() -> None:
    # lexical scores 10, 2, 2, 2: mean 4, population sd sqrt(12); bounds 4 -/+ 3 sd.
    lexical = [("a", 10.0), ("b", 2.0), ("c", 2.0), ("d", 2.0)]
    hits = {h.id: h for h in fuse([], lexical, method=FusionMethod.DBSF, vector_weight=0.5, rrf_k=RRF_K)}
    sd = 12**0.5
    low = 4 - 3 * sd
    assert hits["a"].lexical is not None
    assert hits["b"].lexical is not None
    assert hits["a"].lexical.normalized == pytest.approx((10 - low) / (6 * sd))
    assert hits["b"].lexical.normalized == pytest.approx((2 - low) / (6 * sd))
    assert hits["a"].score == pytest.approx(hits["a"].lexical.normalized)


def test_dbsf_clips_an_outlier_to_one_and_gives_an_even_list_less() -> None:
    # The vector signal has one candidate far above thirty alike: clipped at 1. The lexical
    # scores decline evenly (31, 30, ..., 1): their best lies ~1.7 sd above the mean, ~0.79
    # on DBSF's scale. Min-max gives both bests 1.0 (a tie); DBSF lets the outlier win.
    vector = [("v", 0.99)] + [(f"x{i}", 0.10) for i in range(30)]
    lexical = [("l", 31.0)] + [(f"y{i}", float(30 - i)) for i in range(30)]
    dbsf = fuse(vector, lexical, method=FusionMethod.DBSF, vector_weight=0.5, rrf_k=RRF_K)
    assert dbsf[0].id == "v"
    assert dbsf[0].vector is not None
    assert dbsf[0].vector.normalized == 1.0
    best_lexical = next(h for h in dbsf if h.id == "l")
    assert best_lexical.lexical is not None
    assert best_lexical.lexical.normalized == pytest.approx(0.789, abs=0.01)
    weighted = {
        h.id: h.score for h in fuse(vector, lexical, method=FusionMethod.WEIGHTED, vector_weight=0.5, rrf_k=RRF_K)
    }
    assert weighted["v"] == weighted["l"] == 0.5


def test_dbsf_tied_scores_all_normalise_to_one() -> None:
    hits = fuse([("a", 0.4), ("b", 0.4)], [], method=FusionMethod.DBSF, vector_weight=0.5, rrf_k=RRF_K)
    assert [h.score for h in hits] == [1.0, 1.0]


def test_zscore_sums_weighted_z_scores_a_missing_signal_taking_its_lowest_z() -> None:
    # vector 0.9, 0.6, 0.3 → z 1.2247, 0, -1.2247; lexical 4, 2 → z 1, -1.
    vector = [("a", 0.9), ("b", 0.6), ("c", 0.3)]
    lexical = [("b", 4.0), ("d", 2.0)]
    hits = {h.id: h for h in fuse(vector, lexical, method=FusionMethod.ZSCORE, vector_weight=0.4, rrf_k=RRF_K)}
    z = 1.5**0.5
    raw = {"a": 0.4 * z + 0.6 * -1, "b": 0.4 * 0 + 0.6 * 1, "c": 0.4 * -z + 0.6 * -1, "d": 0.4 * -z + 0.6 * -1}
    best, worst = max(raw.values()), min(raw.values())
    for memory_id, value in raw.items():
        assert hits[memory_id].score == pytest.approx((value - worst) / (best - worst))
    assert hits["a"].vector is not None
    assert hits["a"].vector.normalized == pytest.approx(z)
    assert hits["b"].score == 1.0


def test_zscore_does_not_clip_the_top_candidates_apart() -> None:
    # Two vector candidates far above the rest: DBSF clips both to 1, z-score keeps them apart.
    vector = [("a", 0.99), ("b", 0.95)] + [(f"x{i}", 0.10) for i in range(40)]
    dbsf = fuse(vector, [], method=FusionMethod.DBSF, vector_weight=0.5, rrf_k=RRF_K)
    zscore = fuse(vector, [], method=FusionMethod.ZSCORE, vector_weight=0.5, rrf_k=RRF_K)
    assert dbsf[0].score == dbsf[1].score == 1.0
    assert zscore[0].id == "a"
    assert zscore[0].score == 1.0
    assert zscore[1].score < 1.0
