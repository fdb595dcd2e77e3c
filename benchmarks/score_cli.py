"""`tgpflow score` from Parquet against in-memory scoring of the same rows (issue 20, item 4).

Writes ``--rows`` rows of the demo mixture as 8 Parquet files in a temporary directory, fits each method on
its first 100 000 rows (fixed λ = 1, γ = 0.5, S = 1000: the benchmark is about evaluation, not selection),
then, on the threaded scheduler, times (a) the whole ``tgpflow score MODEL 'dir/*.parquet' --out DIR`` command
as a user runs it (a fresh interpreter: imports, reading, scoring, the atomic Parquet write) and (b)
``score_samples`` on the same rows already in memory, in the same run, and (c) the command on a file of 1 000
rows: its fixed cost (interpreter start, imports, model load), so that (a) − (c) is the time the rows stream in.
Prints seconds, rows/s, the ratio (a)/(b) and the streaming rate's ratio to (b) per method, then one JSON line.
Usage: python benchmarks/score_cli.py [--rows 1000000] [--methods fd,fvpd]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    import pandas as pd

    import tgpflow
    from tgpflow import GPTiltedDensity
    from tgpflow.io.demo_data import make_dataset

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--methods", default="fd,fvpd")
    args = p.parse_args()
    cli = str(Path(sys.executable).with_name("tgpflow"))
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tgpflow-score-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        make_dataset(data, n_rows=args.rows, n_files=8)
        X = pd.read_parquet(data)
        tiny = Path(tmp) / "tiny.parquet"
        X.iloc[:1000].to_parquet(tiny, index=False)
        print(f"load average {os.getloadavg()[0]:.2f}; {len(X):,} rows in 8 Parquet files", file=sys.stderr)
        for method in args.methods.split(","):
            model = Path(tmp) / f"{method}.zarr"
            GPTiltedDensity(method=method, n_features=1000, lam=1.0, bandwidth=0.5, random_state=0).fit(
                X.iloc[:100_000]).save(model)
            def run_cli(source: str, name: str) -> float:
                t = time.perf_counter()
                subprocess.run([cli, "--log-level", "WARNING", "score", str(model), source,
                                "--out", str(Path(tmp) / name), "--progress", "none"], check=True, capture_output=True)
                return time.perf_counter() - t

            t_cli = run_cli(f"{data}/*.parquet", f"scores-{method}")
            t_fixed = run_cli(str(tiny), f"scores-tiny-{method}")  # the command's fixed cost: start, imports, load
            est = tgpflow.load(model)
            t = time.perf_counter()
            est.score_samples(X)
            t_mem = time.perf_counter() - t
            streamed = len(X) / max(t_cli - t_fixed, 1e-9)  # rows/s beyond the fixed cost
            out[method] = {"cli_seconds": round(t_cli, 2), "in_memory_seconds": round(t_mem, 2),
                           "cli_rows_s": round(len(X) / t_cli), "in_memory_rows_s": round(len(X) / t_mem),
                           "ratio_cli_to_in_memory": round(t_cli / t_mem, 3), "cli_fixed_seconds": round(t_fixed, 2),
                           "cli_streaming_rows_s": round(streamed), "ratio_streaming_to_in_memory":
                           round(streamed / (len(X) / t_mem), 3)}
            print(f"{method:5s} tgpflow score {t_cli:6.2f} s ({len(X) / t_cli:,.0f} rows/s); in memory "
                  f"{t_mem:6.2f} s ({len(X) / t_mem:,.0f} rows/s); ratio {t_cli / t_mem:.2f}; fixed cost (1,000 rows) "
                  f"{t_fixed:.2f} s, so it streams at {streamed:,.0f} rows/s = {streamed * t_mem / len(X):.2f} of the "
                  f"in-memory rate", file=sys.stderr)
    print(json.dumps({"rows": args.rows, "methods": out}))


if __name__ == "__main__":
    main()
