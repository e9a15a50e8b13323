"""Evaluation metrics (memplane.eval.metrics) on hand-computed examples, and the LoCoMo
helpers that decide what is scored (evidence cleaning, session times, workspace names,
mapping a hit back to its dia_id) and how turns are stored in the peer text format."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

from memplane.eval.ingest import MAX_MESSAGES_PER_WRITE, peer_memories, session_request_id
from memplane.eval.locomo import (
    Conversation,
    LocomoFormatError,
    Session,
    Turn,
    load_locomo,
    normalize_evidence,
    parse_session_time,
    workspace_name,
)
from memplane.eval.metrics import OVERALL, QuestionScore, ndcg_at_k, recall_at_k, score_question, summarize
from memplane.eval.report import format_table
from memplane.eval.runner import hit_message_id, workspace_prefix
from memplane.v1 import memory_pb2

RANKED = ["d1", "d2", "d3", "d4", "d5", "d6"]


# -- recall@k ----------------------------------------------------------------------
def test_recall_counts_the_fraction_of_evidence_in_the_top_k() -> None:
    # evidence d2 (rank 2) and d6 (rank 6)
    assert recall_at_k(RANKED, {"d2", "d6"}, 1) == 0.0
    assert recall_at_k(RANKED, {"d2", "d6"}, 5) == 0.5
    assert recall_at_k(RANKED, {"d2", "d6"}, 10) == 1.0


def test_recall_with_one_evidence_id_is_the_hit_rate() -> None:
    assert recall_at_k(RANKED, ["d3"], 2) == 0.0
    assert recall_at_k(RANKED, ["d3"], 3) == 1.0


def test_recall_when_fewer_results_than_k_and_evidence_never_retrieved() -> None:
    assert recall_at_k(["d1"], {"d1", "x", "y"}, 20) == pytest.approx(1 / 3)
    assert recall_at_k([], {"d1"}, 20) == 0.0


def test_duplicate_results_count_once_and_later_results_move_up() -> None:
    # "a" twice: the distinct list is a, b, so b is inside the top 2
    assert recall_at_k(["a", "a", "b"], {"b"}, 2) == 1.0
    assert recall_at_k(["a", "a", "a"], {"a", "b"}, 3) == 0.5


def test_recall_refuses_questions_without_evidence_and_bad_k() -> None:
    with pytest.raises(ValueError, match="no relevant"):
        recall_at_k(RANKED, [], 5)
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(RANKED, ["d1"], 0)


# -- nDCG@k ------------------------------------------------------------------------
def test_ndcg_single_relevant_document() -> None:
    assert ndcg_at_k(RANKED, {"d1"}) == pytest.approx(1.0)
    assert ndcg_at_k(RANKED, {"d2"}) == pytest.approx(1 / math.log2(3))  # 0.6309
    assert ndcg_at_k(RANKED, {"d4"}) == pytest.approx(1 / math.log2(5))  # 0.4307
    assert ndcg_at_k(RANKED, {"nope"}) == 0.0


def test_ndcg_two_relevant_at_ranks_one_and_three() -> None:
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) = 1.63093
    assert ndcg_at_k(RANKED, {"d1", "d3"}) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(RANKED, {"d1", "d3"}) == pytest.approx(0.919720, abs=1e-6)


def test_ndcg_three_relevant_one_found_at_rank_two() -> None:
    # DCG = 1/log2(3) = 0.63093; IDCG = 1 + 0.63093 + 0.5 = 2.13093 → 0.29608
    assert ndcg_at_k(RANKED, {"d2", "x", "y"}) == pytest.approx(0.296082, abs=1e-6)


def test_ndcg_ideal_is_capped_at_k_relevant_documents() -> None:
    relevant = {f"d{i}" for i in range(1, 13)}  # 12 relevant, only 10 fit in the top 10
    ranked = [f"d{i}" for i in range(1, 11)]
    assert ndcg_at_k(ranked, relevant, 10) == pytest.approx(1.0)
    # the same relevant set with k = 3 and one miss at rank 2
    dcg = 1 + 1 / math.log2(4)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(["d1", "miss", "d2"], relevant, 3) == pytest.approx(dcg / idcg)


def test_ndcg_ignores_results_after_k_and_duplicates() -> None:
    assert ndcg_at_k(["x"] * 3 + ["d1"], {"d1"}, 1) == 0.0  # distinct list: x, d1
    assert ndcg_at_k(["x"] * 3 + ["d1"], {"d1"}, 2) == pytest.approx(1 / math.log2(3))


# -- aggregation -------------------------------------------------------------------
def test_score_question_computes_every_cutoff() -> None:
    score = score_question("4 single-hop", RANKED, {"d2", "d6"})
    assert score.recall == {1: 0.0, 5: 0.5, 10: 1.0, 20: 1.0}
    dcg = 1 / math.log2(3) + 1 / math.log2(7)
    assert score.ndcg == pytest.approx(dcg / (1 + 1 / math.log2(3)))


def test_summarize_gives_category_rows_then_a_micro_averaged_overall_row() -> None:
    scores = [
        QuestionScore("2 temporal", {10: 1.0}, 1.0),
        QuestionScore("1 multi-hop", {10: 1.0}, 0.5),
        QuestionScore("1 multi-hop", {10: 0.0}, 0.0),
    ]
    rows = summarize(scores)
    assert [(r.group, r.n) for r in rows] == [("1 multi-hop", 2), ("2 temporal", 1), (OVERALL, 3)]
    assert rows[0].recall[10] == 0.5
    assert rows[0].ndcg == 0.25
    # overall is the mean over questions (2/3), not the mean of the category means (0.75)
    assert rows[2].recall[10] == pytest.approx(2 / 3)
    assert rows[2].ndcg == pytest.approx(0.5)
    assert summarize([]) == []


def test_table_has_the_promised_columns_and_three_decimals() -> None:
    rows = summarize([QuestionScore("4 single-hop", {1: 1.0, 5: 1.0, 10: 1.0, 20: 1.0}, 2 / 3)])
    table = format_table({"hybrid": rows}).splitlines()
    assert table[0].split() == ["mode", "category", "n", "R@1", "R@5", "R@10", "R@20", "nDCG@10"]
    assert table[2].split() == ["hybrid", "4", "single-hop", "1", "1.000", "1.000", "1.000", "1.000", "0.667"]
    assert table[3].split()[:3] == ["hybrid", "overall", "1"]


# -- what gets scored --------------------------------------------------------------
def test_evidence_is_cleaned_like_the_shared_qrels() -> None:
    known = {"D8:6", "D9:17", "D11:26", "D30:5", "D4:5", "D5:5", "D9:1", "D4:4"}
    raw = ["D8:6; D9:17", "D:11:26", "D30:05", "D", "D4:5", "D4:5", "D99:1", "D9:1 D4:4"]
    assert normalize_evidence(raw, known) == ("D8:6", "D9:17", "D11:26", "D30:5", "D4:5", "D9:1", "D4:4")
    assert normalize_evidence([], known) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9, tzinfo=UTC)),
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
        ("10:04 AM on 19 december, 2023", datetime(2023, 12, 19, 10, 4, tzinfo=UTC)),
    ],
)
def test_session_times_parse_as_utc(text: str, expected: datetime) -> None:
    assert parse_session_time(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "1:56 pm on 8 Maytember, 2023", "1:56 pm on 31 February, 2023"])
def test_bad_session_times_are_format_errors(text: str) -> None:
    with pytest.raises(LocomoFormatError):
        parse_session_time(text)


def test_workspace_names_are_dns_labels() -> None:
    assert workspace_name("locomo", "conv-26") == "locomo-conv-26"
    assert workspace_name("eval-1a2b3c", "Conv_26") == "eval-1a2b3c-conv-26"
    assert workspace_name("", "9 lives!") == "w-9-lives"
    long = workspace_name("x" * 60, "conv-26")
    assert len(long) <= 63
    assert not long.endswith("-")
    with pytest.raises(ValueError, match="no workspace name"):
        workspace_name("", "!!!")


def test_turn_content_carries_the_image_caption() -> None:
    assert Turn("D1:1", "Ann", "Look!", "a photo of a dog").content() == "Look! [shares an image: a photo of a dog]"
    assert Turn("D1:2", "Bob", "Nice").content() == "Nice"
    assert Session(3, datetime(2023, 5, 8, tzinfo=UTC), ()).session_id == "session_3"


def test_hits_map_back_to_dia_ids() -> None:
    metadata = struct_pb2.Struct()
    metadata.update({"message_id": "D3:4"})
    assert hit_message_id(memory_pb2.Memory(metadata=metadata)) == "D3:4"
    provenance = memory_pb2.Provenance(session_id="session_3", message_ids=["D3:5"])
    assert hit_message_id(memory_pb2.Memory(provenance=provenance)) == "D3:5"
    assert hit_message_id(memory_pb2.Memory()) == ""


# -- the peer text format ----------------------------------------------------------
def test_peer_format_is_one_memory_per_turn_with_the_raw_session_date() -> None:
    session = Session(
        3,
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        (Turn("D3:1", "Caroline", "I went to a support group"), Turn("D3:2", "Mel", "Look!", "a dog")),
        date_time="1:56 pm on 8 May, 2023",
    )
    conversation = Conversation("conv-26", "Caroline", "Mel", (session,), ())
    first, second = peer_memories(conversation, session)
    assert first.content == "[1:56 pm on 8 May, 2023] Caroline: I went to a support group"
    assert second.content == "[1:56 pm on 8 May, 2023] Mel: Look! [shares an image: a dog]"
    assert first.type == memory_pb2.MEMORY_TYPE_EPISODIC
    assert first.scope == memory_pb2.Scope(user_id="conv-26", session_id="session_3")
    assert dict(first.metadata) == {"message_id": "D3:1"}
    assert hit_message_id(memory_pb2.Memory(metadata=second.metadata)) == "D3:2"
    assert (first.name, first.description) == ("", "")


def test_request_ids_and_workspace_names_differ_per_text_format() -> None:
    session = Session(3, datetime(2023, 5, 8, tzinfo=UTC), ())
    assert session_request_id("conv-26", session) == "locomo/conv-26/session_3"
    assert session_request_id("conv-26", session, 1, 2) == "locomo/conv-26/session_3/part-1"
    assert session_request_id("conv-26", session, text_format="peer") == "locomo-peer/conv-26/session_3"
    assert session_request_id("conv-26", session, 0, 2, text_format="peer") == "locomo-peer/conv-26/session_3/part-0"
    assert workspace_name(workspace_prefix("eval-1a2b3c", "conversation"), "conv-26") == "eval-1a2b3c-conv-26"
    assert workspace_name(workspace_prefix("eval-1a2b3c", "peer"), "conv-26") == "eval-1a2b3c-peer-conv-26"
    assert MAX_MESSAGES_PER_WRITE <= 256  # the server's default max_batch_size


def test_the_loader_keeps_the_raw_session_date_time(tmp_path: Path) -> None:
    body = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"sample_id": "conv-1", "conversation": body, "qa": []}]))
    (session,) = load_locomo(path)[0].sessions
    assert session.date_time == "1:56 pm on 8 May, 2023"
    assert session.time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
