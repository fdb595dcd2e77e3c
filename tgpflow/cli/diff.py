"""``tgpflow diff``: what changed between two versions of a pipeline's model."""

from __future__ import annotations

from typing import Any

import click

from tgpflow.cli.app import Refused, main, model_path_problem, runtime_errors
from tgpflow.cli.output import emit


@main.command()
@click.argument("model_dir", metavar="MODELDIR")
@click.argument("version_a", metavar="VA")
@click.argument("version_b", metavar="VB")
@click.option("--samples", default=20_000, show_default=True, type=click.IntRange(min=100),
              help="Rows drawn from each version to compare them.")
@click.option("--seed", default=0, show_default=True, help="Seed of the draws.")
def diff(model_dir: str, version_a: str, version_b: str, samples: int, seed: int) -> None:
    """Compare two published versions of MODELDIR (e.g. v000003 v000009) through samples of each: the sliced
    KS/Wasserstein distances (beside the floor two samples of VA give) and the columns that moved."""
    from tgpflow.pipeline.history import diff_versions
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    if not is_versions_dir(model_dir):
        raise Refused(model_path_problem(model_dir) or f"{model_dir} is not a pipeline's model directory (no "
                      f"CURRENT): diff compares two versions a pipeline published (outputs.models/<model name>)")
    with runtime_errors():
        out = diff_versions(ModelVersions(model_dir), version_a, version_b, n_samples=samples, random_state=seed)
    emit(out, _lines, indent=1)


def _lines(out: dict[str, Any]) -> list[str]:
    """The summary for people: rows and partitions, the distances beside their floor, the columns that moved."""
    version_a, version_b, rows, parts = out["from"], out["to"], out["rows"], out["partitions"]
    lines = [f"{version_a} → {version_b}: rows {rows[version_a]:,.0f} → {rows[version_b]:,.0f}; partitions "
             f"+{len(parts['added'])} −{len(parts['removed'])}",
             f"sliced KS {out['sliced_ks']:.4f} (sampling floor {out['floor']['sliced_ks']:.4f}), sliced WD "
             f"{out['sliced_wd']:.4f} (floor {out['floor']['sliced_wd']:.4f})"]
    if not out["moved"]:
        lines.append("no column moved beyond sampling noise")
    for c in out["moved"]:
        v = out["columns"][c]
        shift = f"mean shift {v['shift']:+.3f} sd" if v["shift"] is not None else f"mean change {v['change']:+.4g}"
        lines.append(f"  {c}: KS {v['ks']:.4f}, Wasserstein {v['wd']:.4g} (column units), {shift}")
    return lines
