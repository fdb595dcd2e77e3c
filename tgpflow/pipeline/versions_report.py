"""``tgpflow report MODELDIR --out DIR``: a static page a person looks at, for a pipeline's model directory
(docs/drift.md, "The report").

``DIR/index.html`` (plain HTML, no script) with the history table and three figures, each a PNG beside it:

* ``timeline.png`` — per run: the rows the version describes; its log-likelihood on its pilot rows and the previous
  version's on the run's new partitions (held out, with its standard error); the normaliser's ESS with the 1 %
  health line; each new partition's anomaly rate under the previous version, beside the threshold's quantile; each
  new partition's drift z, with the z at which the log-likelihood test alone would flag it (its share of alpha,
  normal or Student's t as the test read it), drifted partitions in red;
* ``marginals.png`` — each column of the current version: the rows it was fitted on (the store's binned reference,
  bars) and the model's marginal (a histogram of draws on the same bins, a line), in the data's units;
* ``drifted.png`` — the newest flagged partition's columns (its binned rows) beside the marginals of the version
  that flagged it (present only while the store still holds that partition's sums).

Also ``report.json``, the figures the page shows. The directory appears whole or not at all.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np

from tgpflow.io.atomic import AnyPath, atomic_path
from tgpflow.pipeline.drift_step import FRAME_KIND, SUMS_KIND
from tgpflow.pipeline.drift_sums import DriftFrame, DriftSums
from tgpflow.pipeline.figures import pyplot, save_png
from tgpflow.pipeline.history import history
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions
from tgpflow.models.diagnostics import MIN_ESS_FRACTION

__all__ = ["write_versions_report"]

#: Columns drawn at most in one figure.
MAX_PANELS = 12


def _edges(frame: DriftFrame, j: int) -> tuple[np.ndarray, np.ndarray]:
    """The edges of column ``j``'s bins within the pilot's range (from its smallest value to just above its largest)
    and the bins they draw; rows beyond that range are in the two open bins, counted but not drawn."""
    cuts = frame.column_cuts[j][np.isfinite(frame.column_cuts[j])]
    return cuts, np.arange(1, cuts.size)


def _draw_marginals(plt: Any, path: Any, frame: DriftFrame, data: DriftSums, draws: np.ndarray | None,
                    columns: list[str], title: str, data_label: str, model_label: str) -> None:
    n = min(len(columns), MAX_PANELS)
    ncol = min(4, n)
    nrow = -(-n // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow), squeeze=False)
    index = {c: j for j, c in enumerate(frame.columns)}
    for ax, column in zip(axes.ravel(), columns[:n], strict=False):
        j = index[column]
        edges, bins = _edges(frame, j)
        widths = np.diff(edges)
        counts = data.column_counts[j, bins].astype(float)
        ax.stairs(counts / max(data.rows, 1) / widths, edges, fill=True, color="tab:blue", alpha=0.35,
                  label=data_label)
        if draws is not None:  # as a share of all draws, like the data: mass beyond the range is not drawn
            model = np.histogram(draws[:, j], edges)[0] / max(draws.shape[0], 1) / widths
            ax.stairs(model, edges, color="tab:red", linewidth=1.4, label=model_label)
        ax.set_title(column)
        ax.set_xlabel(f"{column} (data units)")
        ax.set_ylabel("density")
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path, 90)
    plt.close(fig)


def _draw_timeline(plt: Any, path: Any, rows: list[dict[str, Any]], infos: dict[str, dict[str, Any]]) -> None:
    runs = [r["run"] for r in rows]
    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    axes[0].plot(runs, [r["rows"] for r in rows], "o-", color="tab:blue", label="rows the version describes")
    axes[0].set_ylabel("rows")
    axes[0].set_title("Rows")
    axes[1].plot(runs, [r["pilot_loglik"] for r in rows], "o-", color="tab:gray", label="this version, pilot rows "
                                                                                       "(fitted on them)")
    held = [(r["run"], (infos[r["version"]].get("health") or {}).get("heldout_loglik")) for r in rows]
    held = [(run, h) for run, h in held if h]
    if held:
        axes[1].errorbar([run for run, _ in held], [h["mean"] for _, h in held],
                         yerr=[2 * (h["se"] or 0.0) for _, h in held], fmt="s", color="tab:green", capsize=3,
                         label="previous version, the run's new partitions (held out; ±2 se)")
    axes[1].set_ylabel("mean log-likelihood (nats/row)")
    axes[1].set_title("Normalised log-likelihood")
    axes[2].semilogy(runs, [r["ess_fraction"] or np.nan for r in rows], "o-", color="tab:purple",
                     label="normaliser ESS / proposals")
    axes[2].axhline(MIN_ESS_FRACTION, color="tab:red", linestyle="--", label=f"health limit {MIN_ESS_FRACTION:g}")
    axes[2].set_ylabel("ESS fraction")
    axes[2].set_title("Health of the fit")
    quantile, thresholds = None, False
    for r in rows:
        drift = infos[r["version"]].get("drift") or {}
        quantile = infos[r["version"]].get("threshold_quantile") or quantile
        for key, v in drift.items():
            x = r["run"]
            if v.get("anomaly_rate") is not None:
                axes[3].plot(x, v["anomaly_rate"], "o", color="tab:red" if v["drifted"] else "tab:blue")
            if v.get("z") is not None:
                axes[4].plot(x, v["z"], "o", color="tab:red" if v["drifted"] else "tab:blue")
                if v.get("z_threshold") is not None:
                    axes[4].plot(x, v["z_threshold"], "_", color="tab:red", markersize=14,
                                 label=None if thresholds else "z at which the log-likelihood test alone flags")
                    thresholds = True
                if v["drifted"]:
                    axes[4].annotate(key, (x, v["z"]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    if quantile:
        axes[3].axhline(quantile, color="tab:gray", linestyle="--", label=f"threshold quantile {quantile:g}")
    axes[3].set_ylabel("share of rows flagged")
    axes[3].set_title("Anomaly rate of each new partition (previous version; red: drifted)")
    axes[4].set_ylabel("z")
    axes[4].set_title("Drift z of each new partition (red: drifted by any test)")
    axes[4].set_xlabel("run")
    for ax in axes:
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    save_png(fig, path, 90)
    plt.close(fig)


def _draws(est: Any, n: int, seed: int) -> np.ndarray | None:
    try:
        return np.asarray(est.fitted().sample(n, seed), dtype=np.float64)
    except (ValueError, AttributeError, TypeError):  # no Gaussian base to draw from: the figure shows the data
        return None


def _table(rows: list[dict[str, Any]]) -> str:
    head = ["version", "run", "date", "rows", "partitions", "warnings", "ESS", "held-out log-lik", "drifted"]
    cells = []
    for r in rows:
        ess = "" if r["ess_fraction"] is None else f"{100 * r['ess_fraction']:.1f}%"
        held = "" if r["heldout_loglik"] is None else f"{r['heldout_loglik']:.3f}"
        cells.append([r["version"], r["run"], r["date"], f"{r['rows']:,.0f}", r["partitions"], r["warnings"], ess,
                      held, ", ".join(r["drifted"])])
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in cells]
    return "\n".join([*out, "</table>"])


def write_versions_report(model_dir: AnyPath, out: AnyPath, *, store: AnyPath | None = None, n_samples: int = 20_000,
                          random_state: int = 0, overwrite: bool = True) -> dict[str, Any]:
    """Write the report of the module docstring for the pipeline model directory ``model_dir``; returns what
    ``report.json`` holds, with ``notes`` saying why a figure is missing. ``store``: the pipeline's statistics store
    (default: where the current version's run had it, ``store`` of its run info)."""
    from tgpflow.io.outputs import check_replace

    check_replace(out, "report", overwrite=overwrite)
    vers = ModelVersions(model_dir)
    rows = history(vers)
    if not rows:
        raise ValueError(f"{vers.root}: no published version to report on")
    infos = {r["version"]: vers.info(r["version"]) for r in rows}
    current = rows[-1]["version"]
    info = infos[current]
    notes: list[str] = []
    where = store or info.get("store")
    stats = StatsStore(where) if where else None
    manifest = stats.read_manifest() if stats is not None and stats.manifest_path.exists() else None
    if manifest is None:
        notes.append(f"no statistics store at {where} (moved? give it: --store)" if where else
                     "the current version's run info names no statistics store (written before reports read it; "
                     "give it: --store)")
    entry = (manifest or {}).get("drift") or {}
    if manifest is not None and not (entry.get("frame") and entry.get("reference")):
        notes.append(f"the store {where} keeps no drift sums yet (written before runs kept them): no marginals")
    plt = pyplot()
    figures: list[tuple[str, str]] = []
    drifted = next(((r, k) for r in reversed(rows) for k in r["drifted"]), None)
    with atomic_path(out, "report", overwrite=overwrite, marker=True, directory=True) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        _draw_timeline(plt, tmp / "timeline.png", rows, infos)
        figures.append(("timeline.png", "The model's versions, run by run: rows, log-likelihood, health, anomaly "
                                        "rate and drift of each new partition."))
        if entry.get("frame") and entry.get("reference"):
            frame = DriftFrame.from_arrays(*stats.load_arrays(entry["frame"], FRAME_KIND))
            reference = DriftSums.from_arrays(*stats.load_arrays(entry["reference"], SUMS_KIND))
            columns = list(frame.columns)
            _draw_marginals(plt, tmp / "marginals.png", frame, reference, _draws(vers.load(current), n_samples,
                                                                                  random_state), columns,
                            f"Each column: the rows {current} was fitted on, and {current}'s marginal",
                            f"rows ({reference.rows:,})", f"model {current}")
            figures.append(("marginals.png", f"Each column's marginal in the data's units: the rows the current "
                                             f"version ({current}) was fitted on, and the model."))
            part = (manifest["partitions"].get(drifted[1]) or {}).get("drift") if drifted else None
            if drifted and not (part and part.get("sums")):
                notes.append(f"partition {drifted[1]} has left the store (its sums are gone): no figure of it")
            if part and part.get("sums"):
                sums = DriftSums.from_arrays(*stats.load_arrays(part["sums"], SUMS_KIND))
                verdict = part.get("verdict") or {}
                # the version current before the run that flagged it: the one it was compared with
                at = [r["version"] for r in rows].index(drifted[0]["version"])
                before = rows[at - 1]["version"] if at > 0 else drifted[0]["version"]
                shown = (verdict.get("columns") or []) + [c for c in columns if c not in (verdict.get("columns") or [])]
                model = _draws(vers.load(before), n_samples, random_state)
                _draw_marginals(plt, tmp / "drifted.png", frame, sums, model, shown,
                                f"Partition {drifted[1]} (flagged at run {drifted[0]['run']}) beside {before}",
                                f"partition {drifted[1]}", f"model {before} (before it)")
                figures.append(("drifted.png", f"The newest drifted partition, {drifted[1]}: its columns (flagged "
                                               f"ones first) beside the version that flagged it, {before}."))
        summary = {"model": str(vers.root), "current": current, "history": rows, "figures": [f for f, _ in figures],
                   "latest_drifted": None if drifted is None else drifted[1], "notes": notes}
        (tmp / "report.json").write_text(json.dumps(summary, indent=1, default=float))
        body = "\n".join(f'<figure><img src="{f}" alt="{html.escape(caption)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>" for f, caption in figures)
        health = info.get("health") or {}
        said = ("healthy" if not health.get("warnings") else
                f"{len(health['warnings'])} warning(s): " + "; ".join(health["warnings"]))
        (tmp / "index.html").write_text(
            f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tgpflow: "
            f"{html.escape(vers.root.name)}</title>\n<style>body{{font-family:sans-serif;max-width:1100px;margin:2em "
            f"auto}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px}} "
            f"img{{max-width:100%}}</style></head>\n<body>\n<h1>{html.escape(vers.root.name)}: {len(rows)} "
            f"version(s), current {current}</h1>\n<p>Current version: {info.get('rows', 0):,.0f} rows from "
            f"{len(info.get('partitions') or [])} partition(s), run {info.get('run')} on {info.get('date')}; "
            f"{html.escape(said)}. Latest drifted partition: "
            f"{html.escape(drifted[1]) if drifted else 'none'}.</p>\n"
            + "".join(f"<p><em>{html.escape(n)}</em></p>\n" for n in notes)
            + f"{_table(rows)}\n{body}\n</body></html>\n")
    return summary
