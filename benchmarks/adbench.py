"""ADBench-style unsupervised anomaly detection on the ADBench sets (*.npz, X and y;
--adbench-dir or TGPFLOW_ADBENCH_DIR): ROC-AUC tables.

Protocol (ADBench, unsupervised; [Kozdoba et al.] §5 and App. M): for each seed, a stratified 70/30
train/test split (``random_state=seed``); every detector is fitted on the training rows WITHOUT
labels (normal and anomalous rows alike); ROC-AUC of its anomaly score on the test rows
(RSR: −log p). Two settings:

* as shipped;
* duplicated anomalies ×K (``--dup``, default 5): ADBench's ``duplicated_anomalies`` setting,
  which [Kozdoba et al.] App. M.3 follows — AFTER the split, every anomaly row of the training part
  and of the test part appears K times (ADBench draws K·n_a anomaly rows with replacement; here
  each is repeated exactly K times, so the setting is deterministic). Duplicating before the
  split would put copies of one anomaly in both parts.

Preprocessing, shared by all detectors: z-scores with the training mean/std, then a numerically
independent subset of the training columns (QR with pivoting; cardio has a collinear column).
RootSobolevDensity whitens its input internally and so does not depend on the z-scoring.

Detectors: ``RootSobolevDensity(random_state=seed)`` with its defaults (no per-set tuning) and
scikit-learn's ``IsolationForest(random_state=seed)``; ``--all`` adds KDE-SDO, the Gaussian KDE
(tgpflow.ExactKDE, Scott), GPTiltedDensity FD and FVPD (S = 1000) and PyOD's LOF and ECOD.
Prints the per-set AUCs and, per seed and setting, the mean and median over the sets, whether
RSR's mean and median are at least IsolationForest's, and RSR's passes and convergence.
Single-threaded by default (``dask`` synchronous scheduler). Usage:
``python benchmarks/adbench.py [--seeds 3] [--dup 5] [--all]``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

try:
    from benchmarks.datasets import adbench_files
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from datasets import adbench_files


def split(X: np.ndarray, y: np.ndarray, seed: int, dup: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified 70/30 split, anomalies repeated ``dup`` times in each part, z-scores, independent columns."""
    import scipy.linalg
    from sklearn.model_selection import train_test_split

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    if dup > 1:
        def repeat(Xp: np.ndarray, yp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            idx = np.concatenate([np.flatnonzero(yp == 0), np.repeat(np.flatnonzero(yp == 1), dup)])
            return Xp[idx], yp[idx]

        (Xtr, ytr), (Xte, yte) = repeat(Xtr, ytr), repeat(Xte, yte)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    _, R, piv = scipy.linalg.qr(Xtr, mode="economic", pivoting=True)
    rank = int(np.sum(np.abs(np.diag(R)) > 1e-8 * np.abs(R[0, 0])))
    keep = np.sort(piv[:rank])
    return Xtr[:, keep], Xte[:, keep], yte


def detectors(seed: int, everything: bool) -> dict[str, Callable[[], Any]]:
    from sklearn.ensemble import IsolationForest

    from tgpflow import ExactKDE, GPTiltedDensity, RootSobolevDensity

    out: dict[str, Callable[[], Any]] = {
        "RSR": lambda: RootSobolevDensity(random_state=seed),
        "IForest": lambda: IsolationForest(random_state=seed),
    }
    if everything:
        out.update({
            "KDE-SDO": lambda: RootSobolevDensity(method="kde_sdo", random_state=seed),
            "KDE (Gaussian)": lambda: ExactKDE(kernel_cov="identity", random_state=seed),
            "GP-tilted FD": lambda: GPTiltedDensity(method="fd", n_features=1000, random_state=seed),
            "GP-tilted FVPD": lambda: GPTiltedDensity(method="fvpd", n_features=1000, random_state=seed),
        })
        try:
            from pyod.models.ecod import ECOD
            from pyod.models.lof import LOF

            out.update({"LOF (PyOD)": lambda: LOF(), "ECOD (PyOD)": lambda: ECOD()})
        except ImportError:
            print("PyOD is not installed: pip install pyod (LOF and ECOD are skipped)")
    return out


def anomaly_score(est: Any, X: np.ndarray) -> np.ndarray:
    """Larger = more anomalous: −log p for tgpflow models, −score_samples for scikit-learn, PyOD's own."""
    if hasattr(est, "log_density"):
        score = -np.asarray(est.log_density(X))
    elif hasattr(est, "score_samples"):
        score = -est.score_samples(X)
    else:
        score = est.decision_function(X)
    return np.nan_to_num(score, nan=np.inf, posinf=1e300)


def main() -> None:
    import dask
    from sklearn.metrics import roc_auc_score

    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--adbench-dir", default=None, help="the sets' folder (default $TGPFLOW_ADBENCH_DIR)")
    p.add_argument("--dup", type=int, default=5, help="anomaly duplication factor of the second setting")
    p.add_argument("--all", action="store_true", help="also the other tgpflow models and PyOD's LOF/ECOD")
    args = p.parse_args()
    dask.config.set(scheduler="synchronous")
    paths = adbench_files(args.adbench_dir)
    names = [path.stem for path in paths]
    settings = {"as shipped": 1, f"anomalies x{args.dup}": args.dup}
    auc: dict[str, dict[str, dict[str, list[float]]]] = {s: {} for s in settings}
    fits: dict[str, list[str]] = {s: [] for s in settings}
    for setting, dup in settings.items():
        for path in paths:
            data = np.load(path)
            X, y = data["X"].astype(np.float64), data["y"].astype(int)
            for seed in range(args.seeds):
                Xtr, Xte, yte = split(X, y, seed, dup)
                for det, make in detectors(seed, args.all).items():
                    t = time.perf_counter()
                    est = make().fit(Xtr)
                    a = roc_auc_score(yte, anomaly_score(est, Xte))
                    auc[setting].setdefault(det, {}).setdefault(path.stem, []).append(a)
                    if det == "RSR":
                        fi = est.fit_info_
                        fits[setting].append(f"{path.stem}/{seed}: {fi['iterations']}{'' if fi['converged'] else '!'}")
                    print(f"[{setting}] {path.stem} seed {seed} {det}: AUC {a:.3f} ({time.perf_counter() - t:.1f} s)",
                          flush=True)
    for setting in settings:
        table = auc[setting]
        print(f"\n== ROC-AUC, {setting} (stratified 70/30 split, unsupervised); columns: seeds")
        for det, per_set in table.items():
            print(f"{det}")
            for name in names:
                print(f"  {name:14s} " + " ".join(f"{a:.3f}" for a in per_set[name]))
            by_seed = np.array([per_set[name] for name in names])  # (sets, seeds)
            print(f"  {'mean':14s} " + " ".join(f"{v:.3f}" for v in by_seed.mean(axis=0)))
            print(f"  {'median':14s} " + " ".join(f"{v:.3f}" for v in np.median(by_seed, axis=0)))
        rsr = np.array([table["RSR"][n] for n in names])
        ifo = np.array([table["IForest"][n] for n in names])
        for seed in range(args.seeds):
            m_ok = rsr[:, seed].mean() >= ifo[:, seed].mean()
            d_ok = np.median(rsr[:, seed]) >= np.median(ifo[:, seed])
            print(f"  seed {seed}: RSR mean {rsr[:, seed].mean():.3f} vs IForest {ifo[:, seed].mean():.3f} "
                  f"({'>=' if m_ok else '<'}), median {np.median(rsr[:, seed]):.3f} vs {np.median(ifo[:, seed]):.3f} "
                  f"({'>=' if d_ok else '<'})")
        print(f"  over all seeds: RSR mean {rsr.mean():.3f} vs IForest {ifo.mean():.3f}; median of per-set means "
              f"{np.median(rsr.mean(1)):.3f} vs {np.median(ifo.mean(1)):.3f}")
        print("  RSR passes (! = not converged):", ", ".join(fits[setting]))
    print(json.dumps({s: {d: {n: [round(a, 4) for a in v] for n, v in t.items()} for d, t in auc[s].items()}
                      for s in settings}))


if __name__ == "__main__":
    main()
