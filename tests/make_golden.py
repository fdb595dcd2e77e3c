"""Write the golden fits that fix every estimator's behaviour before a refactor (issue 41's "behaviour unchanged").

For every ``tgpflow fit --model`` value, one small seeded fit on :func:`rows` with the parameters of
:data:`CASES`; written under ``tests/data/golden/``: the model file as ``save`` writes it (``<case>.model.npz``, one
file each, and the default Zarr container for ``fd``: ``fd.model.zarr``) and ``<case>.figures.npz`` with the log
density and score at :func:`probe` rows and the arrays of the fit's statistics.
``tests/test_golden.py`` loads the stored files and refits the cases with the code of the day, and asserts both
equal these (to float64 rounding). What they do not fix: the CLI and the Parquet/Zarr readers (the fits take a
NumPy array), the normaliser, samples and diagnostics (log densities are compared unnormalised). Run it only to
fix a new behaviour on purpose (and say so in the commit):

    python -m tests.make_golden
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

#: Where the golden files live (tests/data/golden, with its README: provenance and licence).
GOLDEN = Path(__file__).resolve().parent / "data" / "golden"

#: case → (estimator class name, its parameters): every ``tgpflow fit --model`` value, on the paths a default takes
#: (γ and λ selected, the mixture base, the pilot's column kinds) with sizes kept small.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "fd": ("GPTiltedDensity", {"method": "fd", "n_features": 32}),
    "ncfd": ("GPTiltedDensity", {"method": "ncfd", "n_features": 32}),
    "fvpd": ("GPTiltedDensity", {"method": "fvpd", "n_features": 32}),
    "map": ("GPTiltedDensity", {"method": "map", "n_features": 32}),
    "kde_rff": ("GPTiltedDensity", {"method": "kde_rff", "n_features": 32}),
    "fd_gaussian_fixed": ("GPTiltedDensity", {"method": "fd", "n_features": 32, "base": "empirical", "lam": 0.1,
                                              "bandwidth": 1.0, "discrete": None, "bounds": None}),
    "nkef": ("NystromKEF", {"n_basis": 40}),
    "score": ("ScoreEstimator", {"n_basis": 40}),
    "rsr": ("RootSobolevDensity", {"method": "rsr", "n_features": 64, "max_iter": 50}),
    "kde_sdo": ("RootSobolevDensity", {"method": "kde_sdo", "n_features": 64}),
}

#: The cases also written in the default Zarr container.
ZARR_CASES = ("fd",)


def rows(n: int = 1200, seed: int = 0) -> np.ndarray:
    """Three columns as a real table has them: a two-bump continuous column, a lognormal one, an integer code 0–6."""
    rng = np.random.default_rng(seed)
    bump = np.where(rng.random(n) < 0.4, rng.normal(-1.5, 0.5, n), rng.normal(1.0, 0.8, n))
    return np.column_stack([bump, rng.lognormal(0.0, 0.5, n), rng.integers(0, 7, n).astype(float)])


def probe() -> np.ndarray:
    """Rows the log density and score are fixed at: held-out rows of the same law."""
    return rows(60, seed=1)


def fit(case: str) -> Any:
    import tgpflow

    kind, params = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(tgpflow, kind)(random_state=0, **params).fit(rows())


def figures(est: Any) -> dict[str, np.ndarray]:
    """What is fixed of a fit: log density and score at the probe rows, the statistics' arrays (``stats/…``)."""
    x = probe()
    out = {"score": np.asarray(est.grad_log_density(x), dtype=np.float64)}
    if hasattr(est, "log_density"):  # a score estimator has none
        out["log_density"] = np.asarray(est.log_density(x), dtype=np.float64)
    stats = getattr(est, "stats_", None)
    if stats is not None:
        out.update({f"stats/{k}": np.asarray(v) for k, v in stats.to_arrays().items()})
    return out


def main(cases: list[str]) -> None:
    """Write the golden files of ``cases`` (all of them when none is named: ``python -m tests.make_golden fd``)."""
    for case in cases or CASES:
        est = fit(case)
        est.save(GOLDEN / f"{case}.model.npz")
        if case in ZARR_CASES:
            target = GOLDEN / f"{case}.model.zarr"
            if target.exists():
                shutil.rmtree(target)
            est.save(target)
        np.savez_compressed(GOLDEN / f"{case}.figures.npz", **figures(est))
        print(case, "written")


if __name__ == "__main__":
    main(sys.argv[1:])
