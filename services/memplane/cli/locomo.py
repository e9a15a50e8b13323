"""`memplane import locomo` and `memplane eval locomo` (filled in below)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    """Register the import and eval sub-commands."""
    del sub
    _ = argparse
