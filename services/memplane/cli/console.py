"""`memplane console` in the `memplane` parser (its flags are `memplane.console.cli`'s):
the script's entry point hands the command to `memplane.console.cli` before any settings
load, since it needs the console extra only (`memplane.cli.entry`); this parser serves
`memplane --help`, the generated reference and callers of `memplane.cli.main.main`."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from memplane.cli.usage import Parser, UsageError
from memplane.console.cli import ConsoleUsageError, build_parser, run
from memplane.server.settings import Settings


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memplane console ...`, parsed by `memplane.console.cli`."""
    p = sub.add_parser(
        "console",
        help="the web console: browse, search, audit and fix memories over HTTP; needs only 'memplane[console]'",
        description="The web console: browse, search, audit and fix a workspace's memories (HTTP).",
        parents=[build_parser(Parser, add_help=False)],
    )
    p.set_defaults(func=cmd_console)


async def cmd_console(ns: argparse.Namespace, settings: Settings) -> int:
    """`memplane.console.cli.run` over the parsed flags; 1 for an unreadable CA file."""
    try:
        return await run(ns, _usage_error)
    except ConsoleUsageError as error:
        print(f"memplane console: {error}", file=sys.stderr)
        return 1


def _usage_error(message: str) -> NoReturn:
    raise UsageError(message)
