"""Drift verdicts through the whole pipeline (docs/drift.md): synthetic daily streams, and real tables cut into days.

``--synthetic R``: R seeded streams of 21 daily Parquet partitions of 2000 rows, five columns (two correlated), run
one ``tgpflow run`` per day (a GP-tilted FD model, S = 32, λ = 0.1, with scores); days 1–20 stationary, day 21
with column c shifted by 0.3 standard deviations. Prints how many streams flag day 21 and name c first, the
false-alarm rate over days 2–20 (every stationary partition tested), and the z statistic's mean, standard deviation
and one-sided 1 % rate on those days, beside the nominal alpha (the same-run reference of a calibrated test).

``--adbench names``: each ADBench development set (folder: ``--adbench-dir`` or ``TGPFLOW_ADBENCH_DIR``) as a stream:
its normal rows shuffled (seed 0) and cut into ``--days`` days, and every labelled anomaly added to day
``--anomaly-day``. One run per day with the default GP-tilted model; prints, per day, whether it was flagged, its
p-value, z, and the columns named.

Usage: python benchmarks/drift_detection.py [--synthetic 100] [--adbench all|thyroid,wilt] [--days 10]
       [--anomaly-day 7] [--json out.json]

Measured on the development machine (2 cores), 2026-11-29: ``--synthetic 100``: day 21 flagged in 100/100 streams,
c named first in 100/100; stationary partitions flagged 8/1900 = 0.0042 (alpha 0.01, ratio 0.42); z mean +0.131,
sd 0.928, below the 1 % point 0.0044 (2784 s). ``--adbench all`` (10 days, anomalies on day 7): Thyroid, Wilt,
Letter, Pima and Stamps flag day 7 only; Annthyroid days 7, 8 and 9 (its 534 anomalies join the reference after day
7); Glass (20 normal rows a day) nothing; MNIST, Optdigits and Cardio stop on day 0 (constant or collinear columns in
166–690 rows).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

try:
    from benchmarks.datasets import adbench_files
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from datasets import adbench_files
MIX = np.array([[1.0, 0.5, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])
COLUMNS = list("abcde")


def _write(path: Path, X: np.ndarray, columns: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({c: X[:, j] for j, c in enumerate(columns)}), path, row_group_size=1000)


def _spec(root: Path, params: dict, scores: bool = True) -> Path:
    raw = {"name": "bench", "source": {"path": str(root / "data" / "*.parquet")},
           "preprocess": {"center": True, "scale": True},
           "models": [{"name": "fd", "estimator": "GPTiltedDensity", "params": params}],
           "outputs": {"store": str(root / "store.zarr"), "models": str(root / "models"),
                       **({"scores": {"path": str(root / "scores"), "model": "fd"}} if scores else {})}}
    (root / "spec.yaml").write_text(yaml.safe_dump(raw))
    return root / "spec.yaml"


def synthetic(reps: int, shift: float = 0.3) -> dict:
    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    flagged = named = 0
    null_flags, null_tested, zs = 0, 0, []
    t0 = time.perf_counter()
    for rep in range(reps):
        rng = np.random.default_rng(10_000 + rep)
        with tempfile.TemporaryDirectory(prefix="tgpflow-drift-") as tmp:
            root = Path(tmp)
            (root / "data").mkdir()
            spec = load_spec(_spec(root, {"method": "fd", "n_features": 32, "lam": 0.1}))
            for t in range(21):
                X = rng.normal(size=(2000, 5)) @ MIX
                if t == 20:
                    X[:, 2] += shift * math.sqrt((MIX[:, 2] ** 2).sum())
                _write(root / "data" / f"d{t:03d}.parquet", X, COLUMNS)
                verdict = run_pipeline(spec, date=f"2026-01-{t + 1:02d}")["drift"].get(f"d{t:03d}.parquet")
                if verdict is None:
                    continue
                if t < 20:
                    null_tested += 1
                    null_flags += verdict["drifted"]
                    if verdict["z"] is not None:
                        zs.append(verdict["z"])
                else:
                    flagged += verdict["drifted"]
                    named += verdict["columns"][:1] == ["c"]
        print(f"  stream {rep + 1}/{reps}: day 21 flagged {flagged}, c named {named}; stationary flagged "
              f"{null_flags}/{null_tested} ({time.perf_counter() - t0:.0f} s)", flush=True)
    z = np.array(zs)
    return {"streams": reps, "shift_sd": shift, "day21_flagged": flagged, "day21_named_c": named,
            "stationary_tested": null_tested, "stationary_flagged": null_flags,
            "false_alarm_rate": null_flags / max(null_tested, 1), "alpha": 0.01,
            "z_mean": float(z.mean()), "z_sd": float(z.std()), "z_below_1pct": float((z < -2.326).mean()),
            "seconds": time.perf_counter() - t0}


def adbench(names: list[str] | None, days: int, anomaly_day: int, directory: str | None = None) -> dict:
    from tgpflow.errors import TgpflowError
    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    out = {}
    for path in adbench_files(directory):
        if names and not any(n.lower() in path.stem.lower() for n in names):
            continue
        data = np.load(path)
        X, y = data["X"].astype(np.float64), data["y"].astype(int)
        normal = X[y == 0][np.random.default_rng(0).permutation(int((y == 0).sum()))]
        cols = [f"x{j}" for j in range(X.shape[1])]
        per_day = []
        with tempfile.TemporaryDirectory(prefix="tgpflow-drift-") as tmp:
            root = Path(tmp)
            (root / "data").mkdir()
            # discrete=None: a column the first day shows on a lattice (thyroid's age / 100) has off-lattice values
            # on later days, which a discrete model refuses (the run names the fix)
            spec = load_spec(_spec(root, {"method": "fd", "discrete": None}))
            for t, rows in enumerate(np.array_split(normal, days)):
                if t == anomaly_day:
                    rows = np.concatenate([rows, X[y == 1]])
                _write(root / "data" / f"d{t:03d}.parquet", rows, cols)
                try:
                    result = run_pipeline(spec, date=f"2026-01-{t + 1:02d}")
                except TgpflowError as exc:  # a table the default model refuses on so few rows: said, not hidden
                    per_day.append({"day": t, "error": str(exc)[:300]})
                    print(f"{path.stem}: day {t}: {str(exc)[:300]}")
                    break
                v = result["drift"].get(f"d{t:03d}.parquet")
                rate = (result.get("anomaly_rates") or [{}])[0].get("anomaly_rate")
                planted = int((y == 1).sum()) if t == anomaly_day else 0
                per_day.append({"day": t, "rows": len(rows), "anomalies": planted,
                                "drifted": None if v is None else v["drifted"],
                                "p_value": None if v is None else v["p_value"], "z": None if v is None else v["z"],
                                "columns": None if v is None else v["columns"][:3], "anomaly_rate": rate,
                                "warnings": len(result["health"]["fd"]["warnings"])})
        out[path.stem] = per_day
        flagged = [d["day"] for d in per_day if d.get("drifted")]
        print(f"{path.stem}: {days} days of {len(normal) // days} normal rows, {int((y == 1).sum())} anomalies on day "
              f"{anomaly_day}: flagged days {flagged}", flush=True)
        for d in per_day:
            if "error" in d:
                continue
            z = "" if d["z"] is None else f" z {d['z']:+.2f}"
            p = "" if d["p_value"] is None else f" p {d['p_value']:.2g}"
            print(f"   day {d['day']}: {'DRIFT' if d['drifted'] else 'ok' if d['drifted'] is not None else '-'}{p}{z}"
                  f" columns {d['columns']} anomaly rate {d['anomaly_rate']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=0, metavar="R")
    ap.add_argument("--adbench", nargs="?", const="all", default=None)
    ap.add_argument("--adbench-dir", default=None, help="their folder (default $TGPFLOW_ADBENCH_DIR)")
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--anomaly-day", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.getLogger("tgpflow").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    results: dict = {}
    if args.synthetic:
        results["synthetic"] = s = synthetic(args.synthetic)
        print(f"synthetic: day 21 (0.3 sd shift in c) flagged in {s['day21_flagged']}/{s['streams']}, c named first in "
              f"{s['day21_named_c']}/{s['streams']}; stationary partitions flagged {s['stationary_flagged']}/"
              f"{s['stationary_tested']} = {s['false_alarm_rate']:.4f} (alpha {s['alpha']}, ratio "
              f"{s['false_alarm_rate'] / s['alpha']:.2f}); z mean {s['z_mean']:+.3f} sd {s['z_sd']:.3f}, "
              f"below the 1 % point {s['z_below_1pct']:.4f}")
    if args.adbench:
        results["adbench"] = adbench(None if args.adbench == "all" else args.adbench.split(","), args.days,
                                     args.anomaly_day, args.adbench_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
