"""Where the benchmarks find real tables.

MAGIC gamma telescope (CC BY 4.0) ships in ``tests/data/`` with its provenance. The ADBench development sets are
not in the repository: a benchmark that reads them takes their folder of ``*.npz`` files (arrays ``X`` and ``y``)
from ``--adbench-dir`` or the environment variable ``TGPFLOW_ADBENCH_DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAGIC = REPO / "tests" / "data" / "magic_gamma.parquet"


def adbench_files(directory: str | None = None) -> list[Path]:
    """The ``*.npz`` sets of ``directory`` (default: ``$TGPFLOW_ADBENCH_DIR``), sorted; exits naming the flag when
    none is given or the folder holds none."""
    where = directory or os.environ.get("TGPFLOW_ADBENCH_DIR")
    if not where:
        raise SystemExit("the ADBench sets are not in the repository: give their folder of *.npz files with "
                         "--adbench-dir DIR or TGPFLOW_ADBENCH_DIR")
    files = sorted(Path(where).glob("*.npz"))
    if not files:
        raise SystemExit(f"{where}: no *.npz files (the ADBench sets, arrays X and y)")
    return files
