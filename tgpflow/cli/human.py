"""The commands' summaries for people (docs/cli.md, "Output"): a few lines made from the record ``--json`` prints.

Each function takes that record and returns its lines; none reads anything else, so the two outputs cannot say
different things.
"""

from __future__ import annotations

from typing import Any


def number(value: Any, digits: int = 4) -> str:
    """A figure to ``digits`` significant digits (an integer with thousands separators; None as "–")."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def percent(value: float | None) -> str:
    """A share as a percentage: two significant digits below 10 %, whole percents above (99.6 % is "100 %")."""
    if value is None:
        return "–"
    p = 100 * value
    return f"{p:.0f} %" if abs(p) >= 10 else f"{p:.2g} %"


def health_line(diagnostics: dict[str, Any] | None) -> str | None:
    """"healthy: …" with the figures that say so, or "not healthy: <the first warning>"."""
    if not diagnostics:
        return None
    warned = diagnostics.get("warnings") or []
    if warned:
        more = f" (and {len(warned) - 1} more: --json lists them)" if len(warned) > 1 else ""
        return f"not healthy: {' '.join(str(warned[0]).split())}{more}"
    parts = []
    if diagnostics.get("ess_fraction") is not None:
        parts.append(f"effective sample {percent(diagnostics['ess_fraction'])} of the draws")
    if diagnostics.get("mass_outside") is not None:
        limit = diagnostics.get("mass_outside_limit")
        parts.append(f"mass outside the data's box {percent(diagnostics['mass_outside'])}"
                     + (f" (limit {percent(limit)})" if limit is not None else ""))
    return "healthy" + (": " + ", ".join(parts) if parts else "")


def _chosen(record: dict[str, Any]) -> str | None:
    chosen = record.get("selected") or {}
    names = {"bandwidth": "bandwidth", "lam": "λ", "eta": "η", "noise_max": "σ_max", "smoothness": "smoothness"}
    given = {key: chosen[key] for key in names if key in chosen} or {
        key: record[key] for key in ("bandwidth", "lam", "smoothness") if record.get(key) is not None}
    picked = [f"{names[key]} {_lam(value) if key == 'lam' else number(value)}" for key, value in given.items()]
    return ", ".join(picked) or None


def _lam(value: Any) -> str:
    """λ, with λ = ∞ said for what it means."""
    infinite = value == "inf" or (isinstance(value, float) and value == float("inf"))
    return "∞ (the base alone: no tilt improved on it)" if infinite else number(value)


def _bounds(bounds: dict[str, Any] | None) -> str | None:
    if not bounds:
        return None
    out = []
    for col, (lo, hi) in bounds.items():
        if lo is not None and hi is not None:
            out.append(f"{number(lo)} ≤ {col} ≤ {number(hi)}")
        elif lo is not None:
            out.append(f"{col} ≥ {number(lo)}")
        elif hi is not None:
            out.append(f"{col} ≤ {number(hi)}")
    return ", ".join(out) or None


def _open_edges(edges: dict[str, Any] | None) -> str | None:
    """The edges ``bounds="auto"`` found and left open (they neither stop a leak, score better nor make a skewed
    column symmetric)."""
    names = [c for c, test in (edges or {}).items() if not test.get("kept")]
    return (f"edges left open: {', '.join(names)} (no leak, no gain, no skew; "
            "to bound one: --bounds COL:LO:HI, bounds=)" if names else None)


def _discrete(columns: dict[str, Any] | None) -> list[str]:
    """The columns modelled on a lattice, and the atoms at an edge (a value carrying a share of the rows)."""
    if not columns:
        return []
    lattice = [f"{c} (step {number(v['step'])})" for c, v in columns.items() if "step" in v]
    atoms = [f"{c} = {number(a['value'])}" for c, v in columns.items() for key, a in v.items()
             if key.startswith("atom_")]
    return ([f"discrete: {', '.join(lattice)}"] if lattice else []) + ([f"atoms: {', '.join(atoms)}"] if atoms else [])


def fit_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow fit``: what was fitted to what, the chosen settings, the health, where it went."""
    cols = record.get("columns") or []
    shown = ", ".join(cols[:8]) + (f", … ({len(cols)} in all)" if len(cols) > 8 else "")
    lines = [f"fitted {record['method']} to {number(record.get('rows'))} rows × {len(cols)} columns ({shown}) in "
             f"{number(record.get('seconds'), 3)} s → {record['model']}"]
    if record.get("rows_dropped"):
        lines.append(f"  dropped {number(record['rows_dropped'])} bad rows (--on-bad-rows drop)")
    chosen = _chosen(record)
    if chosen:
        lines.append(f"  chosen: {chosen}")
    details = []
    components = (record.get("base_mixture") or {}).get("components")
    if components:
        details.append("base: one Gaussian" if components == 1 else f"base: a mixture of {components} Gaussians")
    if _bounds(record.get("bounds")):
        details.append(f"bounds: {_bounds(record.get('bounds'))}")
    if _open_edges(record.get("edges")):
        details.append(_open_edges(record.get("edges")))
    details += _discrete(record.get("discrete"))
    if record.get("smoothness") is not None:
        details.append(f"smoothness {number(record['smoothness'])}")
    if record.get("anomaly_threshold") is not None:
        details.append(f"anomaly threshold {number(record['anomaly_threshold'])} (−log density)")
    if details:
        lines.append("  " + "; ".join(details))
    health = health_line(record.get("diagnostics"))
    if health:
        lines.append(f"  {health}")
    return lines


def score_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow score``: rows scored, what the columns mean, where they went."""
    kind = "normalised" if record.get("normalized") else "unnormalised: the model has no normaliser"
    lines = [f"scored {number(record.get('rows'))} rows of {record['source']} with {record['model']} → "
             f"{record.get('data') or record['scores']}",
             f"  columns: row, log_density ({kind}), anomaly_score (−log density)"
             + (", anomaly (above the fit's threshold)" if record.get("threshold") is not None else "")]
    if record.get("flagged") is not None and record.get("rows"):
        lines.append(f"  flagged as anomalies: {number(record['flagged'])} rows "
                     f"({percent(record['flagged'] / record['rows'])}; the threshold is the fit's)")
    if record.get("rows_dropped"):
        lines.append(f"  dropped {number(record['rows_dropped'])} bad rows (--on-bad-rows drop)")
    if record.get("filters"):
        lines.append(f"  only the rows the pipeline's filters keep: {record['filters']} (--no-filters for all)")
    return lines


def sample_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow sample``: how many rows, by what, how good the draw is."""
    lines = [f"drew {number(record.get('rows'))} rows from {record['model']} by {record.get('method')} → "
             f"{record['samples']}"]
    figures = []
    if record.get("ess") is not None:
        figures.append(f"effective size {record['ess']:,.0f} of {number(record.get('n_proposals'))} proposals "
                       f"({percent(record.get('ess_fraction'))})")
    if record.get("acceptance_rate") is not None:
        figures.append(f"acceptance {percent(record['acceptance_rate'])}")
    if record.get("rhat_max") is not None:
        figures.append(f"R̂ ≤ {number(record['rhat_max'], 3)}, bulk ESS ≥ {record.get('ess_bulk_min', 0):,.0f} "
                       f"over {record.get('n_chains')} chains")
    if record.get("iterations") is not None:
        figures.append(f"{number(record['iterations'])} SVGD iterations")
    if figures:
        lines.append("  " + "; ".join(figures))
    return lines


def model_info_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow info MODEL``: what the model is, what it was fitted to and with, whether it is healthy."""
    cols = [str(c) for c in record.get("columns") or []]
    shown = ", ".join(cols[:8]) + (", …" if len(cols) > 8 else "")
    lines = [f"{record['model']}: {record.get('method')} ({record.get('kind')}), fitted to "
             f"{number(record.get('rows'))} rows × {record.get('d')} columns ({shown})",
             f"  written {record.get('created')} by tgpflow {record.get('tgpflow_version')}"]
    chosen = _chosen({"selected": record.get("selection"), **record})
    if chosen:
        lines.append(f"  chosen: {chosen}")
    pre = record.get("preprocessing") or {}
    lines.append("  rows in and out are in the data's units (the model standardizes them itself)"
                 if pre.get("standardized") else f"  {pre.get('note', 'fitted to the rows as given')}")
    if _bounds(record.get("bounds")):
        lines.append(f"  bounds: {_bounds(record.get('bounds'))}")
    if _open_edges((record.get("pilot") or {}).get("edges")):
        lines.append(f"  {_open_edges(record['pilot']['edges'])}")
    lines += [f"  {text}" for text in _discrete(record.get("discrete"))]
    health = health_line(record.get("diagnostics"))
    if health:
        lines.append(f"  {health}")
    lines.append("  checksums verified; --json for every field")
    return lines


def versions_info_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow info MODELDIR``: the current version and a line per version."""
    history = record.get("history") or []
    lines = [f"{record['model']}: {len(history)} version(s), current {record.get('current') or 'none'}"]
    for row in history:
        lines.append("  " + version_line(row))
    lines.append("  --json for each version's run info")
    return lines


def version_line(row: dict[str, Any]) -> str:
    """One version of a model directory: rows, partitions, health and drift."""
    parts = [f"{row.get('version')}", f"{row.get('date') or row.get('created') or ''}".strip(),
             f"{number(row.get('rows'))} rows"]
    if row.get("ess_fraction") is not None:
        parts.append(f"ESS {percent(row['ess_fraction'])}")
    if row.get("heldout_loglik") is not None:
        parts.append(f"previous version on the new rows {number(row['heldout_loglik'])} nats/row")
    if row.get("warnings"):
        parts.append(f"{row['warnings']} fit warning(s)")
    if row.get("drifted"):
        parts.append(f"drifted: {', '.join(map(str, row['drifted']))}")
    return "  ".join(p for p in parts if p)


def run_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow run``: what was read, which versions were published, their health, which partitions drifted."""
    head = f"{record.get('spec')}: run {record.get('run', '')} in {number(record.get('seconds'), 3)} s"
    held = [f"  held back: {name} ({why})" for name, why in (record.get("held_back") or {}).items()]
    if record.get("message"):
        return [f"{head}: {record['message']}", *(f"  scored {s}" for s in record.get("scored") or []), *held]
    added, removed = record.get("added") or [], record.get("removed") or []
    lines = [f"{head}: {len(added)} new partition(s)" + (f", {len(removed)} removed" if removed else "")]
    health = record.get("health") or {}
    for name, version in (record.get("versions") or {}).items():
        rows = (record.get("rows") or {}).get(name)
        h = health.get(name) or {}
        state = health_line({"warnings": h.get("warnings"), "ess_fraction": h.get("ess_fraction"),
                             "mass_outside": h.get("mass_outside"), "mass_outside_limit": h.get("mass_outside_limit")}
                            ) if h else None
        dropped = (record.get("rows_dropped") or {}).get(name)
        lines.append(f"  {name}: published {version}, {number(rows)} rows"
                     + (f" ({number(dropped)} bad rows dropped: source.on_bad_rows)" if dropped else "")
                     + (f"; {state}" if state else ""))
    drift = record.get("drift") or {}
    flagged = {k: v for k, v in drift.items() if v.get("drifted")}
    for key, verdict in flagged.items():
        moved = ", ".join(map(str, verdict.get("columns") or [])) or "the joint distribution only"
        lines.append(f"  drifted: {key} ({moved}; sliced KS {number(verdict.get('sliced_ks'), 3)})")
    if drift and not flagged:
        lines.append(f"  no drift in the {len(drift)} new partition(s) tested (drift.alpha)")
    rates = record.get("anomaly_rates") or []
    if rates:
        total = sum(r["rows"] for r in rates)
        flagged_rows = sum(r["rows"] * r["anomaly_rate"] for r in rates if r.get("anomaly_rate") is not None)
        lines.append(f"  scored {len(rates)} partition(s), {number(total)} rows; anomaly rate "
                     f"{percent(flagged_rows / total if total else None)}")
    return lines + held


def plan_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow run --dry-run``: what a run would read, refit and score."""
    parts = record.get("partitions") or {}
    counts = ", ".join(f"{len(v) if isinstance(v, list) else v} {k}" for k, v in parts.items())
    lines = [f"{record.get('spec')}: run {record.get('run')} would find partitions: {counts or 'none'} (nothing "
             f"written)"]
    for name, plan in (record.get("refit") or {}).items():
        lines.append(f"  {name}: refit {plan.get('refit') if isinstance(plan, dict) else plan}")
    if record.get("score"):
        lines.append(f"  score: {record['score']}")
    return lines


def validate_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow validate``: the spec is valid; its models, policy, cluster and the partition checked."""
    source = record.get("source") or {}
    checked = source.get("checked")
    return [f"{record['spec']}: valid ({record.get('name')}: models {', '.join(record.get('models') or [])}, "
            f"refit {record.get('refit')})",
            f"  cluster: {record.get('cluster')}",
            f"  source: {f'checked {checked}' if checked else source.get('note') or 'no partition to check yet'}"]


def gc_lines(record: dict[str, Any]) -> list[str]:
    """``tgpflow gc``: what was (or would be) removed."""
    removed = record.get("removed") or []
    verb = "would remove" if record.get("dry_run") else "removed"
    return [f"{record['spec']}: {verb} {len(removed)} item(s)", *(f"  {r}" for r in removed)]
