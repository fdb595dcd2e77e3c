"""Peak resident memory of ``tgpflow fit`` (whole process tree) at two dataset sizes.

Writes d = 7 Parquet datasets of the given sizes to a temporary directory, runs
``tgpflow fit --model fvpd --n-features 1000`` on each (default scheduler: threads), and samples
the summed RSS of the CLI process and all its children every 0.2 s.
Usage: python benchmarks/fit_memory.py [--sizes 2500000 10000000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil


def write(directory: Path, n: int, d: int = 7, per_file: int = 1_250_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    directory.mkdir()
    for i, start in enumerate(range(0, n, per_file)):
        X = rng.normal(size=(min(per_file, n - start), d))
        pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(d)}), directory / f"p{i:03d}.parquet",
                       row_group_size=125_000)


def peak_rss(cmd: list[str]) -> tuple[float, float, int]:
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak, t0 = 0, time.perf_counter()
    while proc.poll() is None:
        try:
            procs = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    return peak / 2**30, time.perf_counter() - t0, proc.returncode


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[2_500_000, 10_000_000])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tgpflow-mem-") as tmp:
        for n in args.sizes:
            data = Path(tmp) / f"n{n}"
            write(data, n)
            gib, secs, rc = peak_rss([sys.executable, "-m", "tgpflow.cli", "fit", f"{data}/*.parquet", "--model", "fvpd",
                                      "--out", str(Path(tmp) / f"m{n}.zarr"), "--progress", "none"])
            print(f"N={n:,}: peak RSS of the process tree {gib:.2f} GiB, {secs:.0f} s, exit {rc}", flush=True)


if __name__ == "__main__":
    main()
