"""The Kubernetes exec websocket framing of the pod sandbox backend
(memplane.sandbox.kubeexec): channel bytes 0-3 (stdin, stdout, stderr, error), the v5
close message, and the final `metav1.Status` on the error channel, as the kubelet sends
them (k8s.io/apimachinery remotecommand; status shapes from `kubectl exec`)."""

from __future__ import annotations

import json

import pytest

from memplane.sandbox.base import ExecResult
from memplane.sandbox.kubeexec import (
    CLOSE,
    ERROR,
    STDERR,
    STDIN,
    STDOUT,
    ExecCollector,
    KubeExecError,
    exit_code_of,
    stdin_frames,
)

SUCCESS = {"metadata": {}, "status": "Success"}
EXIT_3 = {
    "metadata": {},
    "status": "Failure",
    "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
    "reason": "NonZeroExitCode",
    "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
}
NOT_STARTED = {
    "metadata": {},
    "status": "Failure",
    "message": 'failed to exec in container: exec: "nope": executable file not found in $PATH',
    "reason": "InternalError",
    "code": 500,
}


def _on(channel: int, payload: bytes) -> bytes:
    return bytes([channel]) + payload


def test_channel_numbers_are_the_protocol_s() -> None:
    assert (STDIN, STDOUT, STDERR, ERROR, CLOSE) == (0, 1, 2, 3, 255)


def test_stdin_is_cut_in_chunks_then_closed() -> None:
    data = bytes(range(256)) * 10  # 2,560 bytes
    frames = stdin_frames(data, chunk_bytes=1000)
    assert [f[0] for f in frames] == [STDIN, STDIN, STDIN, CLOSE]
    assert [len(f) - 1 for f in frames[:3]] == [1000, 1000, 560]
    assert b"".join(f[1:] for f in frames[:3]) == data
    assert frames[-1] == bytes([255, 0])  # close, naming the stdin channel


def test_empty_stdin_is_the_close_message_alone() -> None:
    assert stdin_frames(b"") == [b"\xff\x00"]


def test_exit_codes_from_the_status() -> None:
    assert exit_code_of(SUCCESS) == 0
    assert exit_code_of(EXIT_3) == 3
    with pytest.raises(KubeExecError, match="executable file not found"):
        exit_code_of(NOT_STARTED)
    with pytest.raises(KubeExecError):  # a non-zero exit without its ExitCode cause
        exit_code_of({"status": "Failure", "reason": "NonZeroExitCode", "message": "?"})


def test_collector_takes_a_kubelet_stream_in_order() -> None:
    collector = ExecCollector()
    stream = [
        _on(STDOUT, b""), _on(STDERR, b""), _on(ERROR, b""),  # each channel opened empty
        _on(STDOUT, b"hello "), _on(STDERR, b"warn\n"), _on(STDOUT, b"\x00\xffworld"),
        b"",  # an empty message
    ]  # fmt: skip
    assert [collector.feed(m) for m in stream] == [False] * len(stream)
    assert collector.feed(_on(ERROR, json.dumps(EXIT_3).encode())) is True
    assert collector.result() == ExecResult(3, b"hello \x00\xffworld", b"warn\n")


def test_collector_success_and_resize_ignored() -> None:
    collector = ExecCollector()
    assert collector.feed(_on(4, b'{"Width":80}')) is False
    assert collector.feed(_on(ERROR, json.dumps(SUCCESS).encode())) is True
    assert collector.result() == ExecResult(0, b"", b"")


def test_collector_without_a_status_or_on_an_unknown_channel() -> None:
    collector = ExecCollector()
    collector.feed(_on(STDOUT, b"partial"))
    with pytest.raises(KubeExecError, match="without an exit status"):
        collector.result()
    with pytest.raises(KubeExecError, match="unknown channel 9"):
        collector.feed(_on(9, b"x"))
    with pytest.raises(KubeExecError, match="executable file not found"):
        collector.feed(_on(ERROR, json.dumps(NOT_STARTED).encode()))
