"""What the reports draw with: matplotlib (an optional extra, ``pip install tgpflow[report]``, imported only when
a report is written) on its Agg backend, and PNGs written through the target path's own ``open``."""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot", "save_png"]


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("tgpflow report draws with matplotlib: pip install 'tgpflow[report]'") from exc
    return plt


def save_png(fig: Any, path: Any, dpi: int) -> None:
    """Write a figure through the path's own ``open`` (a local path or an fsspec one, :mod:`tgpflow.io.atomic`)."""
    with path.open("wb") as fh:
        fig.savefig(fh, format="png", dpi=dpi)
