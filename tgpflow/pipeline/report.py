"""``tgpflow report MODEL SOURCE``: the metrics and figures that say how well a model of any kind fits held-out rows
(docs/cli/report.md).

Writes, into one directory that appears whole or not at all (``atomic_path``):

* ``metrics.json`` — for every model: the Hyvärinen loss of its score on the rows and the kernel Stein discrepancy
  (KSD²) of the rows against its score (docs/mathematics.md, "Metrics" and "SVGD, graphical SVGD and the kernel
  Stein discrepancy"); for a model that can be sampled (a GP-tilted density, a kernel model with a Gaussian base):
  the sliced KS/WD summaries and quantiles ([Paisley et al.] §IV) and the sample check against the rows
  (:func:`tgpflow.metrics.sample_check`); for a normalised density, the log-likelihood of the rows; the fit's
  diagnostics; and the ``verdict``: passed, or the reasons it did not;
* ``marginals.png`` — each column's histogram of the rows and of the model's samples, in the data's units;
* ``pairs.png`` — the rows and the model's samples over each pair of the first four columns;
* ``score_field.png`` — the model's score ∇ log p over the first two columns (the others at their medians), on the
  rows (every model; for a score estimator the one figure of what it estimates);
* ``anomaly_scores.png`` — the histogram of the rows' anomaly scores (−log density) and the fit's threshold (a model
  with a log density);
* ``density.png`` (d = 2, a sampled model) — its density contours over the rows; ``ncfd_levels.png`` (NCFD, d = 2)
  — the contours across σ; ``projected_cdfs.png`` (d > 2, a sampled model) — CDFs of random 1-D projections.

``out`` may be a path or an fsspec URL (:mod:`tgpflow.io.atomic`). Plots use a bounded sample of the source (never
the whole of it). matplotlib is an optional extra (``pip install tgpflow[report]``), imported only here.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

from tgpflow.io.atomic import AnyPath, atomic_path
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import as_source
from tgpflow.metrics.hyvarinen import heldout_loglik, hyvarinen_loss
from tgpflow.metrics.sample_check import sample_check
from tgpflow.metrics.sliced import model_reference_sample, random_directions, sliced_distances
from tgpflow.metrics.stein import ksd
from tgpflow.models.anomaly import is_anomalous, model_log_normalizer, score_threshold
from tgpflow.pipeline.figures import pyplot, save_png

__all__ = ["write_report"]

#: Rows of the source the KSD² is computed on (O(n²) kernel evaluations).
KSD_ROWS = 2_000
#: Columns drawn in the pair plot.
PAIR_COLUMNS = 4


def _draws(model: Any, n: int, random_state: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Weighted draws of the model (its resampling proposal and importance weights), or None when it has nothing
    to draw from (a score estimator, a flat-base kernel model, a root-Sobolev density)."""
    try:
        return model_reference_sample(model, n, random_state)
    except (ValueError, TypeError, NotImplementedError):
        return None


def _resample(points: np.ndarray, weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows drawn from weighted draws by multinomial resampling."""
    return points[rng.choice(points.shape[0], size=n, p=weights / weights.sum())]


def write_report(model: Any, X: Any, out: AnyPath, *, n_directions: int = 500, n_model_samples: int = 250_000,
                 n_plot_rows: int = 20_000, random_state: int = 0, columns: list[str] | None = None,
                 on_bad_rows: str = "raise", overwrite: bool = True) -> dict[str, Any]:
    """Compute the metrics of ``model`` on ``X`` and write ``out/`` (see module docstring); an existing
    ``out`` is replaced only if it is a tgpflow report and ``overwrite``. ``on_bad_rows="drop"`` leaves
    the rows with missing or non-finite values out of every metric and figure."""
    from tgpflow.io.outputs import check_replace

    check_replace(out, "report", overwrite=overwrite)  # before the metrics, which take minutes
    with warnings.catch_warnings():  # rows go to the model as arrays in its own column order
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        return _write_report(model, X, out, n_directions, n_model_samples, n_plot_rows, random_state, columns,
                             on_bad_rows, overwrite)


def _write_report(model: Any, X: Any, out: AnyPath, n_directions: int, n_model_samples: int, n_plot_rows: int,
                  random_state: int, columns: list[str] | None, on_bad_rows: str, overwrite: bool) -> dict[str, Any]:
    """:func:`write_report`'s work: the metrics the model's kind has, then the figures, into one atomic directory."""
    plt = pyplot()
    names = getattr(model, "feature_names_in_", None)
    if columns is None and names is not None and not isinstance(X, np.ndarray):
        columns = [str(c) for c in names]
    source = as_source(X, columns=columns, on_bad_rows=on_bad_rows)
    labels = [str(c) for c in (columns or source.columns)]
    d = source.n_columns
    rng = np.random.default_rng(random_state)
    rows = pilot_sample(source, rows=n_plot_rows, random_state=random_state).rows
    rows = rows[rng.permutation(rows.shape[0])]  # chunk by chunk as read: the figures' first rows from every chunk
    draws = _draws(model, n_model_samples, random_state)
    method = getattr(model, "method", None) or type(model).__name__
    metrics: dict[str, Any] = {
        "source": source.description, "model": type(model).__name__, "method": method, "d": d,
        "rows_in_model": getattr(model, "n_samples_seen_", None), "hyvarinen_loss": hyvarinen_loss(model, source),
        "ksd2": ksd(rows[:KSD_ROWS], model, random_state=random_state),
        "ksd_rows": min(KSD_ROWS, rows.shape[0]), "fit_diagnostics": getattr(model, "fit_diagnostics_", None),
        "selection": getattr(model, "selection_", None), "figures": []}
    if model_log_normalizer(model) is not None and hasattr(model, "log_density"):
        metrics["loglik"] = heldout_loglik(model, source)
    if draws is not None:
        sliced = sliced_distances(source, model, n_directions=n_directions, n_model_samples=n_model_samples,
                                  random_state=random_state)
        metrics["sliced"] = sliced.summary()
        metrics["sliced_quantiles"] = {k: np.quantile(v, [0.1, 0.5, 0.9]).tolist()
                                       for k, v in (("ks", sliced.ks), ("wd", sliced.wd))}
        if hasattr(model, "sample"):  # its own resampler
            check = sample_check(model, source, random_state=random_state)
        else:  # a kernel model's base draws, resampled here
            points, weights = draws
            ess = float(weights.sum() ** 2 / np.square(weights).sum())
            check = sample_check(model, source, samples=_resample(points, weights, max(rows.shape[0] // 2, 10), rng),
                                 ess_fraction=ess / weights.size, random_state=random_state)
        metrics["sample_check"] = check.to_dict()
    metrics["verdict"] = _verdict(metrics)
    samples = None if draws is None else _resample(*draws, rows.shape[0], rng)
    with atomic_path(out, "report", overwrite=overwrite, marker=True, directory=True) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        figures = metrics["figures"]
        if samples is not None:
            figures.append(_marginals(plt, tmp, rows, samples, labels, method))
            if d >= 2:
                figures.append(_pairs(plt, tmp, rows, samples, labels, method))
        if d >= 2:
            figures.append(_score_field(plt, tmp, model, rows, labels, method))
        if hasattr(model, "log_density"):
            name, metrics["anomaly_scores"] = _anomaly_scores(plt, tmp, model, rows, method)
            figures.append(name)
        if samples is not None and d == 2 and hasattr(model, "log_density"):
            figures.extend(_density(plt, tmp, model, rows, labels, method))
        if draws is not None and d > 2:
            figures.append(_projected_cdfs(plt, tmp, rows, *draws, method, random_state))
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float))
    return metrics


def _verdict(metrics: dict[str, Any]) -> dict[str, Any]:
    """Passed, or the reasons not: the fit's own warnings and the sample check's failed checks."""
    reasons = [" ".join(str(w).split()) for w in (metrics.get("fit_diagnostics") or {}).get("warnings") or []]
    check = metrics.get("sample_check")
    if check is not None:
        reasons += [f"sample check failed: {name}" for name, ok in check["checks"].items() if not ok]
    return {"passed": not reasons, "reasons": reasons, "sample_check": None if check is None else check["passed"]}


def _save(plt: Any, fig: Any, tmp: Any, name: str, dpi: int = 110) -> str:
    """Write the figure as ``tmp/name`` and close it; returns the name."""
    fig.tight_layout()
    save_png(fig, tmp / name, dpi)
    plt.close(fig)
    return name


def _marginals(plt: Any, tmp: Any, rows: np.ndarray, samples: np.ndarray, labels: list[str], method: str) -> str:
    """Each column: the rows' histogram (bars) and the samples' (a line), on common bins, in the data's units."""
    d = rows.shape[1]
    ncol = min(d, 4)
    nrow = -(-d // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 2.9 * nrow), squeeze=False)
    for j, ax in enumerate(axes.ravel()):
        if j >= d:
            ax.set_visible(False)
            continue
        lo, hi = np.quantile(np.r_[rows[:, j], samples[:, j]], [0.001, 0.999])
        bins = np.linspace(lo, hi, 50) if hi > lo else 20
        ax.hist(rows[:, j], bins=bins, density=True, color="0.75", edgecolor="0.55", label=f"rows ({len(rows):,})")
        ax.hist(samples[:, j], bins=bins, density=True, histtype="step", linewidth=1.6, color="tab:red",
                label=f"{method} samples")
        ax.set_title(labels[j])
        ax.set_xlabel(f"{labels[j]} (data units)")
        ax.set_ylabel("density")
        ax.locator_params(axis="x", nbins=5)
        ax.ticklabel_format(axis="both", style="sci", scilimits=(-3, 4))
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Each column: the rows and the model's samples")
    return _save(plt, fig, tmp, "marginals.png")


def _pairs(plt: Any, tmp: Any, rows: np.ndarray, samples: np.ndarray, labels: list[str], method: str) -> str:
    """The rows and the samples over each pair of the first :data:`PAIR_COLUMNS` columns (lower triangle)."""
    k = min(rows.shape[1], PAIR_COLUMNS)
    n = min(len(rows), 5_000)
    fig, axes = plt.subplots(k - 1, k - 1, figsize=(3.3 * (k - 1), 3.3 * (k - 1)), squeeze=False)
    for a in range(1, k):
        for b in range(k - 1):
            ax = axes[a - 1, b]
            if b >= a:
                ax.set_visible(False)
                continue
            ax.scatter(rows[:n, b], rows[:n, a], s=2, c="0.45", alpha=0.35, label="rows", rasterized=True)
            ax.scatter(samples[:n, b], samples[:n, a], s=2, c="tab:red", alpha=0.25, label=f"{method} samples",
                       rasterized=True)
            ax.set_xlabel(labels[b])
            ax.set_ylabel(labels[a])
            ax.locator_params(axis="both", nbins=5)
            ax.ticklabel_format(axis="both", style="sci", scilimits=(-3, 4))
    axes[0, 0].legend(fontsize=8, markerscale=4)
    fig.suptitle(f"Pairs of columns: the rows (grey) and the model's samples (red), {n:,} each")
    return _save(plt, fig, tmp, "pairs.png")


def _slice_grid(rows: np.ndarray, n: int = 25) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A grid over the first two columns' central 99.8 %, the other columns at their medians."""
    lo, hi = np.quantile(rows[:, :2], 0.001, axis=0), np.quantile(rows[:, :2], 0.999, axis=0)
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], n), np.linspace(lo[1], hi[1], n))
    pts = np.tile(np.median(rows, axis=0), (gx.size, 1))
    pts[:, 0], pts[:, 1] = gx.ravel(), gy.ravel()
    return gx, gy, pts


def _score_field(plt: Any, tmp: Any, model: Any, rows: np.ndarray, labels: list[str], method: str) -> str:
    """The direction of ∇ log p on a grid over the first two columns (the others at their medians), over the rows."""
    gx, gy, pts = _slice_grid(rows)
    s = np.asarray(model.grad_log_density(pts), dtype=np.float64)[:, :2]
    fig, ax = plt.subplots(figsize=(6, 5.2))
    ax.scatter(rows[:5_000, 0], rows[:5_000, 1], s=2, c="0.6", alpha=0.35, label="rows", rasterized=True)
    # the direction of steepest ascent as the plot shows it (each axis in its own units: the gradient times each
    # axis's span), drawn at one length; its colour is the score's size in the data's units
    span = np.ptp(pts[:, :2], axis=0)
    u, v = s[:, 0] * span[0], s[:, 1] * span[1]
    length = np.maximum(np.hypot(u, v), 1e-300)
    size = np.log10(np.maximum(np.hypot(s[:, 0], s[:, 1]), 1e-12))
    q = ax.quiver(gx.ravel(), gy.ravel(), u / length, v / length, size, cmap="viridis", angles="uv", pivot="mid",
                  scale=35, width=0.004)
    fig.colorbar(q, ax=ax, label=f"log₁₀ of the size of (∂/∂{labels[0]}, ∂/∂{labels[1]}) log p")
    ax.set_xlim(gx.min(), gx.max())  # the grid's box, square on the page: the arrows' directions were scaled to it
    ax.set_ylim(gy.min(), gy.max())
    ax.set_box_aspect(1)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    other = "\n(the other columns at their medians)" if rows.shape[1] > 2 else ""
    ax.set_title(f"{method}: the direction of ∇ log p over {labels[0]} and {labels[1]}{other}", fontsize=9)
    ax.legend(loc="upper right", fontsize=8, markerscale=4)
    return _save(plt, fig, tmp, "score_field.png")


def _anomaly_scores(plt: Any, tmp: Any, model: Any, rows: np.ndarray, method: str) -> tuple[str, dict[str, Any]]:
    """The histogram of the rows' anomaly scores with the fit's threshold; and the threshold (on the histogram's
    scale) and the share of the rows above it."""
    log_z = model_log_normalizer(model)
    normalized = log_z is not None
    ld = np.asarray(model.log_density(rows)) - (log_z or 0.0)
    scores = -ld[np.isfinite(ld)]  # drawn; a row of zero (or undefined) density counts as flagged below
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.hist(scores, bins=80, color="0.7", edgecolor="0.5", label=f"rows ({scores.size:,})")
    threshold = score_threshold(model)
    flagged = None
    if threshold is not None:
        flagged = float(np.mean(is_anomalous(ld, threshold)))  # as tgpflow score flags them
        ax.axvline(threshold, color="tab:red", label=f"threshold {threshold:.3g}: {100 * flagged:.2g} % flagged")
    ax.set_xlabel("anomaly score, −log density" + ("" if normalized else " (unnormalised)"))
    ax.set_ylabel("rows")
    ax.set_title(f"{method}: the rows' anomaly scores")
    ax.legend(fontsize=8)
    return _save(plt, fig, tmp, "anomaly_scores.png"), {"threshold": threshold, "flagged": flagged,
                                                        "rows": int(ld.size), "normalized": normalized}


def _density(plt: Any, tmp: Any, model: Any, rows: np.ndarray, labels: list[str], method: str) -> list[str]:
    """Density contours over the rows (d = 2), and across the noise ladder for NCFD."""
    from tgpflow.models.tgp_methods import get_method

    names = []
    sigmas: list[float | None] = [None]
    noise = getattr(model, "noise_levels_", None)
    if noise is not None and hasattr(model, "method") and get_method(model.method).noise_conditional:
        levels = np.asarray(noise)[::-1]
        sigmas = [float(s) for s in levels[np.linspace(0, len(levels) - 1, min(4, len(levels))).astype(int)]]
    for name, group in (("density.png", [None]), ("ncfd_levels.png", sigmas if len(sigmas) > 1 else [])):
        if not group:
            continue
        fig, axes = plt.subplots(1, len(group), figsize=(5.2 * len(group), 4.6), squeeze=False)
        for ax, sigma in zip(axes[0], group, strict=True):
            gx, gy, pts = _slice_grid(rows, 150)
            ld = np.asarray(model.log_density(pts) if sigma is None else model.fitted(sigma).log_density(pts))
            ld = ld.reshape(gx.shape)
            dens = np.exp(ld - np.nanmax(ld[np.isfinite(ld)]))
            ax.scatter(rows[:, 0], rows[:, 1], s=1, c="0.6", alpha=0.3, rasterized=True, label="rows")
            c = ax.contour(gx, gy, dens, levels=8, cmap="viridis")
            fig.colorbar(c, ax=ax, label="density / its maximum")
            ax.set_xlabel(labels[0])
            ax.set_ylabel(labels[1])
            ax.set_title(f"{method} density over the rows" if sigma is None
                         else f"σ = {sigma:.3g} (in the model's fitting units)")
        names.append(_save(plt, fig, tmp, name))
    return names


def _projected_cdfs(plt: Any, tmp: Any, rows: np.ndarray, points: np.ndarray, weights: np.ndarray, method: str,
                    random_state: int) -> str:
    V = random_directions(rows.shape[1], 10, np.random.default_rng(random_state))
    fig, axes = plt.subplots(2, 5, figsize=(16, 6.4))
    for k, (v, ax) in enumerate(zip(V, axes.ravel(), strict=True)):
        pd_, pm = rows @ v, points @ v
        order = np.argsort(pm)
        ax.plot(pm[order], np.cumsum(weights[order]) / weights.sum(), color="tab:red", linewidth=1.2,
                label=method)
        ax.plot(np.sort(pd_), np.arange(1, pd_.size + 1) / pd_.size, color="black", linestyle="--", linewidth=1.2,
                label="rows")
        ax.set_title(f"direction {k + 1}", fontsize=9)
        ax.set_xlabel("projection vᵀx")
        if k % 5 == 0:
            ax.set_ylabel("CDF")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("CDFs of 10 random 1-D projections: the rows (dashed) and the model")
    return _save(plt, fig, tmp, "projected_cdfs.png", 100)
