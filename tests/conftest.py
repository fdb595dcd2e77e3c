"""Shared fixtures: small datasets, fsspec's memory filesystem, Parquet writers, a directory hash, the shared
real data, GPU skipping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

#: Real datasets copied into the repository with their licences and provenance (tests/data/README.md).
TEST_DATA = Path(__file__).resolve().parent / "data"
#: pytest filter for the anomaly threshold's warning that some of the rows it is learned from have zero density
#: (tgpflow.models.anomaly.anomaly_threshold), for tests of small noisy fits that check something else.
ZERO_DENSITY_ROWS = "ignore:.*zero or undefined density under the model:tgpflow.errors.DiagnosticWarning"


def two_blobs(rng: np.random.Generator, n: int, n_features: int) -> tuple[np.ndarray, Any]:
    """``n`` rows in d = 3 (70 % N(0, I), 30 % N(2, ¼I)) and a feature draw for them (γ = 0.8, seed 3): the device
    tests' data (tests/test_device_path.py, tests/test_gpu.py)."""
    from tgpflow import RandomFourierFeatures

    rows = np.vstack([rng.normal(size=(n * 7 // 10, 3)), rng.normal(size=(n - n * 7 // 10, 3)) * 0.5 + 2.0])
    return rows, RandomFourierFeatures.draw(n_features, bandwidth=0.8, n_dims=3, shift=rows.mean(0), random_state=3)


@pytest.fixture
def blobs(rng, request):
    """:func:`two_blobs` of the size the requesting module names in ``BLOBS = (rows, features)``."""
    return two_blobs(rng, *request.module.BLOBS)


@pytest.fixture
def rows(blobs):
    return blobs[0]


@pytest.fixture
def draw(blobs):
    return blobs[1]


def pytest_collection_modifyitems(config, items):
    from tgpflow.core.backend import gpu_visible

    if gpu_visible():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (CuPy missing or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def mem() -> Any:
    """fsspec's in-memory filesystem (``memory://``), empty before and after each test (its store is
    process-wide)."""
    import fsspec

    fs = fsspec.filesystem("memory")

    def clear() -> None:
        fs.store.clear()
        fs.pseudo_dirs[:] = [""]

    clear()
    yield fs
    clear()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def gaussian_mix(rng) -> np.ndarray:
    """600 rows, d = 2: a correlated two-component mixture (non-Gaussian, so θ ≠ 0)."""
    a = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.6], [0.6, 1.0]], size=400)
    b = rng.multivariate_normal([2.5, -1.0], [[0.3, 0.0], [0.0, 0.5]], size=200)
    return np.concatenate([a, b])


def write_parquet(path: Path, X: np.ndarray, names=None, row_group_size: int | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = names or [f"x{j}" for j in range(X.shape[1])]
    pq.write_table(pa.table({n: X[:, j] for j, n in enumerate(names)}), path, row_group_size=row_group_size)
    return path


@pytest.fixture
def magic_frame():
    """MAGIC's 10 float columns as a pandas DataFrame, as shipped."""
    path = TEST_DATA / "magic_gamma.parquet"
    import pandas as pd

    return pd.read_parquet(path).drop(columns="class")


@pytest.fixture
def magic(magic_frame) -> np.ndarray:
    X = magic_frame.to_numpy()
    return X - X.mean(axis=0)


@pytest.fixture(scope="session")
def v1_dir(tmp_path_factory) -> Path:
    """Statistics files in the layout written before statistics carried their draw (tests/legacy_stats.py)."""
    from tests.legacy_stats import write_v1

    return write_v1(tmp_path_factory.mktemp("stats_v1"))
