"""The demo job: ~1M rows of synthetic multi-partition Parquet → FVPD on a LocalCluster.

``python -m tgpflow.demo`` (or ``make demo``) writes the data to a temporary directory,
fits FVPD through the same code path as ``tgpflow fit`` on an embedded LocalCluster,
prints a summary and saves the model to ``./demo-model.zarr``. Nothing outside the
package is needed.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_dataset(directory: Path, n_rows: int = 1_000_000, n_files: int = 8, seed: int = 0) -> list[str]:
    """A 3-D, three-component Gaussian mixture with a curved component, as Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    per = n_rows // n_files
    names = ["x", "y", "z"]
    for i in range(n_files):
        k = rng.choice(3, size=per, p=[0.5, 0.3, 0.2])
        X = rng.normal(size=(per, 3))
        X[k == 0] = X[k == 0] @ np.array([[1.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.0, 0.0, 0.5]])
        X[k == 1] = X[k == 1] * 0.4 + [3.0, -1.0, 1.0]
        banana = X[k == 2] * [1.5, 0.3, 0.3]
        banana[:, 1] += 0.3 * banana[:, 0] ** 2 - 2.0
        X[k == 2] = banana
        pq.write_table(pa.table({n: X[:, j] for j, n in enumerate(names)}), directory / f"part-{i:03d}.parquet",
                       row_group_size=62_500)
    return names


def main() -> int:
    from tgpflow import GPTiltedDensity
    from tgpflow.cluster import dask_client

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = Path("demo-model.zarr")
    with tempfile.TemporaryDirectory(prefix="tgpflow-demo-") as tmp:
        t0 = time.perf_counter()
        make_dataset(Path(tmp))
        print(f"wrote 1,000,000 rows in 8 Parquet files ({time.perf_counter() - t0:.1f} s) to {tmp}", file=sys.stderr)
        with dask_client(local="cluster") as client:
            print(f"dashboard-less LocalCluster with {len(client.scheduler_info()['workers'])} workers", file=sys.stderr)
            t1 = time.perf_counter()
            est = GPTiltedDensity(method="fvpd", n_features=1000, random_state=0).fit(f"{tmp}/*.parquet")
            fit_s = time.perf_counter() - t1
        est.save(out)
        held_out = Path(tmp) / "held-out"
        held_out.mkdir()
        make_dataset(held_out, n_rows=20_000, n_files=1, seed=1)
        import pandas as pd

        test = pd.read_parquet(held_out).to_numpy()
        draws = est.sample(20_000, random_state=0)
        summary = {
            "model": str(out), "method": "fvpd", "rows": est.n_samples_seen_, "n_features": 1000,
            "bandwidth": round(est.bandwidth_, 5), "fit_seconds": round(fit_s, 1),
            "rows_per_second": round(est.n_samples_seen_ / fit_s),
            "held_out_log_density_finite": bool(np.all(np.isfinite(est.log_density(test)))),
            "data_mean": test.mean(0).round(3).tolist(), "sample_mean": draws.mean(0).round(3).tolist(),
            "data_std": test.std(0).round(3).tolist(), "sample_std": draws.std(0).round(3).tolist(),
            "sample_ess": round(est.last_sample_ess_),
            "solver": est.solver_info_,
        }
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
