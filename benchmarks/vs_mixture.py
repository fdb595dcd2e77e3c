"""Against what users already have: every default GP-tilted method beside a tuned GaussianMixture, on held-out rows.

For each table, an 80/20 split (seed 0); the reference models see rows standardized with the training part's mean and
standard deviation, and tgpflow the table's own values, as a user would fit them (``--units data``; its
``bounds="auto"`` finds edges at 0 and 1 there), its log-densities moved to the standardized units by the Jacobian Σ
log sd (``--units standardized``: it fits the standardized rows too). Fitted on the training part: each GP-tilted
method with its defaults (γ and λ selected on held-out rows of the training part), scikit-learn's ``GaussianMixture``
(full covariances) with K chosen from ``--k-grid`` by the log-likelihood of a validation fifth of the training part
and refitted on all of it, and one Gaussian. Printed per model, on the held-out 20 %: the normalised log-likelihood
(nats/row; tgpflow's from its importance-sampled log Z), the median sliced KS and WD between 50 000 of the model's
samples and the held-out rows (500 directions), its fit health (ESS of the proposal draws, normalised mass outside the
[0.1 %, 99.9 %] quantile box of the training rows; for the GaussianMixture, the share of its draws outside that box of
its own training rows), fit time and the criteria of tgpflow's sample check (``tgpflow.metrics.sample_check``, in the
data's units: "ok", or those that failed); beside them the two-halves floor (the sliced KS|WD between two halves of
the held-out rows) and the ratios to the mixture. On tables with lattice columns (integer codes, rounded values:
``tgpflow.io.column_kinds``) the log-likelihoods are those of rows dequantized by uniform noise over each lattice cell
(the mixture fitted on them too; both scored on them); the sliced distances use the raw held-out rows. Likewise a
point mass at the edge of a continuous column (≥ 1 % of the rows at its minimum or maximum: cardio's, thyroid's) is
spread uniformly over the block that tgpflow's atom model puts beyond it, for the mixture's fit and for both models'
scores; tgpflow reads those rows back at the atom. With ``--discrete auto`` (the default) tgpflow fits the raw rows
with its default ``discrete="auto"``: its coarse lattices are modelled as discrete (dequantized in the fit, a row's
density its cell's average, samples rounded; docs/gp_tilted.md); ``--discrete none`` fits it on the dequantized rows
too, with ``discrete=None``.

Tables: MAGIC (``tests/data/magic_gamma.parquet``, its 10 float columns), ``meters`` (synthetic: 7
columns of a household meter table: three zero-inflated sub-meters, values recorded to 3 decimals),
``rental`` (synthetic: hour, weekday, month codes, two binary flags, two skewed counts), and with
``--adbench`` the ADBench development sets (their X only; their folder from ``--adbench-dir`` or
``TGPFLOW_ADBENCH_DIR``: they are not in the repository).

Each method is fitted on every base of ``--bases`` (``base=``: "empirical", the Gaussian of the data's moments,
and "mixture", a Gaussian mixture fitted on the pilot under the tilt; docs/gp_tilted.md).

Usage: python benchmarks/vs_mixture.py [--tables magic,meters,rental] [--methods fd,ncfd,fvpd] [--k-grid 1,2,4,...]
       [--bases empirical,mixture] [--discrete auto|none] [--bounds auto|none] [--units data|standardized]
       [--adbench [letter,cardio,...]] [--splits R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks.datasets import MAGIC, adbench_files
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from datasets import MAGIC, adbench_files


def magic() -> np.ndarray:
    import pandas as pd

    return pd.read_parquet(MAGIC).drop(columns="class").to_numpy(np.float64)


def meters(n: int = 60_000, seed: int = 0) -> np.ndarray:
    """Active/reactive power, voltage, intensity and three sub-meters that read exactly 0 most of the time,
    every value recorded to 3 decimals (the household meter table's shape)."""
    rng = np.random.default_rng(seed)
    active = rng.lognormal(0.0, 0.8, n)
    reactive = np.abs(0.1 * active + rng.normal(0, 0.05, n))
    voltage = 240.0 + rng.normal(0, 3.0, n) - 0.8 * active
    intensity = active * 4.2 + rng.normal(0, 0.2, n)
    subs = [np.where(rng.random(n) < p, rng.lognormal(mu, 0.5, n), 0.0) for p, mu in ((0.1, 2.5), (0.2, 0.5),
                                                                                       (0.4, 2.8))]
    return np.round(np.c_[active, reactive, voltage, intensity, *subs], 3)


def rental(n: int = 17_000, seed: int = 0) -> np.ndarray:
    """Hour, weekday and month codes, holiday and working-day flags, temperature and the day's rentals."""
    rng = np.random.default_rng(seed)
    hour, weekday, month = rng.integers(0, 24, n), rng.integers(0, 7, n), rng.integers(1, 13, n)
    holiday = (rng.random(n) < 0.03).astype(float)
    working = ((weekday < 5) & (holiday == 0)).astype(float)
    temp = 15 + 10 * np.sin((month - 4) / 12 * 2 * np.pi) + rng.normal(0, 4, n)
    rate = np.exp(1.5 + 0.8 * np.sin((hour - 6) / 24 * 2 * np.pi) + 0.03 * temp + 0.3 * working)
    count = rng.poisson(rate * rng.gamma(5, 0.2, n))
    return np.c_[hour, weekday, month, holiday, working, np.round(temp, 1), count].astype(np.float64)


def adbench(directory: str | None = None) -> dict[str, np.ndarray]:
    return {p.stem: np.load(p)["X"].astype(np.float64) for p in adbench_files(directory)}


def point_masses(train: np.ndarray, kinds: dict[str, Any], steps: dict[int, float]) -> list[tuple[int, float, float]]:
    """(column, value, signed width) of each point mass at the edge of a column that is not dequantized over a
    lattice, with the block tgpflow's atom model puts beyond it (:func:`tgpflow.features.lattice_choice.edge_atoms`:
    ≥ 1 % of the rows at the minimum or maximum, a block of ``ATOM_BLOCK`` standard deviations), signed outwards."""
    from tgpflow.features.lattice_choice import edge_atoms

    names = list(kinds)
    lattices = {names[j] for j in steps}
    return [(names.index(name), value, side * width)
            for name, value, side, width, *_ in edge_atoms(kinds, train, lattices)]


def spread_point_masses(rows: np.ndarray, spikes: list[tuple[int, float, float]],
                        rng: np.random.Generator) -> np.ndarray:
    """``rows`` with each row at a point mass moved by uniform noise over the block beyond it: the log-likelihood of a
    point mass is otherwise a matter of how narrow a component may get (``reg_covar``: a mixture's rises without
    limit as it shrinks), while on the spread rows both models are densities of the same rows (tgpflow's atom
    model is exactly a uniform block of that width; docs/gp_tilted.md, "Atoms at an edge")."""
    out = rows.copy()
    for j, value, width in spikes:
        at = out[:, j] == value
        out[at, j] = value + width * rng.random(int(at.sum()))
    return out


def at_atoms(est: Any, rows: np.ndarray) -> np.ndarray:
    """Rows spread over an atom's block (:func:`spread_point_masses`) put back at the atom, as tgpflow reads them."""
    cells = getattr(est, "discrete_", None)
    return rows if cells is None or not cells.atom_positions.size else cells.snap(rows, block=True)


def tuned_mixture(train: np.ndarray, k_grid: list[int], seed: int) -> tuple[Any, int, list[tuple[int, float]]]:
    """K by the validation log-likelihood of a fifth of ``train``, refitted on all of it."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(seed)
    val = rng.random(train.shape[0]) < 0.2
    curve = []
    for k in k_grid:
        if k * (train.shape[1] + 1) * 5 > (~val).sum():
            break
        gm = GaussianMixture(k, covariance_type="full", reg_covar=1e-6, random_state=seed).fit(train[~val])
        curve.append((k, float(gm.score(train[val]))))
    best = max(curve, key=lambda c: c[1])[0]
    return GaussianMixture(best, covariance_type="full", reg_covar=1e-6, random_state=seed).fit(train), best, curve


def sliced(held: np.ndarray, samples: np.ndarray) -> tuple[float, float]:
    from tgpflow.metrics.sliced import sliced_distances

    res = sliced_distances(held, points=samples, n_directions=500, n_grid=2000, random_state=0)
    return float(np.median(res.ks)), float(np.median(res.wd))


def run_table(name: str, X: np.ndarray, methods: list[str], k_grid: list[int],
              bases: tuple[str, ...] = ("empirical",), discrete: str = "auto", bounds: str = "auto",
              units: str = "data", split: int = 0) -> list[dict[str, Any]]:
    import tgpflow
    from tgpflow.io.column_kinds import cell_widths, column_kinds, dequantize
    from tgpflow.metrics.sample_check import sample_check

    rng = np.random.default_rng(split)  # the 80/20 split, the dequantizing noise
    X = X[np.all(np.isfinite(X), axis=1)]
    X = X[:, X.std(axis=0) > 0]
    order = rng.permutation(X.shape[0])
    cut = int(0.8 * X.shape[0])
    train, held = X[order[:cut]], X[order[cut:]]
    mu, sd = train.mean(axis=0), train.std(axis=0)
    train, held = (train - mu) / sd, (held - mu) / sd
    kinds = column_kinds(train, [str(j) for j in range(train.shape[1])])
    steps = cell_widths(train, kinds)
    train_q, held_q = dequantize(train, steps, rng), dequantize(held, steps, rng)
    spikes = point_masses(train, kinds, steps)
    train_q, held_q = spread_point_masses(train_q, spikes, rng), spread_point_masses(held_q, spikes, rng)
    half = held.shape[0] // 2
    floor = sliced(held[:half], held[half:])
    rows: list[dict[str, Any]] = [{"table": name, "split": split, "model": "two halves (floor)", "ks": floor[0],
                                   "wd": floor[1]}]
    t0 = time.perf_counter()
    gm, k, curve = tuned_mixture(train_q, k_grid, 0)
    gm_time = time.perf_counter() - t0
    gm_draws = gm.sample(50_000)[0]
    ks, wd = sliced(held, gm_draws)
    # the share of the mixture's draws outside the [0.1 %, 99.9 %] quantile box of the rows it was fitted to: the
    # measure tgpflow's diagnostics hold its own fits to (tgpflow.stats.support.SupportBox)
    from tgpflow.stats.support import SupportBox

    gm_box = SupportBox.from_rows(train_q)
    outside = float(gm_box.outside(gm_draws).mean())
    gm_check = sample_check(None, held, samples=gm_draws, box=gm_box)  # the same criteria, for comparison
    rows.append({"table": name, "split": split, "model": f"GaussianMixture (K={k})", "loglik": float(gm.score(held_q)),
                 "ks": ks, "wd": wd, "seconds": gm_time, "k_curve": curve, "mass_outside": outside,
                 "sample_check": ",".join(c for c, ok in gm_check.checks.items() if not ok) or "ok",
                 "spread_ratio": [float(gm_check.spread_ratio.min()), float(gm_check.spread_ratio.max())]})
    one = tuned_mixture(train_q, [1], 0)[0]
    rows.append({"table": name, "split": split, "model": "one Gaussian", "loglik": float(one.score(held_q)),
                 **dict(zip(("ks", "wd"), sliced(held, one.sample(50_000)[0]), strict=True))})
    # tgpflow fits the rows in the table's own units, as a user would (``--units data``): its bounds="auto" finds
    # the edges at 0 and 1 there; its log-densities are moved to the standardized units by the Jacobian
    raw = units == "data"
    jacobian = float(np.log(sd).sum()) if raw else 0.0
    held_raw = X[order[cut:]]
    # the rows tgpflow fits and scores: the table's own values wherever a row was not moved (no float round trip: a
    # 0 stays exactly 0, as in the user's table)
    fit_rows = (X[order[:cut]] if discrete == "auto" else train_q * sd + mu) if raw else (
        train if discrete == "auto" else train_q)
    held_fit = np.where(held_q == held, held_raw, held_q * sd + mu) if raw else held_q

    for method, base in [(m, b) for m in methods for b in bases]:
        label = f"tgpflow {method}" + ("" if base == "empirical" else f" ({base})")
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                est = tgpflow.GPTiltedDensity(method=method, base=base, random_state=0,
                                              discrete="auto" if discrete == "auto" else None,
                                              bounds="auto" if bounds == "auto" else None).fit(fit_rows)
            except (ValueError, FloatingPointError) as exc:  # a default fit that refuses the table is a result too
                rows.append({"table": name, "split": split, "model": label, "failed": str(exc)[:300],
                             "ks": float("nan"), "wd": float("nan")})
                continue
        seconds = time.perf_counter() - t0
        diag = est.fit_diagnostics_
        samples = est.sample(50_000, random_state=1)
        ks, wd = sliced(held, (samples - mu) / sd if raw else samples)
        # tgpflow's own sample check, in the units it fitted (the data's): the criteria that failed, if any
        check = sample_check(est, held_raw if raw else held, samples=samples,
                             ess_fraction=(getattr(est, "last_sample_info_", None) or {}).get("ess_fraction"))
        failed = [k for k, ok in check.checks.items() if not ok]
        loglik = est.log_density(at_atoms(est, held_fit), normalized=True) + jacobian
        rows.append({"table": name, "split": split, "model": label, "loglik": float(np.mean(loglik)), "ks": ks,
                     "wd": wd, "seconds": seconds, "bounds": None if est.bounds_ is None else est.bounds_.describe(),
                     "ess_fraction": diag.get("ess_fraction"), "mass_outside": diag.get("mass_outside"),
                     "discrete": None if est.discrete_ is None else list(est.discrete_.columns),
                     "sample_check": "ok" if not failed else ",".join(failed),
                     "spread_ratio": [float(check.spread_ratio.min()), float(check.spread_ratio.max())],
                     "mean_error_max": float(np.abs(check.mean_error).max()),
                     "warnings": len([w for w in caught if "DiagnosticWarning" in type(w.message).__name__])})
    ref = rows[1]
    for r in rows:
        if "loglik" in r and "failed" not in r:
            r["loglik_minus_mixture"] = r["loglik"] - ref["loglik"]
        r["ks_over_mixture"] = r["ks"] / ref["ks"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default="magic,meters,rental")
    ap.add_argument("--methods", default="fd,ncfd,fvpd")
    ap.add_argument("--k-grid", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--bases", default="empirical,mixture", help="the GP-tilted bases to fit (base=)")
    ap.add_argument("--discrete", default="auto", choices=("auto", "none"),
                    help="auto: tgpflow fits the raw rows with discrete='auto'; none: the dequantized rows")
    ap.add_argument("--bounds", default="auto", choices=("auto", "none"), help="tgpflow's bounds=")
    ap.add_argument("--units", default="data", choices=("data", "standardized"),
                    help="the units tgpflow fits in: the table's own (as a user would) or the standardized rows")
    ap.add_argument("--adbench", nargs="?", const="all", default=None,
                    help="the ADBench development sets: all of them, or those whose names contain one of a "
                         "comma-separated list (e.g. letter,cardio)")
    ap.add_argument("--adbench-dir", default=None, help="their folder (*.npz; default $TGPFLOW_ADBENCH_DIR)")
    ap.add_argument("--splits", type=int, default=1,
                    help="repeat each table over this many 80/20 splits (seeds 0, 1, …) and print each model's mean "
                         "difference to the mixture with its standard error: on small tables one split's sliced KS "
                         "is mostly the held-out rows' noise")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tables = {"magic": magic, "meters": meters, "rental": rental}
    data = {t: tables[t]() for t in args.tables.split(",") if t}
    if args.adbench:
        wanted = None if args.adbench == "all" else args.adbench.split(",")
        sets = adbench(args.adbench_dir)
        data.update({k: v for k, v in sets.items() if wanted is None or any(w in k for w in wanted)})
    k_grid = [int(k) for k in args.k_grid.split(",")]
    out = []
    print(f"{'table':14s} {'model':30s} {'loglik':>9s} {'Δ vs GMM':>9s} {'KS':>8s} {'KS/GMM':>7s} {'WD':>8s} "
          f"{'ESS':>6s} {'outside':>8s} {'warn':>4s} {'s':>7s}  check")
    for name, X, split in [(n, x, s) for n, x in data.items() for s in range(args.splits)]:
        for r in run_table(name, X, args.methods.split(","), k_grid, tuple(args.bases.split(",")), args.discrete,
                           args.bounds, args.units, split):
            out.append(r)
            fmt = lambda key, spec: format(r[key], spec) if r.get(key) is not None else "-"  # noqa: E731
            if "failed" in r:
                print(f"{name:14s} {r['model']:30s} failed: {r['failed']}", flush=True)
                continue
            print(f"{name:14s} {r['model']:30s} {fmt('loglik', '9.3f'):>9s} {fmt('loglik_minus_mixture', '+9.3f'):>9s} "
                  f"{fmt('ks', '8.4f'):>8s} {fmt('ks_over_mixture', '7.2f'):>7s} {fmt('wd', '8.4f'):>8s} "
                  f"{fmt('ess_fraction', '6.3f'):>6s} {fmt('mass_outside', '8.3f'):>8s} {fmt('warnings', 'd'):>4s} "
                  f"{fmt('seconds', '7.1f'):>7s}  {r.get('sample_check', '')}", flush=True)
    if args.splits > 1:
        summarize(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))


def summarize(rows: list[dict[str, Any]]) -> None:
    """Per table and model, over the splits: the mean log-likelihood difference to the tuned mixture and the mean
    difference of the sliced KS (each split's pair), with their standard errors, and the mean KS ratio."""
    print(f"\n{'table':14s} {'model':30s} {'splits':>6s} {'Δ loglik ± se':>18s} {'ΔKS ± se':>18s} {'KS/GMM':>7s}")
    keys = sorted({(r["table"], r["model"].split(" (K=")[0]) for r in rows}, key=str)
    for table, model in keys:
        mine = [r for r in rows if r["table"] == table and r["model"].split(" (K=")[0] == model and "failed" not in r]
        ref = {r["split"]: r for r in rows if r["table"] == table and r["model"].startswith("GaussianMixture")}
        dll = np.array([r["loglik_minus_mixture"] for r in mine if "loglik_minus_mixture" in r])
        dks = np.array([r["ks"] - ref[r["split"]]["ks"] for r in mine])
        ratio = np.array([r["ks_over_mixture"] for r in mine])
        print(f"{table:14s} {model:30s} {len(mine):6d} {_mean_se(dll):>18s} {_mean_se(dks):>18s} "
              f"{ratio.mean():7.2f}", flush=True)



def _mean_se(v: np.ndarray) -> str:
    return "-" if v.size < 2 else f"{v.mean():+.4f} ± {v.std(ddof=1) / np.sqrt(v.size):.4f}"


if __name__ == "__main__":
    main()
