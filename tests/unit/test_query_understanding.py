"""Query understanding without an LLM (memplane.server.retrieval.query): the names a question
mentions and the time interval it names."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memplane.server.retrieval.query import (
    MAX_NAMES,
    MAX_PHRASES,
    TimeRange,
    asks_when,
    query_names,
    query_phrases,
    query_time,
)

NOW = datetime(2026, 12, 5, 15, 30, tzinfo=UTC)  # a Saturday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


def test_names_are_capitalised_words_lower_cased_without_possessive() -> None:
    assert query_names("What did Caroline's mom give Melanie after the LGBTQ talk?") == [
        "what",
        "caroline",
        "melanie",
    ]
    assert query_names("Where did Jolene\u2019s partner go?") == ["where", "jolene"]


def test_names_are_unique_in_order_and_bounded() -> None:
    assert query_names("Nate and Joanna and Nate") == ["nate", "joanna"]
    many = " ".join(f"Name{chr(97 + i)}x" for i in range(26)).replace("Name", "N")
    assert len(query_names(" ".join(w.capitalize() for w in many.split()))) == MAX_NAMES
    assert query_names("what did she do?") == []


@pytest.mark.parametrize(
    ("query", "start", "end", "text"),
    [
        ("What did Audrey set up on June 26, 2023?", day(2023, 6, 26), day(2023, 6, 27), "June 26, 2023"),
        ("Topic between John and Tim on 11 December, 2023?", day(2023, 12, 11), day(2023, 12, 12), "11 December, 2023"),
        ("What happened on 2023-02-28?", day(2023, 2, 28), day(2023, 3, 1), "2023-02-28"),
        ("What event is Nate organizing in June 2022?", day(2022, 6, 1), day(2022, 7, 1), "June 2022"),
        ("What did they do in December, 2023?", day(2023, 12, 1), day(2024, 1, 1), "December, 2023"),
        ("What personal health incidents does Evan face in 2023?", day(2023, 1, 1), day(2024, 1, 1), "in 2023"),
        (
            "Where was Tim in the week before 16 November 2023?",
            day(2023, 11, 16),
            day(2023, 11, 17),
            "16 November 2023",
        ),
    ],
)
def test_absolute_dates_become_intervals_of_their_granularity(
    query: str, start: datetime, end: datetime, text: str
) -> None:
    assert query_time(query, NOW) == TimeRange(start, end, text)


def test_relative_expressions_are_anchored_at_now() -> None:
    assert query_time("what did I eat yesterday", NOW) == TimeRange(day(2026, 12, 4), day(2026, 12, 5), "yesterday")
    assert query_time("plans from last week", NOW) == TimeRange(day(2026, 11, 23), day(2026, 11, 30), "last week")
    assert query_time("last month's trip", NOW) == TimeRange(day(2026, 11, 1), day(2026, 12, 1), "last month")
    assert query_time("books read last year", NOW) == TimeRange(day(2025, 1, 1), day(2026, 1, 1), "last year")
    assert query_time("goals this year", NOW) == TimeRange(day(2026, 1, 1), day(2027, 1, 1), "this year")
    january = datetime(2027, 1, 10, tzinfo=UTC)
    assert query_time("last month", january) == TimeRange(day(2026, 12, 1), day(2027, 1, 1), "last month")


def test_no_date_or_an_impossible_one_gives_none() -> None:
    assert query_time("What did Caroline research?", NOW) is None
    assert query_time("What happened on 31 February, 2023?", NOW) is not None  # falls back to the month
    assert query_time("What happened on 31 February, 2023?", NOW) == TimeRange(
        day(2023, 2, 1), day(2023, 3, 1), "February, 2023"
    )
    assert query_time("May I ask something?", NOW) is None  # "May" without a year is no date


def test_the_first_expression_wins_and_widening_adds_slack_each_side() -> None:
    when = query_time("in May 2023 or in July 2023", NOW)
    assert when is not None
    assert when.text == "May 2023"
    assert when.widened(3) == (datetime(2023, 4, 28, tzinfo=UTC), datetime(2023, 6, 4, tzinfo=UTC))


def test_phrases_are_the_quoted_texts_straight_or_curly() -> None:
    assert query_phrases('What did Caroline take away from the book "Becoming Nicole"?') == ["Becoming Nicole"]
    assert query_phrases('How did \u201cThe Alchemist\u201d change "his  view"?') == ["The Alchemist", "his  view"]
    assert query_phrases('an empty "" or blank "  " quote, and an "unclosed one') == []
    assert len(query_phrases(" ".join(f'"p{i}"' for i in range(9)))) == MAX_PHRASES


@pytest.mark.parametrize(
    "question",
    [
        "When did Caroline go to the LGBTQ support group?",
        "when was Melanie's charity race?",
        "How long has Nate had his first two turtles?",
        "Since when has John played professionally?",
        "What year did Jolene buy her snake?",
        "Which month did Tim visit Seattle?",
        "In which year did Maria meet Jean?",
        "How many years ago did Dave open his shop?",
        '  "When did she move?"',
    ],
)
def test_a_question_asking_for_a_time_or_a_duration_asks_when(question: str) -> None:
    assert asks_when(question)


@pytest.mark.parametrize(
    "question",
    [
        "What did Caroline research?",
        "Whenever it rains, what does Melanie paint?",
        "Did Melanie paint the lake when it rained?",
        "Where was John when the game started?",
        "What time-management tips did Tim share?",
        "",
    ],
)
def test_other_questions_do_not_ask_when(question: str) -> None:
    assert not asks_when(question)
