"""Writes the layout-1 model files of ``test_load.py`` (run once, with the tgpflow that wrote them).

These files were written by tgpflow at commit f8fcc33, the last release whose model files stored
the solution beside the statistics and re-solved them on load (model layout 1). Beside each model,
``expected.npz`` holds what that tgpflow's own loaded model returned at fixed rows: the log density,
the score and the Hyvärinen terms. Do not regenerate them with a later tgpflow: they are the oracle
that old files still load to the same model.

    PYTHONPATH=<a checkout of f8fcc33> python tests/data/legacy_models/make.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

import tgpflow
from tgpflow import GPTiltedDensity, NystromKEF, RootSobolevDensity, ScoreEstimator

HERE = Path(__file__).resolve().parent


def data() -> np.ndarray:
    rng = np.random.default_rng(7)
    a = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.6], [0.6, 1.0]], size=200)
    b = rng.multivariate_normal([2.5, -1.0], [[0.3, 0.0], [0.0, 0.5]], size=100)
    return np.concatenate([a, b])


def models() -> dict[str, object]:
    common = dict(n_features=16, lam=0.5, bandwidth=0.8, normalizer_draws=2000)
    return {
        "fd": GPTiltedDensity(method="fd", **common),
        "ncfd": GPTiltedDensity(method="ncfd", noise_levels=3, **common),
        "fvpd": GPTiltedDensity(method="fvpd", **common),
        "map": GPTiltedDensity(method="map", map_draws=3000, **common),
        "kde_rff": GPTiltedDensity(method="kde_rff", n_features=16, bandwidth=0.8),
        "fd_learn": GPTiltedDensity(method="fd", base="learn", **common),
        "fd_bounded": GPTiltedDensity(method="fd", bounds=[(-6.0, None), (None, None)], **common),
        "nkef": NystromKEF(n_basis=10, base="gaussian", lam=1e-2),
        "lite": NystromKEF(n_basis=10, lite=True, lam=1e-2),
        "stein": ScoreEstimator.preset("stein", n_basis=10, lam=1e-2),
        "rsr": RootSobolevDensity(n_features=40, max_iter=20),
    }


def main() -> None:
    X = data()
    rows = X[::30] + 0.05
    expected = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, est in models().items():
            est.fit(X)
            path = est.save(HERE / f"{name}.npz")
            back = tgpflow.load(path)
            if hasattr(back, "log_density") and not (isinstance(back, ScoreEstimator)
                                                     and not isinstance(back, NystromKEF)):
                expected[f"{name}.log_density"] = np.asarray(back.log_density(rows))
            expected[f"{name}.grad_log_density"] = np.asarray(back.grad_log_density(rows))
            expected[f"{name}.hyvarinen_terms"] = np.asarray(back.hyvarinen_terms(rows))
    np.savez(HERE / "expected.npz", rows=rows, **expected)


if __name__ == "__main__":
    main()
