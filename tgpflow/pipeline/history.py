"""A pipeline model's versions over time (docs/drift.md, "History and diff"): one line of figures per published
version (:func:`history`), and what changed between two versions (:func:`diff_versions`), compared through samples
of each: the sliced KS and Wasserstein distances and, per column, the KS distance, the Wasserstein distance in the
column's units and the shift of its mean.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from tgpflow.errors import TgpflowError
from tgpflow.metrics.sliced import sliced_distances
from tgpflow.pipeline.versions import ModelVersions

__all__ = ["history", "diff_versions"]


def history(vers: ModelVersions) -> list[dict[str, Any]]:
    """Per published version, oldest first: its run, date, rows and partitions, its health (warnings, ESS, mass
    outside, the held-out log-likelihood of the version before it on the run's new partitions) and its run's drift
    verdicts (partitions tested, those flagged, the smallest z)."""
    out = []
    for name in vers.list():
        info = vers.info(name)
        health = info.get("health") or {}
        drift = info.get("drift") or {}
        heldout = health.get("heldout_loglik") or {}
        zs = [v["z"] for v in drift.values() if v.get("z") is not None]
        out.append({"version": name, "run": info.get("run"), "date": info.get("date"), "rows": info.get("rows"),
                    "partitions": len(info.get("partitions") or []),
                    "warnings": len(health.get("warnings") or []), "ess_fraction": health.get("ess_fraction"),
                    "mass_outside": health.get("mass_outside"), "pilot_loglik": health.get("pilot_loglik"),
                    "heldout_loglik": heldout.get("mean"), "tested": len(drift),
                    "drifted": sorted(k for k, v in drift.items() if v.get("drifted")),
                    "min_z": min(zs) if zs else None})
    return out


def _draws(vers: ModelVersions, name: str, est: Any, n: int, seed: Any) -> tuple[np.ndarray, float]:
    """``n`` rows of ``est``, version ``name`` (importance resampling from its base), and their effective size."""
    try:
        rows, ess = est.fitted().sample(n, seed, return_ess=True)
    except (ValueError, AttributeError, TypeError) as exc:
        raise TgpflowError(f"{vers.root}: version {name} cannot be sampled to compare it ({exc})") from None
    # n rows resampled from weights of effective size ess: about 1 / (1/n + 1/ess) independent ones
    return np.asarray(rows, dtype=np.float64), 1.0 / (1.0 / n + 1.0 / max(float(ess), 1.0))


def diff_versions(vers: ModelVersions, a: str, b: str, *, n_samples: int = 20_000, random_state: int = 0,
                  alpha: float = 0.01) -> dict[str, Any]:
    """What changed from version ``a`` to version ``b`` (module docstring). A column *moved* when its KS distance
    is significant at ``alpha`` (Bonferroni over the columns) for samples of the two versions' effective sizes;
    ``floor`` is the sliced KS of two independent samples of ``a``, the distance sampling alone gives."""
    published = vers.list()
    for name in (a, b):
        if name not in published:
            raise TgpflowError(f"{vers.root}: no published version {name!r}; published: {', '.join(published)}")
    info_a, info_b = vers.info(a), vers.info(b)
    columns = info_a.get("columns") or info_b.get("columns")
    if (info_a.get("columns") or columns) != (info_b.get("columns") or columns):
        raise TgpflowError(f"{vers.root}: versions {a} and {b} model different columns; nothing to compare")
    seeds = np.random.SeedSequence(random_state).spawn(3)
    est_a, est_b = vers.load(a), vers.load(b)
    xa, ess_a = _draws(vers, a, est_a, n_samples, seeds[0])
    xb, ess_b = _draws(vers, b, est_b, n_samples, seeds[1])
    xa2, _ = _draws(vers, a, est_a, n_samples, seeds[2])
    if xa.shape[1] != xb.shape[1]:
        raise TgpflowError(f"{vers.root}: versions {a} and {b} model {xa.shape[1]} and {xb.shape[1]} columns; nothing "
                           f"to compare")
    sliced = sliced_distances(xb, points=xa, n_directions=100, random_state=random_state).summary()
    floor = sliced_distances(xa2, points=xa, n_directions=100, random_state=random_state).summary()
    ne = ess_a * ess_b / (ess_a + ess_b)
    per_column = {}
    for j, column in enumerate(columns or [str(j) for j in range(xa.shape[1])]):
        ks = float(stats.ks_2samp(xa[:, j], xb[:, j]).statistic)
        p = float(stats.kstwobign.sf(math.sqrt(ne) * ks))
        sd = float(xa[:, j].std())
        per_column[column] = {"ks": ks, "p_value": p, "wd": float(stats.wasserstein_distance(xa[:, j], xb[:, j])),
                              "change": float(xb[:, j].mean() - xa[:, j].mean()),
                              "shift": float((xb[:, j].mean() - xa[:, j].mean()) / sd) if sd > 0 else None}
    d = len(per_column)
    moved = sorted((c for c, v in per_column.items() if d * v["p_value"] < alpha),
                   key=lambda c: -per_column[c]["ks"])
    parts_a, parts_b = info_a.get("partitions") or [], info_b.get("partitions") or []
    return {"model": str(vers.root), "from": a, "to": b, "samples": n_samples,
            "effective_samples": {a: ess_a, b: ess_b},
            "sliced_ks": sliced["ks_median"], "sliced_wd": sliced["wd_median"],
            "floor": {"sliced_ks": floor["ks_median"], "sliced_wd": floor["wd_median"]},
            "moved": moved, "columns": per_column,
            "rows": {a: info_a.get("rows"), b: info_b.get("rows")},
            "partitions": {"added": sorted(set(parts_b) - set(parts_a)),
                           "removed": sorted(set(parts_a) - set(parts_b))}}
