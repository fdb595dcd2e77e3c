"""The demo job: ~1M rows of synthetic multi-partition Parquet → FVPD on a LocalCluster.

``python -m tgpflow.demo`` (or ``make demo``) writes the data to a temporary directory, fits FVPD
through the same code path as ``tgpflow fit`` on an embedded LocalCluster (λ and γ selected on
held-out rows), saves the model to ``./demo-model.zarr`` and ends with the check that its samples
match held-out rows (:func:`tgpflow.metrics.sample_check`). It prints a short account on stderr —
the data written, the cluster and its dashboard, a progress bar per pass (on a terminal), the fit's time and rate,
the model's path and diagnostics, the sample check with the model's mean and spread beside the
data's — and the summary as JSON on stdout (for scripts). Nothing outside the package is needed.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tgpflow.io.demo_data import make_dataset

#: Rows and Parquet files of the demo data; held-out rows for the sample check (a separate seed); S.
ROWS, FILES, HELD_OUT_ROWS, N_FEATURES = 1_000_000, 8, 20_000, 1000


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> int:
    # tgpflow's own warnings (a failed diagnostic) are the only log lines; distributed's INFO lines
    # (worker start-up, the scheduler's address) are not part of the story
    import distributed  # noqa: F401 — configures its loggers at import (INFO); quieted below

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # errors only: at INFO it narrates every worker's start; its warnings here were the nannies' "still
    # alive after 4 s, killing" as the cluster closes on a loaded machine
    logging.getLogger("distributed").setLevel(logging.ERROR)
    out = Path("demo-model.zarr")
    with tempfile.TemporaryDirectory(prefix="tgpflow-demo-") as tmp:
        t0 = time.perf_counter()
        names = make_dataset(Path(tmp), n_rows=ROWS, n_files=FILES)
        say(f"wrote {ROWS:,} rows × {len(names)} columns in {FILES} Parquet files to {tmp} "
            f"({time.perf_counter() - t0:.1f} s)")
        est, fit_s = _fit(f"{tmp}/*.parquet")
        est.save(out)
        say(f"fit: {est.n_samples_seen_:,} rows in {fit_s:.1f} s ({est.n_samples_seen_ / fit_s:,.0f} rows/s); "
            f"γ {est.bandwidth_:.3g}, λ {est.lam_:.3g}, η {est.eta_:.3g} selected on held-out rows")
        diag = est.fit_diagnostics_
        say(f"model saved to {out.resolve()}; normaliser ESS {100 * diag['ess_fraction']:.1f}% of its proposals, "
            f"mass outside the training rows' box {100 * diag['mass_outside']:.2f}% "
            f"(limit {100 * diag['mass_outside_limit']:.1f}%)")
        held_out = Path(tmp) / "held-out"
        held_out.mkdir()
        make_dataset(held_out, n_rows=HELD_OUT_ROWS, n_files=1, seed=1)
        summary, check = _check(est, held_out, names)
    summary.update(model=str(out), fit_seconds=round(fit_s, 1), rows_per_second=round(est.n_samples_seen_ / fit_s))
    print(json.dumps(summary, indent=2))
    return 0 if check.passed else 1


def _fit(path: str) -> tuple[Any, float]:
    """FVPD with the defaults on an embedded LocalCluster (its dashboard when Bokeh is installed), a
    progress bar per pass; returns the estimator and the fit's seconds."""
    from tgpflow import GPTiltedDensity
    from tgpflow.cluster import dashboard_link, dask_client, progress_display

    with dask_client(local="cluster", dashboard=True) as client, progress_display("auto", client) as progress:
        link = dashboard_link(client)
        say(f"LocalCluster: {len(client.scheduler_info()['workers'])} worker processes × 1 thread; "
            + (f"dashboard {link}" if link else "no dashboard (pip install bokeh for one)"))
        t = time.perf_counter()
        est = GPTiltedDensity(method="fvpd", n_features=N_FEATURES, random_state=0).fit(path, progress=progress)
        return est, time.perf_counter() - t


def _check(est: Any, held_out: Path, names: list[str]) -> tuple[dict[str, Any], Any]:
    """The sample check against held-out rows (printed), and the JSON summary."""
    import pandas as pd

    from tgpflow.metrics import sample_check

    test = pd.read_parquet(held_out)[names]
    draws = est.sample(HELD_OUT_ROWS, random_state=0)
    check = sample_check(est, test, samples=draws, ess_fraction=est.last_sample_info_["ess_fraction"],
                         max_ks=0.04)
    X = test.to_numpy()
    say(f"sample check, {HELD_OUT_ROWS:,} model samples against {len(X):,} held-out rows: "
        + ("PASSED" if check.passed else "FAILED"))
    for line in check.lines():
        say("  " + line)
    say(f"  {'':6s} {'data mean':>10s} {'model mean':>11s} {'data sd':>8s} {'model sd':>9s}")
    for j, name in enumerate(names):
        say(f"  {name:6s} {X[:, j].mean():10.3f} {draws[:, j].mean():11.3f} {X[:, j].std():8.3f} "
            f"{draws[:, j].std():9.3f}")
    summary = {
        "method": "fvpd", "rows": est.n_samples_seen_, "n_features": est.n_features,
        "selected": {"lam": est.lam_, "eta": est.eta_, "bandwidth": est.bandwidth_},
        "held_out_log_density_finite": bool(np.all(np.isfinite(est.log_density(test)))),
        "data_mean": X.mean(0).round(3).tolist(), "sample_mean": draws.mean(0).round(3).tolist(),
        "data_std": X.std(0).round(3).tolist(), "sample_std": draws.std(0).round(3).tolist(),
        "sample_ess": round(est.last_sample_ess_),
        "diagnostics": {k: est.fit_diagnostics_[k] for k in ("ess_fraction", "mass_outside", "mass_outside_limit",
                                                             "warnings")},
        "sample_check": {"passed": bool(check.passed), "lines": check.lines()},
        "solver": est.solver_info_,
    }
    return summary, check


if __name__ == "__main__":
    sys.exit(main())
