"""Phase logging: one INFO line per phase of a fit (pilot, pass, solve), with its duration.

The library never configures handlers or prints; it only emits records under the
``tgpflow`` logger and annotates the Dask tasks of a phase with ``distributed.span`` so
that the dashboard groups them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("tgpflow")


@contextlib.contextmanager
def phase(name: str, **facts: Any) -> Iterator[dict[str, Any]]:
    """Time a phase and log ``name: k=v … (s)`` at INFO; the dict yielded collects more facts."""
    from distributed import span

    info: dict[str, Any] = dict(facts)
    start = time.perf_counter()
    with span("tgpflow", name):
        yield info
    info["seconds"] = round(time.perf_counter() - start, 3)
    logger.info("%s: %s", name, ", ".join(f"{k}={v}" for k, v in info.items()))
