"""The CLI's error boundary for a user's mistakes: a bad argument or a path that cannot be
read or written is one line on stderr and exit status 2, never a traceback; output into a
closed pipe (`memplane workspace list | head -1`) ends quietly. Standard library only:
`memplane.cli.entry` runs it before the server extra is known to be installed."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

USAGE_EXIT = 2  # argparse's own status for bad usage
CLOSED_PIPE_EXIT = 1  # as Python's recipe ("Note on SIGPIPE", the signal module's docs)


class UsageError(Exception):
    """A mistake in the command line or in a file it names; the message is the whole line."""


class Parser(argparse.ArgumentParser):
    """argparse with each usage error on one line ("memplane search: error: argument
    --top-k: invalid int value: 'abc' (see memplane search --help)"), exit status 2. Its
    subparsers are of this class too (argparse makes them with `type(self)`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_EXIT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def guarded(run: Callable[[], int]) -> int:
    """*run*'s exit status, with a user's mistake turned into one line on stderr and
    status 2: a `UsageError`, or an `OSError` that names a path (a file that does not
    exist, a directory given for a file, a permission refused). A closed stdout is no
    error to report: stdout is pointed at /dev/null, so the interpreter's last flush does
    not fail again, and the status is CLOSED_PIPE_EXIT. Anything else propagates (a bug's
    traceback stays visible)."""
    try:
        code = run()
        sys.stdout.flush()  # buffered output meets a closed pipe here, inside the boundary
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE_EXIT
    except UsageError as error:
        print(f"memplane: {error}", file=sys.stderr)
        return USAGE_EXIT
    except OSError as error:
        if error.filename is None:
            raise
        paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
        print(f"memplane: {paths}: {error.strerror or error}", file=sys.stderr)
        return USAGE_EXIT
    return code
