"""``tgpflow report``: metrics JSON and the figures a person looks at ([Paisley et al.] Figs 2–5).

Writes, into one directory that appears whole or not at all (``atomic_path``):

* ``metrics.json`` — sliced KS/WD summaries ([Paisley et al.] §IV) and the per-direction values'
  quantiles, the Hyvärinen loss and the normalised log-likelihood over the source (docs/mathematics.md, "Metrics"),
  the fit's diagnostics, the sample check against the source's rows
  (:func:`tgpflow.metrics.sample_check`), model facts;
* ``density.png`` (d = 2) — density contours over the data (Figs 2/5);
* ``projected_cdfs.png`` (d > 2) — a grid of projected CDFs, data vs model (Fig 4);
* ``ncfd_levels.png`` (NCFD, d = 2) — contours across σ (Fig 3).

``out`` may be a path or an fsspec URL (:mod:`tgpflow.io.atomic`: off the local filesystem the
directory is a version made current by one pointer object; :func:`~tgpflow.io.atomic.resolve` names it).

Plots use a bounded pilot sample of the source (never the whole of it). matplotlib is an
optional extra (``pip install tgpflow[report]``), imported only here.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tgpflow.io.atomic import AnyPath, atomic_path
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import as_source
from tgpflow.metrics.hyvarinen import heldout_loglik, hyvarinen_loss
from tgpflow.metrics.sample_check import sample_check
from tgpflow.metrics.sliced import model_reference_sample, random_directions, sliced_distances
from tgpflow.models.tgp_methods import get_method
from tgpflow.pipeline.figures import pyplot, save_png

__all__ = ["write_report"]


def _grid(rows: np.ndarray, n: int = 150) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = np.quantile(rows, 0.001, axis=0), np.quantile(rows, 0.999, axis=0)
    pad = 0.1 * (hi - lo)
    gx, gy = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], n), np.linspace(lo[1] - pad[1], hi[1] + pad[1], n))
    return gx, gy, np.column_stack([gx.ravel(), gy.ravel()])


def _contours(ax: Any, model: Any, rows: np.ndarray, sigma: float | None = None) -> None:
    gx, gy, pts = _grid(rows)
    ld = model.fitted(sigma).log_density(pts).reshape(gx.shape)
    dens = np.exp(ld - np.nanmax(ld[np.isfinite(ld)]))
    ax.scatter(rows[:, 0], rows[:, 1], s=1, c="0.6", alpha=0.3, rasterized=True)
    ax.contour(gx, gy, dens, levels=8, cmap="viridis")


def write_report(model: Any, X: Any, out: AnyPath, *, n_directions: int = 500, n_model_samples: int = 250_000,
                 n_plot_rows: int = 20_000, random_state: int = 0, columns: list[str] | None = None,
                 on_bad_rows: str = "raise", overwrite: bool = True) -> dict[str, Any]:
    """Compute the metrics of ``model`` on ``X`` and write ``out/`` (see module docstring); an existing
    ``out`` is replaced only if it is a tgpflow report and ``overwrite``. ``on_bad_rows="drop"`` leaves
    the rows with missing or non-finite values out of every metric and figure."""
    from tgpflow.io.outputs import check_replace

    check_replace(out, "report", overwrite=overwrite)  # before the metrics, which take minutes
    plt = pyplot()
    names = getattr(model, "feature_names_in_", None)
    if columns is None and names is not None and not isinstance(X, np.ndarray):
        columns = [str(c) for c in names]
    source = as_source(X, columns=columns, on_bad_rows=on_bad_rows)
    d = source.n_columns
    sliced = sliced_distances(source, model, n_directions=n_directions, n_model_samples=n_model_samples,
                              random_state=random_state)
    metrics: dict[str, Any] = {
        "source": source.description, "method": model.method, "d": d, "rows_in_model": model.n_samples_seen_,
        "bandwidth": model.bandwidth_, "sliced": sliced.summary(),
        "sliced_quantiles": {k: np.quantile(v, [0.1, 0.5, 0.9]).tolist() for k, v in (("ks", sliced.ks), ("wd", sliced.wd))},
        "hyvarinen_loss": hyvarinen_loss(model, source),
        "loglik": heldout_loglik(model, source) if getattr(model, "normalizer_", None) is not None else None,
        "selection": getattr(model, "selection_", None),
        "fit_diagnostics": getattr(model, "fit_diagnostics_", None),
        "sample_check": sample_check(model, source, random_state=random_state).to_dict(),
        "figures": [],
    }
    rows = pilot_sample(source, rows=n_plot_rows, random_state=random_state).rows
    with atomic_path(out, "report", overwrite=overwrite, marker=True, directory=True) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        if d == 2:
            fig, ax = plt.subplots(figsize=(5, 5))
            _contours(ax, model, rows)
            ax.set_title(f"{model.method.upper()} density over the data")
            save_png(fig, tmp / "density.png", 110)
            plt.close(fig)
            metrics["figures"].append("density.png")
            if get_method(model.method).noise_conditional:  # the density at a few levels of its ladder
                levels = np.asarray(model.noise_levels_)[::-1]
                show = levels[np.linspace(0, len(levels) - 1, min(4, len(levels))).astype(int)]
                fig, axes = plt.subplots(1, len(show), figsize=(4 * len(show), 4), squeeze=False)
                for ax, s in zip(axes[0], show, strict=True):
                    _contours(ax, model, rows, sigma=float(s))
                    ax.set_title(f"σ = {s:.3g}")
                save_png(fig, tmp / "ncfd_levels.png", 110)
                plt.close(fig)
                metrics["figures"].append("ncfd_levels.png")
        if d > 2:
            points, weights = model_reference_sample(model, min(n_model_samples, 100_000), random_state)
            V = random_directions(d, 10, np.random.default_rng(random_state))
            fig, axes = plt.subplots(2, 5, figsize=(16, 6))
            for v, ax in zip(V, axes.ravel(), strict=True):
                pd_, pm = rows @ v, points @ v
                order = np.argsort(pm)
                ax.plot(np.sort(pd_), np.arange(1, pd_.size + 1) / pd_.size, color="tab:blue", label="data")
                ax.plot(pm[order], np.cumsum(weights[order]), color="tab:red", label=model.method.upper())
                ax.set_xticks([])
            axes[0, 0].legend()
            fig.suptitle("CDFs of random 1-D projections: data vs model")
            save_png(fig, tmp / "projected_cdfs.png", 100)
            plt.close(fig)
            metrics["figures"].append("projected_cdfs.png")
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float))
    return metrics
