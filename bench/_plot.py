"""Figures for the documentation (docs/benchmarks/): matplotlib without a display, written
as SVG (or PNG, by the path's suffix) with no date and a fixed hash salt, so the same
figures give the same bytes. Imported only when a bench is asked for --plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figure(columns: int = 1, *, width: float = 5.0, height: float = 3.4) -> tuple[Any, Any]:
    """A figure of *columns* panels side by side, in the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "memplane", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt.subplots(1, columns, figsize=(width * columns, height), layout="constrained")


def save(fig: Any, path: Path, command: str) -> None:
    """Write *fig* to *path* (SVG or PNG) with *command*, the one that made it, as its
    description, and print where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".svg":
        fig.savefig(path, metadata={"Date": None, "Description": command})
    else:
        fig.savefig(path, dpi=150, metadata={"Software": None, "Description": command})
    print(f"# figure: {path}")
