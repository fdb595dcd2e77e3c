"""The demos' synthetic data: a 3-D, three-component Gaussian mixture with a curved component, written
as Parquet files (``python -m tgpflow.demo``, ``python -m tgpflow.pipeline.demo``, and the tests and
benchmarks that compare against the demo's data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["mixture_rows", "make_dataset"]


def mixture_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows of the demo's 3-D, three-component Gaussian mixture with a curved component."""
    k = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    X = rng.normal(size=(n, 3))
    X[k == 0] = X[k == 0] @ np.array([[1.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.0, 0.0, 0.5]])
    X[k == 1] = X[k == 1] * 0.4 + [3.0, -1.0, 1.0]
    banana = X[k == 2] * [1.5, 0.3, 0.3]
    banana[:, 1] += 0.3 * banana[:, 0] ** 2 - 2.0
    X[k == 2] = banana
    return X


def make_dataset(directory: Path, n_rows: int = 1_000_000, n_files: int = 8, seed: int = 0) -> list[str]:
    """The mixture (:func:`mixture_rows`) as Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    per = n_rows // n_files
    names = ["x", "y", "z"]
    for i in range(n_files):
        X = mixture_rows(per, rng)
        pq.write_table(pa.table({n: X[:, j] for j, n in enumerate(names)}), directory / f"part-{i:03d}.parquet",
                       row_group_size=62_500)
    return names
