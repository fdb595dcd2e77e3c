"""``tgpflow info``: describe a saved model or a pipeline's model directory."""

from __future__ import annotations

from typing import Any

import click

from tgpflow.cli.app import check_model_path, load_model, main, runtime_errors
from tgpflow.cli.human import model_info_lines, versions_info_lines
from tgpflow.cli.output import emit
from tgpflow.models.fit_summaries import diagnostics_summary, discrete_columns


@main.command()
@click.argument("model")
def info(model: str) -> None:
    """Describe a saved model (verifies its checksums); for a pipeline's model directory, its versions: a line of
    figures per version (``history``: rows, health, drift) and each version's run info."""
    from tgpflow.io.artifact import read_artifact
    from tgpflow.models.registry import cli_model_of
    from tgpflow.pipeline.history import history
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    if is_versions_dir(model):
        with runtime_errors():
            vers = ModelVersions(model)
            current = vers.load() if vers.current() else None
            emit({"model": model, "current": vers.current(),
                  "preprocessing": None if current is None else _preprocessing(current, {}), "history": history(vers),
                  "versions": {v: vers.info(v) for v in vers.list()}}, versions_info_lines, indent=2, default=float)
        return
    check_model_path(model)
    with runtime_errors():
        kind, arrays, meta = read_artifact(model)
        est = load_model(model)
        draw = est.fitted().draw  # random features, a Nyström basis, or a family's own
        emit({
            "model": model, "kind": kind, "method": cli_model_of(est), "rows": est.n_samples_seen_,
            "d": est.n_features_in_, "n_features": getattr(draw, "n_features", None),
            "n_basis": getattr(draw, "n_basis", None), "bandwidth": getattr(est, "bandwidth_", None),
            "lam": getattr(est, "lam_", None), "smoothness": getattr(est, "smoothness_", None),
            "fingerprint": draw.fingerprint, "columns": meta.get("feature_names_in"),
            "params": meta.get("params"), "solver": meta.get("solver_info"), "pilot": meta.get("pilot"),
            "selection": (meta.get("selection") or {}).get("chosen"), "diagnostics": diagnostics_summary(est),
            "bounds": (meta.get("bounds") or {}).get("bounds"), "discrete": discrete_columns(est),
            "preprocessing": _preprocessing(est, meta),
            "created": meta.get("created"), "tgpflow_version": meta.get("tgpflow_version"),
            "arrays": {k: list(v.shape) for k, v in arrays.items()}}, model_info_lines, indent=2)


def _preprocessing(est: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """How a model reads rows: standardized inside it (its scaling, in the data's units), or as given — which is
    all a model file written before models carried their standardization can say."""
    scaling = getattr(est, "scaling_", None)
    if scaling is not None:
        return {"standardized": True, **scaling.to_dict(),
                "note": "rows in and out are in the data's units; the model standardizes them itself"}
    old = "scaling" not in meta and meta.get("params") is not None and "scale" not in meta["params"]
    return {"standardized": False,
            "note": ("written before model files carried a standardization: it takes rows as it was fitted on them "
                     "(a pipeline's version written then took preprocessed rows)") if old
            else "fitted to the rows as given"}
