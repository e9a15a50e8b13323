"""Kubernetes exec over a websocket (``pods/<name>/exec``), what `kubectl exec` and `kubectl
cp` speak: the framing as pure functions (`stdin_frames`, `ExecCollector`, `exit_code_of`)
and one call (`kube_exec`) over a kr8s API client.

Every websocket message carries one channel byte, then the payload: 0 stdin, 1 stdout,
2 stderr, 3 error (the command's final `metav1.Status` as JSON), 4 resize, and in
``v5.channel.k8s.io`` (Kubernetes 1.30+) 255 close, whose payload names the channel the
client will send no more on — the only way to give a process end-of-file on stdin.
``v4.channel.k8s.io`` has no close, so a command that reads stdin to its end (`tar x`)
needs v5; a command without stdin runs on either (source: k8s.io/apimachinery
`pkg/util/remotecommand` and `httpstream/wsstream`, KEP-4006).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx_ws
import kr8s.asyncio

from memplane.errors import FailedPreconditionError, UnavailableError
from memplane.sandbox.base import ExecResult

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
PROTOCOLS = (V5, V4)  # in order of preference
STDIN_CHUNK_BYTES = 256 * 1024  # stdin payload per websocket message
_NOT_FOUND = 404


class KubeExecError(UnavailableError):
    """The exec did not run to an exit status: refused by the API server or the kubelet
    (the message is theirs), or the stream ended without a status."""

    reason = "SANDBOX_EXEC_FAILED"


def stdin_frames(data: bytes, *, chunk_bytes: int = STDIN_CHUNK_BYTES) -> list[bytes]:
    """The messages that send *data* on stdin and then close it (v5): *data* cut in
    pieces of at most *chunk_bytes*, each after the stdin channel byte, then the close
    message ``[255, 0]``. Empty *data* is the close message alone."""
    frames = [bytes([STDIN]) + data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]
    return [*frames, bytes([CLOSE, STDIN])]


def exit_code_of(status: Mapping[str, Any]) -> int:
    """The exit code a `metav1.Status` from the error channel reports: 0 for
    ``Success``, the ``ExitCode`` cause of a ``NonZeroExitCode`` failure. Raises
    `KubeExecError` with the status' message for any other failure (the command could
    not be started: no such container, runtime error)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause["message"])
    raise KubeExecError(str(status.get("message") or status))


@dataclass
class ExecCollector:
    """Collects the messages of one exec: stdout and stderr bytes, and the exit code once
    the status arrives on the error channel."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None

    def feed(self, message: bytes) -> bool:
        """Take one websocket message; True once the status has come (the exec is over).
        Empty messages (the server opens each channel with one) are skipped; a message
        on another channel raises `KubeExecError`."""
        if not message:
            return False
        channel, payload = message[0], message[1:]
        if channel == STDOUT:
            self.stdout.extend(payload)
        elif channel == STDERR:
            self.stderr.extend(payload)
        elif channel == ERROR:
            if not payload:
                return False
            self.exit_code = exit_code_of(json.loads(payload))
            return True
        elif channel != RESIZE:
            raise KubeExecError(f"exec sent a message on unknown channel {channel}")
        return False

    def result(self) -> ExecResult:
        """The collected `ExecResult`; `KubeExecError` if no status came."""
        if self.exit_code is None:
            raise KubeExecError("the exec stream ended without an exit status")
        return ExecResult(self.exit_code, bytes(self.stdout), bytes(self.stderr))


class PodGoneError(Exception):
    """The API server answered 404 for the Pod (never created, suspended or destroyed)."""


async def kube_exec(
    api: kr8s.asyncio.Api, namespace: str, pod: str, *, container: str, argv: list[str], stdin: bytes | None = None
) -> ExecResult:
    """Run *argv* (no shell) in *container* of Pod *namespace*/*pod* and wait for it to
    end; *stdin*, when given, is sent and then closed (needs v5, else
    `FailedPreconditionError`). No timeout here: the caller bounds the call. Raises
    `PodGoneError` (404), `KubeExecError` (refused, e.g. a Pod not running, with the
    API server's message; or no exit status)."""
    params: dict[str, Any] = {
        "command": argv,
        "container": container,
        "stdout": "true",
        "stderr": "true",
        "stdin": "true" if stdin is not None else "false",
    }
    collector = ExecCollector()
    try:
        async with api.open_websocket(
            version="v1", url=f"pods/{pod}/exec", namespace=namespace, params=params, subprotocols=PROTOCOLS
        ) as ws:
            if stdin is not None:
                if ws.subprotocol != V5:
                    raise FailedPreconditionError(
                        f"writing files into a pod needs the exec protocol {V5} (Kubernetes 1.30+); "
                        f"the API server chose {ws.subprotocol!r}"
                    )
                for frame in stdin_frames(stdin):
                    await ws.send_bytes(frame)
            while not collector.feed(await ws.receive_bytes()):
                pass
    except httpx_ws.WebSocketUpgradeError as exc:
        if exc.response.status_code == _NOT_FOUND:
            raise PodGoneError(pod) from None
        raise KubeExecError(_message(exc.response)) from None
    except httpx_ws.WebSocketDisconnect as exc:
        if collector.exit_code is None:
            raise KubeExecError(f"the exec stream closed ({exc.code}) before an exit status: {exc.reason}") from None
    return collector.result()


def _message(response: httpx.Response) -> str:
    """Why an upgrade was refused: the `metav1.Status` message when the body can still be
    read (httpx-ws may have closed it), else the HTTP status."""
    try:
        body = json.loads(response.read())
        return f"HTTP {response.status_code}: {body.get('message') or body}"
    except (httpx.StreamError, ValueError, AttributeError):
        return f"the API server refused the exec upgrade with HTTP {response.status_code}"
