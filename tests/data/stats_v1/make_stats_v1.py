"""Writes the statistics artifacts of this folder: one of each statistics kind, in the layout tgpflow wrote
before the statistics-algebra base (issue 16; generated with commit f98e7ed). ``tests/test_stats_algebra.py``
loads them with the current code and compares them, bit for bit, with the same statistics computed again.

Run from the repository root against the tgpflow that should write them: ``python tests/data/stats_v1/make_stats_v1.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.io.artifact import write_artifact
from tgpflow.stats.kde_sdo import kde_sdo_chunk_stats
from tgpflow.stats.kef import diag_chunk_stats, kef_chunk_stats, lite_chunk_stats
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.split import split_chunk_stats
from tgpflow.stats.tgp import tgp_chunk_stats

HERE = Path(__file__).resolve().parent
SIGMAS = np.array([0.0, 0.3, 0.6])


def inputs() -> tuple[np.ndarray, RandomFourierFeatures, NystromBasis, ProjectionGrid]:
    """The rows, feature draw, Nyström basis and projection grid every file is computed from."""
    X = np.random.default_rng(16).normal(size=(61, 2)) + [1.0, -0.5]
    features = RandomFourierFeatures.draw(8, bandwidth=0.9, n_dims=2, shift=X.mean(axis=0), random_state=0)
    basis = NystromBasis(X[:4], 1.2, "gaussian", X.mean(axis=0))
    grid = ProjectionGrid.from_rows(X, n_directions=3, n_bins=8, random_state=0)
    return X, features, basis, grid


def stats_v1() -> dict[str, object]:
    """File name → the statistics value it holds."""
    X, features, basis, grid = inputs()
    bundle = split_chunk_stats(X, np.arange(61), 0.3, 7, tgp_chunk_stats, {0: (features,)}, grid=grid)
    return {
        "tgp.npz": tgp_chunk_stats(X, features, with_phi_gram=True),
        "tgp_weighted.npz": tgp_chunk_stats(X, features).scaled(0.5),  # float n: 30.5
        "ncfd.npz": ncfd_chunk_stats(X, features, SIGMAS),
        "kde_sdo.npz": kde_sdo_chunk_stats(X, features),
        "kde_sdo_weighted.npz": kde_sdo_chunk_stats(X, features).scaled(0.5),
        "kef.npz": kef_chunk_stats(X, basis),
        "lite.npz": lite_chunk_stats(X, basis),
        "diag.npz": diag_chunk_stats(X, basis),
        "bundle.npz": bundle,
    }


def main() -> None:
    for name, stats in stats_v1().items():
        if name == "bundle.npz":  # as tgpflow.pipeline.store.StatsStore.save writes a bundle
            meta = {"fingerprint": stats.fingerprint, **stats.artifact_meta()}
            write_artifact(HERE / name, "StatsBundle", stats.to_arrays(), meta)
        else:
            stats.save(HERE / name)


if __name__ == "__main__":
    main()
