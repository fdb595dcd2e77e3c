"""ADBench-style unsupervised anomaly detection on ../shared/data/adbench/*.npz (X, y): ROC-AUC table.

Protocol (ADBench, unsupervised): for each seed, a stratified 70/30 train/test split; every
detector is fitted on the training rows WITHOUT labels (normal and anomalous rows alike),
standardised with the training mean/std, keeping a linearly independent subset of the
training columns (QR with pivoting; cardio has collinear columns); ROC-AUC of the anomaly scores on the test rows.
Detectors: RootSobolevDensity (T = 2000; a from {0.3, 1, 3} by the held-out exact Hyvärinen
loss), KDE-SDO (a = 1), Gaussian KDE (tgpflow.ExactKDE, Scott), GPTiltedDensity FD and FVPD
(S = 1000), and from PyOD (``pip install pyod``): IForest, LOF, ECOD. Also prints RSR's
iterations to converge. Usage: python benchmarks/adbench.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "adbench"


def main() -> None:
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    from tgpflow import ExactKDE, GPTiltedDensity, RootSobolevDensity

    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    try:
        from pyod.models.ecod import ECOD
        from pyod.models.iforest import IForest
        from pyod.models.lof import LOF
    except ImportError:
        ECOD = IForest = LOF = None
        print("PyOD is not installed: pip install pyod (its detectors are skipped)")

    def detectors(seed):
        out = {
            "RSR": lambda: RootSobolevDensity(n_features=2000, smoothness=[0.3, 1.0, 3.0], random_state=seed),
            "KDE-SDO": lambda: RootSobolevDensity(method="kde_sdo", n_features=2000, random_state=seed),
            "KDE (Gaussian)": lambda: ExactKDE(kernel_cov="identity", random_state=seed),
            "GP-tilted FD": lambda: GPTiltedDensity(method="fd", n_features=1000, random_state=seed),
            "GP-tilted FVPD": lambda: GPTiltedDensity(method="fvpd", n_features=1000, random_state=seed),
        }
        if IForest is not None:
            out.update({"IForest (PyOD)": lambda: IForest(random_state=seed), "LOF (PyOD)": lambda: LOF(),
                        "ECOD (PyOD)": lambda: ECOD()})
        return out

    table: dict[str, dict[str, list[float]]] = {}
    iters: dict[str, list[int]] = {}
    for path in sorted(DATA.glob("*.npz")):
        data = np.load(path)
        X, y = data["X"].astype(np.float64), data["y"].astype(int)
        name = path.stem
        for seed in range(args.seeds):
            Xtr, Xte, _, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
            mu, sd = Xtr.mean(0), Xtr.std(0)
            sd[sd == 0] = 1.0
            Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
            # collinear training columns make the Gaussian bases singular: keep a numerically
            # independent subset (QR with column pivoting), the same for every detector
            import scipy.linalg

            _, R, piv = scipy.linalg.qr(Xtr, mode="economic", pivoting=True)
            rank = int(np.sum(np.abs(np.diag(R)) > 1e-8 * np.abs(R[0, 0])))
            keep = np.sort(piv[:rank])
            Xtr, Xte = Xtr[:, keep], Xte[:, keep]
            for det, make in detectors(seed).items():
                t = time.perf_counter()
                est = make().fit(Xtr)
                if hasattr(est, "decision_function") and not hasattr(est, "log_density"):
                    score = est.decision_function(Xte)  # PyOD: larger = more anomalous
                else:
                    score = -np.asarray(est.log_density(Xte))
                score = np.nan_to_num(score, nan=np.inf, posinf=1e300)
                auc = roc_auc_score(yte, score)
                table.setdefault(name, {}).setdefault(det, []).append(auc)
                if det == "RSR":
                    iters.setdefault(name, []).append(est.fit_info_["iterations"])
                print(f"{name} seed {seed} {det}: AUC {auc:.3f} ({time.perf_counter() - t:.1f} s)", flush=True)
    dets = list(next(iter(table.values())).keys())
    print(f"\nROC-AUC (mean ± s.d. over {args.seeds} seeds; unsupervised, 70/30 stratified split)")
    print(f"{'detector':18s} " + " ".join(f"{n:>16s}" for n in table))
    for det in dets:
        cells = [f"{np.mean(table[n][det]):.3f} ± {np.std(table[n][det]):.3f}" for n in table]
        print(f"{det:18s} " + " ".join(f"{c:>16s}" for c in cells))
    print("RSR iterations to converge:", {n: v for n, v in iters.items()})
    print(json.dumps({n: {d: [round(a, 4) for a in v] for d, v in t.items()} for n, t in table.items()}))


if __name__ == "__main__":
    main()
