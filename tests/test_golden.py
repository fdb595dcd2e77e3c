"""Behaviour fixed before a refactor (issue 41): every estimator's model file, log density, score and statistics.

``tests/make_golden.py`` wrote, with the code of 2026-11-28, one small seeded fit of every ``tgpflow fit
--model`` value: its model file and its figures (log density and score at held-out rows, the statistics' arrays).
Here the stored files are loaded and must evaluate to the stored figures (files written before load after), and the
same fits are made again and must give the same figures (the fit itself unchanged). Equal up to float64 rounding:
relative 1e-6 and absolute 1e-9 of the array's largest value. On the machine that wrote them the figures agree to
the last bit; OpenBLAS's kernels for other CPUs (OPENBLAS_CORETYPE=Haswell or Prescott there) move the kernel score
estimators' scores by up to 3e-7 relative, 1.6e-8 absolute, and NumPy's AVX-512 code by 5e-15 of the largest
value (tests/data/golden/README.md). A change of behaviour moves them by far more.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tgpflow
from tests import make_golden
from tests.make_golden import GOLDEN

RTOL, ATOL = 1e-6, 1e-9


def _close(now: np.ndarray, then: np.ndarray, what: str) -> None:
    scale = max(float(np.abs(then[np.isfinite(then)]).max(initial=0.0)), 1e-3)  # ±inf (no mass) must match as is
    np.testing.assert_allclose(now, then, rtol=RTOL, atol=ATOL * scale, err_msg=what)


def _stored(case: str) -> dict[str, np.ndarray]:
    with np.load(GOLDEN / f"{case}.figures.npz", allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _model_files(case: str) -> list[Path]:
    return [GOLDEN / f"{case}.model.npz"] + ([GOLDEN / f"{case}.model.zarr"] if case in make_golden.ZARR_CASES else [])


@pytest.mark.parametrize("case", list(make_golden.CASES))
def test_a_stored_model_file_loads_and_evaluates_as_it_did(case):
    stored = _stored(case)
    for path in _model_files(case):
        model = tgpflow.load(path)
        assert type(model).__name__ == make_golden.CASES[case][0]
        x = make_golden.probe()
        _close(model.grad_log_density(x), stored["score"], f"{path.name}: score")
        if "log_density" in stored:
            _close(model.log_density(x), stored["log_density"], f"{path.name}: log density")


@pytest.mark.parametrize("case", list(make_golden.CASES))
def test_the_same_fit_gives_the_same_model_and_statistics(case):
    stored = _stored(case)
    now = make_golden.figures(make_golden.fit(case))
    assert sorted(now) == sorted(stored)
    for key, value in stored.items():
        _close(now[key], value, f"{case}: {key}")
