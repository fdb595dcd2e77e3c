"""What the drift step costs a run (docs/drift.md; target: at most 10 % of the run's time at 1M rows per partition).

A store is built from one partition of ``--rows`` rows (eight columns: five correlated Gaussians, an integer hour,
a zero-inflated meter read to 0.001, a flag), with the default GP-tilted model (``method: fd``) and scores. Then a
second partition of the same size arrives, and that incremental run — statistics of the new partition, the drift
sums (binning, projections, the previous version's log-likelihood), the verdict, the solve, the scoring — is timed
``--repeats`` times from a copy of the store, alternately with the drift step and with its per-chunk sums replaced
by empty ones (the run otherwise unchanged). The ratio (with − without) / with is the drift step's share of the run,
measured in the same process on the same files; a smaller model (``--features``) makes the drift step's share larger.
Usage: python benchmarks/drift_cost.py [--rows 1000000] [--repeats 3] [--features S]

Measured on the development machine (2 cores), 2026-11-29, ``--rows 1000000 --repeats 1 --features 256`` with the
test suite running beside it: 387.9 s with the drift step, 364.0 s without: share 0.062. Before the log-likelihoods
were read on about 20 000 rows per partition, a pair measured 405 s and 256 s (other benchmarks beside it): the
previous version's log density of every row (three lattice columns: 49 s per 125 000 rows) was most of the step.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

COLUMNS = ["a", "b", "c", "d", "e", "hour", "meter", "flag"]


def _table(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[:, 1] += 0.5 * X[:, 0]
    meter = np.round(np.where(rng.random(n) < 0.6, 0.0, rng.lognormal(1.0, 0.5, n)), 3)
    cols = {c: X[:, j] for j, c in enumerate("abcde")}
    return {**cols, "hour": rng.integers(0, 24, n).astype(float), "meter": meter,
            "flag": (rng.random(n) < 0.1).astype(float)}


def main() -> None:
    import dask
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tgpflow.pipeline import drift_step
    from tgpflow.pipeline.drift_sums import chunk_sums
    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--features", type=int, default=None, help="n_features of the model (default: the estimator's)")
    args = ap.parse_args()
    logging.getLogger("tgpflow").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="tgpflow-drift-cost-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        pq.write_table(pa.table(_table(args.rows, 0)), root / "data" / "d000.parquet", row_group_size=125_000)
        raw = {"name": "cost", "source": {"path": str(root / "data" / "*.parquet")},
               "preprocess": {"center": True, "scale": True},
               "models": [{"name": "fd", "estimator": "GPTiltedDensity",
                           "params": {"method": "fd", **({"n_features": args.features} if args.features else {})}}],
               "outputs": {"store": str(root / "store.zarr"), "models": str(root / "models"),
                           "scores": {"path": str(root / "scores"), "model": "fd"}}}
        (root / "spec.yaml").write_text(yaml.safe_dump(raw))
        spec = load_spec(root / "spec.yaml")
        t = time.perf_counter()
        run_pipeline(spec, date="2026-01-01")
        print(f"first run (store built from {args.rows:,} rows): {time.perf_counter() - t:.1f} s", flush=True)
        for name in ("store.zarr", "models", "scores"):
            shutil.copytree(root / name, root / f"{name}.snapshot")
        pq.write_table(pa.table(_table(args.rows, 1)), root / "data" / "d001.parquet", row_group_size=125_000)

        real_task = drift_step.DriftPass.task

        def empty_task(self, src, split_every):  # the drift sums of no rows: the run's other steps unchanged
            return dask.delayed(chunk_sums, pure=True)(np.empty((0, len(self.frame.columns))), self.frame, self.models)

        times: dict[str, list[float]] = {"with": [], "without": []}
        for rep in range(args.repeats):
            for mode in ("with", "without"):
                for name in ("store.zarr", "models", "scores"):
                    shutil.rmtree(root / name, ignore_errors=True)
                    shutil.copytree(root / f"{name}.snapshot", root / name)
                drift_step.DriftPass.task = real_task if mode == "with" else empty_task
                t = time.perf_counter()
                result = run_pipeline(spec, date="2026-01-02")
                times[mode].append(time.perf_counter() - t)
                if mode == "with" and rep == 0:
                    v = result["drift"]["d001.parquet"]
                    print(f"  verdict of the new partition: drifted {v['drifted']}, p {v['p_value']:.3g}, "
                          f"z {v['z']}", flush=True)
                print(f"  repeat {rep + 1} {mode} the drift step: {times[mode][-1]:.2f} s", flush=True)
        drift_step.DriftPass.task = real_task
        with_, without = statistics.median(times["with"]), statistics.median(times["without"])
        print(f"incremental run of a {args.rows:,}-row partition: {with_:.2f} s with the drift step, {without:.2f} s "
              f"without (medians of {args.repeats}); drift share (with − without) / with = "
              f"{(with_ - without) / with_:.3f} (target ≤ 0.10)")


if __name__ == "__main__":
    main()
