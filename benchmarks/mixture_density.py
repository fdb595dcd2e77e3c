"""The mixture base's log density (``GaussianMixtureBase.log_pdf``) against scikit-learn's ``score_samples`` of the same
mixture, measured in the same run (docs/gp_tilted.md, "A mixture base").

Every normaliser, held-out score and sample of a fit on the mixture base evaluates log m at each proposal draw, so its
speed is most of a small table's default fit. The peer is the library users fit the same model with: a
``GaussianMixture`` with full covariances, its fitted attributes set to the same weights, means and precisions (no EM
is run). Both are float64 and use the same BLAS (threads as the process has them). Each shape prints the best of
``--repeats`` timings of each, the ratio, and the largest difference of the two log densities.

Usage: python benchmarks/mixture_density.py [--rows N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

#: (K, d): the demo's and the lattice tables' small mixtures, MAGIC's K = 64 at d = 10, and a wide one.
SHAPES = ((8, 2), (32, 4), (64, 10), (16, 32))


def mixture(K: int, d: int, seed: int = 0):
    from tgpflow.features.mixture_base import GaussianMixtureBase

    rng = np.random.default_rng(seed)
    A = rng.normal(0.0, 0.6, (K, d, d))
    covs = A @ np.swapaxes(A, 1, 2) + 0.3 * np.eye(d)
    w = rng.uniform(0.5, 1.5, K)
    return GaussianMixtureBase(w / w.sum(), rng.normal(0.0, 2.0, (K, d)), covs)


def sklearn_peer(mix):
    """scikit-learn's GaussianMixture holding ``mix``'s parameters (its fitted attributes, as ``fit`` sets them)."""
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(mix.n_components, covariance_type="full")
    gm.weights_, gm.means_, gm.covariances_ = mix.weights, mix.means, mix.covariances
    gm.precisions_cholesky_ = np.linalg.cholesky(np.linalg.inv(mix.covariances))
    gm.precisions_ = gm.precisions_cholesky_ @ np.swapaxes(gm.precisions_cholesky_, 1, 2)
    return gm


def best_of(f, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=131_072, help="rows per evaluation (a fit's normaliser draws)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = []
    for K, d in SHAPES:
        mix = mixture(K, d)
        gm = sklearn_peer(mix)
        x = np.random.default_rng(1).normal(0.0, 2.5, (args.rows, d))
        ours, theirs = mix.log_pdf(x), gm.score_samples(x)  # also warms both up
        t_ours = best_of(lambda: mix.log_pdf(x), args.repeats)  # noqa: B023
        t_peer = best_of(lambda: gm.score_samples(x), args.repeats)  # noqa: B023
        out.append({"K": K, "d": d, "rows": args.rows, "tgpflow_s": t_ours, "sklearn_s": t_peer,
                    "speedup_over_sklearn": t_peer / t_ours, "max_abs_diff": float(np.abs(ours - theirs).max())})
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'K':>4s} {'d':>4s} {'rows':>8s} {'tgpflow s':>10s} {'sklearn s':>10s} {'sklearn/tgpflow':>16s} "
          f"{'max |diff|':>11s}")
    for r in out:
        print(f"{r['K']:4d} {r['d']:4d} {r['rows']:8d} {r['tgpflow_s']:10.4f} {r['sklearn_s']:10.4f} "
              f"{r['speedup_over_sklearn']:16.2f} {r['max_abs_diff']:11.2e}")


if __name__ == "__main__":
    main()
