"""`memplane mcp` without a network: the check of tool arguments against the published
schemas (each message names the argument; defaults filled in), memplane's field paths
renamed to the tool's arguments, and the command line reached from both entry points."""

from __future__ import annotations

import pytest

from memplane.cli import entry
from memplane.cli import main as cli_main
from memplane.errors import FieldViolation, InvalidArgumentError, NotFoundError
from memplane.integrations.mcp.schemas import MAX_IDS, TOOLS, ArgumentError, check_arguments
from memplane.integrations.mcp.tools import error_message


def test_every_tool_schema_is_a_closed_object_with_described_arguments() -> None:
    for tool in TOOLS:
        schema = tool.input_schema
        assert schema["type"] == "object", tool.name
        assert schema["additionalProperties"] is False, tool.name
        assert set(schema["required"]) <= set(schema["properties"]), tool.name
        assert all(prop.get("description") for prop in schema["properties"].values()), tool.name
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object", tool.name


def test_defaults_are_filled_in_and_given_values_kept() -> None:
    assert check_arguments("search_memories", {"query": "tea"}) == {"query": "tea", "top_k": 5, "min_relevance": 0}
    assert check_arguments("list_memories", {"page_size": 3}) == {"page_size": 3}
    assert check_arguments("add_memory", {"content": "x", "user_id": "u"}) == {
        "content": "x",
        "user_id": "u",
        "type": "user",
    }


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("search_memories", {}, "query: is required"),
        ("search_memories", {"query": ""}, "query: '' should be non-empty"),
        ("search_memories", {"query": "t", "top_k": 0}, "top_k: 0 is less than the minimum of 1"),
        ("search_memories", {"query": "t", "top_k": True}, "top_k: True is not of type 'integer'"),
        ("list_memories", {"page_size": 101}, "page_size: 101 is greater than the maximum of 100"),
        ("get_memories", {"ids": ["a", ""]}, "ids[1]: '' should be non-empty"),
        ("get_memories", {"ids": ["a", "a"]}, "ids: ['a', 'a'] has non-unique elements"),
        ("delete_memories", {"ids": ["x"] * 2 + [str(i) for i in range(MAX_IDS)]}, "ids: "),
        ("add_memory", {"content": "x", "metadata": [1]}, "metadata: [1] is not of type 'object'"),
        ("add_memory", {"text": "x"}, "content: is required; text: unknown argument (known: content, "),
    ],
)
def test_a_bad_argument_is_named(tool: str, arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        check_arguments(tool, arguments)
    assert str(raised.value).startswith(message), str(raised.value)


def test_memplane_field_paths_become_the_tool_arguments() -> None:
    error = InvalidArgumentError(
        [
            FieldViolation("memories[0].content", "must not be empty"),
            FieldViolation("memories[0].scope.user_id", "is too long"),
            FieldViolation("queries[0]", "is too long"),
            FieldViolation("filter.session_id", "is too long"),
            FieldViolation("top_k", "must be between 1 and 100"),
        ]
    )
    assert error_message(error) == (
        "invalid argument: content: must not be empty; user_id: is too long; query: is too long; "
        "session_id: is too long; top_k: must be between 1 and 100"
    )
    assert error_message(NotFoundError("memory", "m1")) == "NotFoundError: memory 'm1' not found"


@pytest.mark.parametrize("run", [entry.main, cli_main.main])
def test_both_entry_points_hand_mcp_to_its_own_parser(
    run: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MEMPLANE_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        run(["mcp", "--transport", "stdio"])  # type: ignore[operator]
    assert exited.value.code == 2
    assert "memplane mcp: error: no API key: pass --api-key or set MEMPLANE_API_KEY" in capsys.readouterr().err
