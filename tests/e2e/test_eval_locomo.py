"""`memplane eval locomo --text-format peer` and the ingestion behind it, against the
session server, on a small LoCoMo-shaped file written here (the real dataset is never
copied): each turn is stored as one "[<date_time>] <speaker>: <text>" memory, hits map
back to dia_ids, and a peer-format run never reuses a conversation-format workspace."""

from __future__ import annotations

import asyncio
import gc
import json
import secrets
import warnings
from pathlib import Path

import pytest

from memplane.cli.main import main
from memplane.client import AsyncMemplaneClient
from memplane.errors import FailedPreconditionError, NotFoundError
from memplane.eval.ingest import TEXT_FORMAT_LABEL, ClientFactory, WorkspaceSet
from memplane.eval.locomo import load_locomo, workspace_name
from memplane.eval.runner import EvalConfig, hit_message_id, ingest_locomo, run_locomo_eval
from memplane.v1 import memory_pb2, retrieval_pb2
from tests.support import list_all

SAMPLE = "conv-mini"
TURNS = {
    "D1:1": ("Ana", "I adopted a greyhound called Biscuit last weekend."),
    "D1:2": ("Ben", "Lovely! I am repainting my kitchen in a pale yellow."),
    "D2:1": ("Ana", "Biscuit learned to fetch a frisbee at the beach."),
    "D2:2": ("Ben", "My sister is moving to Lisbon for a cello scholarship."),
}
DATES = {1: "1:56 pm on 8 May, 2023", 2: "10:04 am on 19 June, 2023"}


def locomo_file(tmp_path: Path) -> Path:
    body: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for number, date in DATES.items():
        body[f"session_{number}_date_time"] = date
        body[f"session_{number}"] = [
            {"speaker": speaker, "dia_id": dia_id, "text": text}
            for dia_id, (speaker, text) in TURNS.items()
            if dia_id.startswith(f"D{number}:")
        ]
    qa = [
        {"question": "What is the name of Ana's greyhound?", "category": 4, "evidence": ["D1:1"]},
        {"question": "Which city is Ben's sister moving to for the cello?", "category": 4, "evidence": ["D2:2"]},
    ]
    path = tmp_path / "locomo-mini.json"
    path.write_text(json.dumps([{"sample_id": SAMPLE, "conversation": body, "qa": qa}]))
    return path


def _factory(server: str) -> ClientFactory:
    return lambda api_key: AsyncMemplaneClient(server, api_key, timeout=120.0)


async def test_peer_format_stores_one_dated_memory_per_turn_that_maps_to_its_dia_id(
    tmp_path: Path, server: str, admin_client: AsyncMemplaneClient
) -> None:
    conversations = load_locomo(locomo_file(tmp_path))
    prefix = f"t-{secrets.token_hex(4)}"
    async with WorkspaceSet(admin_client, _factory(server), delete=True) as spaces:
        stats = await ingest_locomo(
            spaces, conversations, prefix=prefix, reuse=False, text_format="peer", progress=False
        )
        assert stats.turns == len(TURNS)
        (access,) = spaces.accesses
        assert access.name == f"{prefix}-peer-{SAMPLE}"
        workspace = await admin_client.get_workspace(access.name)
        assert workspace.labels[TEXT_FORMAT_LABEL] == "peer"

        client = spaces.client(SAMPLE)
        stored = {hit_message_id(m): m for m in await list_all(client)}
        assert sorted(stored) == sorted(TURNS)  # one memory per turn, nothing else
        greyhound = stored["D1:1"]
        assert greyhound.content == "[1:56 pm on 8 May, 2023] Ana: I adopted a greyhound called Biscuit last weekend."
        assert stored["D2:2"].content.startswith("[10:04 am on 19 June, 2023] Ben: My sister")
        assert greyhound.type == memory_pb2.MEMORY_TYPE_EPISODIC
        assert greyhound.scope == memory_pb2.Scope(user_id=SAMPLE, session_id="session_1")
        assert (greyhound.name, greyhound.description) == ("", "")
        assert dict(greyhound.metadata) == {"message_id": "D1:1"}

        found = await client.search("greyhound Biscuit", mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
        assert hit_message_id(found.hits[0].memory) == "D1:1"

        # A re-run over the same workspace replays the batches' request ids: nothing doubles.
        again = await ingest_locomo(
            spaces, conversations, prefix=prefix, reuse=True, text_format="peer", progress=False
        )
        assert again.reused == 1
        assert len(await list_all(client)) == len(TURNS)


async def test_a_peer_run_never_reuses_a_conversation_workspace(
    tmp_path: Path, server: str, admin_client: AsyncMemplaneClient
) -> None:
    conversations = load_locomo(locomo_file(tmp_path))
    prefix = f"t-{secrets.token_hex(4)}"
    async with WorkspaceSet(admin_client, _factory(server), delete=True) as spaces:
        await ingest_locomo(spaces, conversations, prefix=prefix, reuse=True, progress=False)
        conversation_name = workspace_name(prefix, SAMPLE)
        assert [a.name for a in spaces.accesses] == [conversation_name]
        stored = {hit_message_id(m): m for m in await list_all(spaces.client(SAMPLE))}
        assert stored["D1:1"].description == "[8 May 2023] Ana"  # WriteConversation's format
        assert stored["D1:1"].content == TURNS["D1:1"][1]

        # The same prefix in the peer format goes to its own, new workspace …
        peer = await ingest_locomo(spaces, conversations, prefix=prefix, reuse=True, text_format="peer", progress=False)
        assert (peer.reused, spaces.accesses[-1].name, spaces.accesses[-1].created) == (
            0,
            f"{prefix}-peer-{SAMPLE}",
            True,
        )
        # … and a peer write is refused outright on a workspace holding the other format.
        with pytest.raises(FailedPreconditionError, match="text format 'conversation'"):
            await spaces.open(SAMPLE, conversation_name, reuse=True, text_format="peer")
        with pytest.raises(FailedPreconditionError, match="text format 'peer'"):
            await spaces.open(SAMPLE, f"{prefix}-peer-{SAMPLE}", reuse=True)


async def test_the_eval_command_scores_the_peer_format(
    tmp_path: Path, server: str, admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = locomo_file(tmp_path)
    argv = ["eval", "locomo", str(path), "--text-format", "peer", "--modes", "lexical", "--no-progress"]
    argv += ["--target", server, "--api-key", admin_key]
    # main() runs its own event loop: run it in a worker thread.
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "text format: peer" in out
    overall = next(line.split() for line in out.splitlines() if line.split()[:2] == ["lexical", "overall"])
    assert overall[2:] == ["2", "1.000", "1.000", "1.000", "1.000", "1.000"]  # n, R@1/5/10/20, nDCG@10


async def test_the_extract_format_stores_extracted_memories_that_map_to_their_turns(
    tmp_path: Path, server: str, admin_client: AsyncMemplaneClient
) -> None:
    # The session server has no LLM: its rules extractor takes Ben's "My sister is ..."
    # (a first-person statement); the other turns match no pattern.
    conversations = load_locomo(locomo_file(tmp_path))
    prefix = f"t-{secrets.token_hex(4)}"
    async with WorkspaceSet(admin_client, _factory(server), delete=True) as spaces:
        await ingest_locomo(spaces, conversations, prefix=prefix, reuse=False, text_format="extract", progress=False)
        (access,) = spaces.accesses
        assert access.name == f"{prefix}-extract-{SAMPLE}"
        client = spaces.client(SAMPLE)
        memories = await list_all(client)
        extracted = [m for m in memories if m.type != memory_pb2.MEMORY_TYPE_EPISODIC]
        assert len(memories) == len(TURNS) + 1
        (sister,) = extracted
        assert sister.content == "My sister is moving to Lisbon for a cello scholarship."
        assert sister.type == memory_pb2.MEMORY_TYPE_USER
        assert sister.description == "Ben's sister, as they said it"
        assert hit_message_id(sister) == "D2:2"  # scored as evidence like the turn it came from


async def test_the_eval_command_runs_with_extraction_on(
    tmp_path: Path, server: str, admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = locomo_file(tmp_path)
    argv = ["eval", "locomo", str(path), "--text-format", "extract", "--modes", "lexical", "--no-progress"]
    argv += ["--target", server, "--api-key", admin_key]
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "text format: extract" in out
    overall = next(line.split() for line in out.splitlines() if line.split()[:2] == ["lexical", "overall"])
    assert overall[2:4] == ["2", "1.000"]  # n, R@1: the extracted memory does not push its turn's evidence out


async def test_the_split_reports_conversations_one_to_five_apart_from_the_held_out_rest(
    tmp_path: Path, server: str, admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    one = json.loads(locomo_file(tmp_path).read_text())[0]
    samples = [{**one, "sample_id": f"{SAMPLE}-{n}"} for n in range(1, 7)]  # six conversations, two questions each
    samples[5] = {**samples[5], "qa": samples[5]["qa"][:1]}  # the sixth (held out) asks one
    path = tmp_path / "locomo-six.json"
    path.write_text(json.dumps(samples))
    argv = ["eval", "locomo", str(path), "--split", "--modes", "lexical", "--no-progress"]
    argv += ["--target", server, "--api-key", admin_key]
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)
    out = capsys.readouterr().out
    assert code == 0, out
    overall = {cells[0]: cells[2] for cells in (line.split() for line in out.splitlines()) if cells[1:2] == ["overall"]}
    assert overall == {"lexical": "11", "lexical/tuning": "10", "lexical/held-out": "1"}  # n per half
    assert any(line.split()[:2] == ["lexical/held-out", "4"] for line in out.splitlines())  # per category too


async def test_eval_reuses_an_import_and_sets_the_recall_terms(
    tmp_path: Path, server: str, admin_key: str, admin_client: AsyncMemplaneClient, capsys: pytest.CaptureFixture[str]
) -> None:
    path = locomo_file(tmp_path)
    prefix = f"imp-{secrets.token_hex(3)}"
    auth = ["--target", server, "--api-key", admin_key]
    run = asyncio.get_running_loop().run_in_executor
    for text_format in ("conversation", "peer"):
        argv = ["import", "locomo", str(path), "--prefix", prefix, "--text-format", text_format, "--no-progress"]
        assert await run(None, main, argv + auth) == 0
    capsys.readouterr()
    names = [workspace_name(prefix, SAMPLE), workspace_name(f"{prefix}-peer", SAMPLE)]
    try:
        assert await run(None, main, ["eval", "locomo", str(path), "--reuse", "--no-progress", *auth]) == 2
        assert "--reuse needs --prefix" in capsys.readouterr().err
        for text_format in ("conversation", "peer"):
            argv = ["eval", "locomo", str(path), "--prefix", prefix, "--reuse", "--text-format", text_format]
            argv += ["--modes", "hybrid", "--fusion", "zscore", "--neighbour-window", "1", "--neighbour-weight", "0.5"]
            argv += ["--speaker-weight", "0.3", "--time-weight", "0", "--no-progress", *auth]
            assert await run(None, main, argv) == 0
            out = capsys.readouterr().out
            assert f"text format: {text_format}" in out
            assert "ingest: 4 turns into 1 workspaces" in out
            assert f"kept workspaces: {names[text_format == 'peer']}" in out
            overall = next(line.split() for line in out.splitlines() if line.split()[:2] == ["hybrid", "overall"])
            assert overall[2] == "2"
        # --reuse keeps the workspaces (an eval without it deletes its own).
        for name in names:
            assert (await admin_client.get_workspace(name)).name == name
        bad = ["eval", "locomo", str(path), "--prefix", prefix, "--reuse", "--neighbour-weight", "2", "--no-progress"]
        with pytest.raises(SystemExit) as exited:  # argparse's usage error, before anything runs
            await run(None, main, bad + auth)
        assert exited.value.code == 2
        assert "argument --neighbour-weight: must be between 0 and 1" in capsys.readouterr().err
    finally:
        for name in names:
            await admin_client.delete_workspace(name)


async def test_eval_reuse_of_a_prefix_with_no_workspaces_is_an_error_naming_what_it_looked_for(
    tmp_path: Path, server: str, admin_key: str, admin_client: AsyncMemplaneClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --prefix with --reuse names the workspaces it looked for and creates none
    (it imported every conversation into fresh workspaces under the typo)."""
    path = locomo_file(tmp_path)
    prefix = f"Typo-{secrets.token_hex(3)}"
    auth = ["--target", server, "--api-key", admin_key]
    run = asyncio.get_running_loop().run_in_executor
    for text_format, looked_for in (
        ("conversation", workspace_name(prefix, SAMPLE)),
        ("peer", workspace_name(f"{prefix}-peer", SAMPLE)),
    ):
        argv = ["eval", "locomo", str(path), "--prefix", prefix, "--reuse", "--text-format", text_format]
        assert await run(None, main, [*argv, "--no-progress", *auth]) == 1
        captured = capsys.readouterr()
        assert "lexical" not in captured.out  # no evaluation ran
        assert f"--reuse: no workspace with --prefix {prefix}" in captured.err
        assert looked_for in captured.err
        assert f"memplane import locomo {path} --prefix {prefix}" in captured.err
        with pytest.raises(NotFoundError):
            await admin_client.get_workspace(looked_for)


async def test_run_locomo_eval_with_reuse_refuses_missing_workspaces_before_creating_any(
    tmp_path: Path, server: str, admin_client: AsyncMemplaneClient
) -> None:
    conversations = load_locomo(locomo_file(tmp_path))
    prefix = f"typo-{secrets.token_hex(3)}"
    config = EvalConfig(modes=("lexical",), prefix=prefix, reuse=True, progress=False)
    with pytest.raises(NotFoundError, match=workspace_name(prefix, SAMPLE)):
        await run_locomo_eval(admin_client, _factory(server), conversations, config)
    with pytest.raises(NotFoundError):
        await admin_client.get_workspace(workspace_name(prefix, SAMPLE))


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--neighbour-weight", "2"),
        ("--speaker-weight", "1e-7"),
        ("--time-weight", "nan"),
        ("--phrase-weight", "-0.1"),
        ("--neighbour-window", "11"),
        ("--prf-terms", "51"),
        ("--vector-weight", "1.5"),
    ],
)
async def test_eval_refuses_a_bad_term_flag_before_anything_runs(
    tmp_path: Path,
    server: str,
    admin_key: str,
    admin_client: AsyncMemplaneClient,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
) -> None:
    """A term out of the server's range is a usage error naming the flag, before any
    workspace is made or coroutine created (it imported every conversation, then failed
    at the first search, leaving "coroutine ... was never awaited" warnings)."""
    path = locomo_file(tmp_path)
    prefix = f"bad-{secrets.token_hex(3)}"
    argv = ["eval", "locomo", str(path), "--prefix", prefix, flag, value, "--modes", "lexical", "--no-progress"]
    argv += ["--target", server, "--api-key", admin_key]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit) as exited:
            await asyncio.get_running_loop().run_in_executor(None, main, argv)
        gc.collect()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err
    assert not [w for w in caught if "never awaited" in str(w.message)]
    with pytest.raises(NotFoundError):
        await admin_client.get_workspace(workspace_name(prefix, SAMPLE))
