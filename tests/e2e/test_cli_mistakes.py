"""A user's mistake on the `memplane` command line is one line on stderr and exit status 2,
never a traceback (`memplane.cli.usage`): every subcommand that takes a path, given one
that does not exist, is a directory, a file where a directory belongs, or is not text;
bad argument values (`memplane mcp`'s too, whose parser is its own); and output into a
closed pipe (`memplane workspace list | head -1`) ends quietly. Run through the script's
entry point (`memplane.cli.entry.main`), against the session server where the mistake
shows only after the server answered."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from memplane.cli.entry import main
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory

pytestmark = pytest.mark.timeout(300)


def _exit_status(argv: list[str]) -> int:
    """What the script exits with: main()'s return value, or argparse's SystemExit."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.get_running_loop().run_in_executor(None, _exit_status, argv)  # main() runs its own loop
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _paths(tmp: Path) -> dict[str, Path]:
    (tmp / "a-dir").mkdir()
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    return {"missing": tmp / "missing" / "x.jsonl", "dir": tmp / "a-dir", "file": tmp / "a-file"}


# (arguments with {missing}/{dir}/{file}/{tmp} filled in, what stderr must name, what it must say)
PATH_MISTAKES = [
    (["import", "jsonl", "{tmp}/nosuch.jsonl"], "nosuch.jsonl", "No such file or directory"),
    (["import", "jsonl", "{dir}"], "a-dir", "Is a directory"),
    (["import", "jsonl", "{tmp}/binary.jsonl"], "binary.jsonl", "not UTF-8 text"),
    (["export", "jsonl", "{missing}"], "missing/x.jsonl", "No such file or directory"),
    (["export", "jsonl", "{dir}"], "a-dir", "Is a directory"),
    (["export", "markdown", "{file}"], "a-file", "Not a directory"),
    (["import", "locomo", "{tmp}/nosuch.json"], "nosuch.json", "No such file or directory"),
    (["import", "locomo", "{file}"], "a-file", "cannot read LoCoMo data"),
    (["eval", "locomo", "{tmp}/nosuch.json"], "nosuch.json", "No such file or directory"),
    (["compact", "locomo", "{dir}"], "a-dir", "Is a directory"),
    (["sync", "{file}"], "a-file", "File exists"),
    (["search", "tea", "--ca-file", "{tmp}/nosuch.pem"], "nosuch.pem", "No such file or directory"),
]

ARGUMENT_MISTAKES = [
    (["import", "jsonl", "x.jsonl", "--batch-size", "0"], "--batch-size", "must be 1 to 256"),
    (["search", "tea", "--top-k", "many"], "--top-k", "invalid int value: 'many'"),
    (["health", "--wait", "-1"], "--wait", "must be a number of seconds"),
    (["search", "tea", "--target", "http://"], "'http://'", "names no address"),
    (["export", "markdown", "out", "--encoding", "morse"], "--encoding", "invalid choice"),
    (["eval", "locomo", "x.json", "--concurrency", "0"], "--concurrency", "must be at least 1"),
    (["workspace"], "memplane workspace", "required"),
    (["frobnicate"], "frobnicate", "invalid choice"),
    (["mcp", "--transport", "pigeon"], "--transport", "invalid choice: 'pigeon'"),
    (["mcp", "--port", "eighty"], "--port", "invalid int value: 'eighty'"),
    (["mcp", "--no-such-flag"], "memplane mcp", "unrecognized arguments: --no-such-flag"),
]


def _fill(args: list[str], paths: dict[str, Path], tmp: Path) -> list[str]:
    return [a.format(tmp=tmp, **paths) for a in args]


def _assert_one_line(code: int, err: str, names: str, says: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert "Traceback" not in err
    assert names in err, err
    assert says in err, err


@pytest.mark.parametrize(("args", "names", "says"), PATH_MISTAKES, ids=[" ".join(m[0][:2]) for m in PATH_MISTAKES])
async def test_a_bad_path_is_one_line_naming_it(
    args: list[str],
    names: str,
    says: str,
    server: str,
    workspace: TestWorkspace,
    admin_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = _paths(tmp_path)
    key = admin_key if args[0] in {"import", "eval"} and args[1] == "locomo" else workspace.key
    code, _, err = await _run([*_fill(args, paths, tmp_path), "--target", server, "--api-key", key], capsys)
    _assert_one_line(code, err, names, says)


async def test_an_id_map_that_cannot_be_written_stops_the_import_before_anything_is_stored(
    server: str, workspace_factory: WorkspaceFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = await workspace_factory(), await workspace_factory()
    await source.client.add_memories([memory_pb2.MemoryInput(content="Alice likes green tea")])
    exported = tmp_path / "ws.jsonl"
    code, _, err = await _run(["export", "jsonl", str(exported), "--target", server, "--api-key", source.key], capsys)
    assert code == 0, err
    args = ["import", "jsonl", str(exported), "--id-map", str(tmp_path / "missing" / "ids.tsv")]
    code, _, err = await _run([*args, "--target", server, "--api-key", target.key], capsys)
    _assert_one_line(code, err, "missing/ids.tsv", "No such file or directory")
    assert not (await target.client.list_memories()).memories


@pytest.mark.parametrize(("args", "names", "says"), ARGUMENT_MISTAKES, ids=[m[1] for m in ARGUMENT_MISTAKES])
async def test_a_bad_argument_is_one_line_naming_it(
    args: list[str], names: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await _run(args, capsys)
    _assert_one_line(code, err, names, says)


async def _into_a_closed_pipe(*args: str) -> tuple[int, str]:
    """Run `python -m memplane ARGS` with stdout a pipe whose reading end is already closed
    (`| head -1` once head has exited): (exit status, stderr)."""
    read, write = os.pipe()
    os.close(read)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", *args, stdout=write, stderr=asyncio.subprocess.PIPE
        )
    finally:
        os.close(write)
    _, err = await process.communicate()
    return await process.wait(), err.decode()


async def test_output_into_a_closed_pipe_ends_quietly(server: str, admin_key: str, workspace: TestWorkspace) -> None:
    """`workspace list` has a line to print (*workspace*'s at least)."""
    code, err = await _into_a_closed_pipe("workspace", "list", "--target", server, "--api-key", admin_key)
    assert (code, err) == (1, "")
    _, err = await _into_a_closed_pipe("--help")  # argparse's own print drops the write error: status 0
    assert err == ""
