"""`memplane compact locomo` (the runnable example of docs/guides/compaction.md) against the session server,
on a small LoCoMo-shaped file written here (the real dataset is never copied)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from memplane.cli.main import main
from tests.fix_server import TestWorkspace


def locomo_file(tmp_path: Path, sessions: int = 6, turns: int = 16) -> Path:
    body: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for s in range(1, sessions + 1):
        body[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
        body[f"session_{s}"] = [
            {
                "speaker": "Ana" if t % 2 == 0 else "Ben",
                "dia_id": f"D{s}:{t + 1}",
                "text": f"Session {s} turn {t}: we talked about hiking trail {s * 100 + t} and the weather there.",
            }
            for t in range(turns)
        ]
    path = tmp_path / "locomo-mini.json"
    path.write_text(json.dumps([{"sample_id": "conv-mini", "conversation": body, "qa": []}]))
    return path


async def test_the_readme_example_compacts_and_keeps_the_transcript(
    tmp_path: Path, server: str, workspace: TestWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    path = locomo_file(tmp_path)
    argv = ["compact", "locomo", str(path), "--max-input-tokens", "1000", "--target", server]
    # main() runs its own event loop: run it in a worker thread.
    code = await asyncio.get_running_loop().run_in_executor(None, main, [*argv, "--api-key", workspace.key])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "conv-mini: Ana (user) and Ben (assistant), 96 turns in 6 sessions" in out
    assert "EXTRACTIVE" in out  # compaction happened, without an LLM
    transcript = await workspace.client.get_transcript("compact-conv-mini-1", page_size=1000)
    assert transcript.messages  # compacted turns are kept, marked
    assert all(m.compacted for m in transcript.messages)
    assert [m.message.id for m in transcript.messages][:2] == ["D1:1", "D1:2"]
    assert f"{len(transcript.messages)} messages stored, {len(transcript.messages)} of them marked compacted" in out
