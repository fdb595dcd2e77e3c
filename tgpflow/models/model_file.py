"""Model files: the stored solution is the truth, and loading one does no linear algebra.

A model file (a checksummed artifact, :mod:`tgpflow.io.artifact`) holds, in layout 2:

* the draw — ``features.*`` (random Fourier features) or ``basis.*`` (Nyström basis);
* ``fitted.*`` — the model's :class:`~tgpflow.models.fitted.Fitted` value (θ; FVPD's Cholesky
  factor of M and v = M⁻¹m; KDE-RFF's ψ/N; kernel coefficients β/c/α; RSR's w; the base μ, Σ and
  its precision) under the names of the estimator's attributes, plus the estimator's other
  solution attributes (FVPD's posterior mean and precision and m, NCFD's noise levels);
* ``stats.*`` — optionally, the statistics, for refits (``partial_fit``) and for ``verify``, without their
  draw (the model's, stored once above; a loading estimator gives it back to them with ``with_draw``);
* in the metadata, the parameters, the selection record, the normaliser estimate and diagnostics,
  the support box, ``fitted`` (the Fitted value's meta) and ``layout``.

Every array and the metadata are covered by the artifact's checksums, so what is loaded is what
was solved. Loading reads the solution and builds the Fitted value from it; re-solving from the
statistics is an opt-in check (``tgpflow.load(path, verify=True)``): the stored solution must
agree with the solve of the stored statistics to ``rtol = 1e-8`` (the tolerance of layout 1,
which re-solved on every load). Files written before layout 2 already stored θ, the FVPD factor,
the base and the coefficients under these names, checksummed; they load from them too, with what
they lacked derived without a solve (KDE-RFF's ψ/N; a kernel model's Gaussian base from the
stored moments, a d × d factorisation).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tgpflow.core.version import __version__
from tgpflow.errors import ModelFileError
from tgpflow.io.artifact import write_artifact
from tgpflow.models.fitted import Fitted, prefixed

__all__ = ["LAYOUT", "DRAW_PREFIXES", "write_model", "solution_arrays", "fitted_arrays", "stored_stats",
           "read_fitted", "verify_solution", "check_same_solution", "VERIFY_RTOL"]

#: The layout of model files written by this module (see the module docstring); absent = layout 1.
LAYOUT = 2
#: The draw of a model is stored at the top level (shared with its statistics), not under ``fitted.``.
DRAW_PREFIXES = ("features.", "basis.")
#: Relative tolerance of ``verify``: the stored solution against the solve of the stored statistics.
VERIFY_RTOL = 1e-8


def solution_arrays(fitted: Fitted, names: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The Fitted value's arrays under their file names: the draw at the top, the rest as ``fitted.<name>``
    (``names`` maps a Fitted array to the estimator attribute it is stored as)."""
    out = {}
    for key, value in fitted.to_arrays().items():
        out[key if key.startswith(DRAW_PREFIXES) else f"fitted.{names.get(key, key)}"] = value
    return out


def fitted_arrays(arrays: dict[str, np.ndarray], names: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The inverse of :func:`solution_arrays`: the Fitted value's arrays from a model file's (extra
    ``fitted.*`` arrays of the estimator come along and are ignored by ``from_arrays``)."""
    back = {v: k for k, v in names.items()}
    out = {k: v for k, v in arrays.items() if k.startswith(DRAW_PREFIXES)}
    out.update({back.get(k, k): v for k, v in prefixed(arrays, "fitted.").items()})
    return out


def stored_stats(arrays: dict[str, np.ndarray], meta: dict[str, Any], kinds: Mapping[str, Any]) -> Any:
    """The statistics stored with a model (None when it was saved without them), without their draw: the model's,
    which the file stores once, at the top (the caller adds it back with ``with_draw``)."""
    part = prefixed(arrays, "stats.")
    if not part:
        return None
    kind = kinds.get(meta.get("stats_kind") or next(iter(kinds)))
    if kind is None:
        raise ModelFileError(f"unknown statistics kind {meta.get('stats_kind')!r}")
    return kind.from_arrays(meta["fingerprint"], part)


def read_fitted(kind: type[Fitted], solution: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                layout1_meta: dict[str, Any]) -> Fitted:
    """The model's Fitted value from its stored solution (``layout1_meta``: the Fitted meta of a file
    written before layout 2 stored it); :class:`~tgpflow.errors.ModelFileError` when the solution is
    incomplete or inconsistent, or its draw does not match the fingerprint in the metadata."""
    try:
        fitted = kind.from_arrays(solution, meta.get("fitted") or layout1_meta)
    except (KeyError, ValueError) as exc:
        raise ModelFileError(f"{path}: the stored solution is incomplete or inconsistent ({exc}); refit") from None
    if fitted.draw.fingerprint != meta["fingerprint"]:
        raise ModelFileError(f"{path}: the stored {'basis' if 'basis.Y' in solution else 'features'} do not match "
                             f"their fingerprint; the file was modified")
    return fitted


def write_model(path: Any, kind: str, fitted: Fitted, names: Mapping[str, str], *,
                extra: Mapping[str, np.ndarray], stats: Any, meta: dict[str, Any], overwrite: bool,
                storage_options: dict[str, Any] | None = None) -> Any:
    """Write a model file (layout 2) atomically, to a path or any fsspec URL (:mod:`tgpflow.io.atomic`): the
    draw, the solution (``fitted`` and the estimator's ``extra`` arrays), the statistics when given, and
    ``meta`` (which must hold the estimator's ``params``: loading rebuilds the estimator from them, and
    :func:`tgpflow.io.outputs.artifact_output` knows a model file by them)."""
    if not isinstance(meta.get("params"), Mapping):
        raise ValueError("a model file's metadata needs the estimator's params (a dict)")
    arrays = solution_arrays(fitted, names)
    arrays.update({f"fitted.{k}": np.asarray(v) for k, v in extra.items()})
    if stats is not None:  # without their draw: it is the model's, stored above
        arrays.update({f"stats.{k}": v for k, v in stats.to_arrays().items() if not k.startswith(stats.DRAW_PREFIX)})
    meta = dict(meta, layout=LAYOUT, fitted=fitted.to_meta(), stats_kind=None if stats is None else type(stats).__name__,
                tgpflow_version=__version__,
                created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    return write_artifact(path, kind, arrays, meta, overwrite=overwrite, storage_options=storage_options)


def verify_solution(est: Any, path: Path, arrays: dict[str, np.ndarray], names: Mapping[str, str],
                    solve: Callable[[Any], Fitted], *, extra: tuple[str, ...] = (), legacy: bool = False,
                    params: Mapping[str, Any] | None = None) -> None:
    """``load(verify=True)``: ``solve`` a fresh estimator with ``est``'s parameters (``params`` where the fit
    resolved some of them, e.g. GPTiltedDensity's ``bounds="auto"``; its selection record,
    column names and NCFD levels copied) from ``est.stats_``, and compare every stored ``fitted.*`` array
    with that solve's Fitted value and ``extra`` attributes (:func:`check_same_solution`). A ``legacy``
    (layout 1) file is compared on what it stored."""
    if est.stats_ is None:
        raise ModelFileError(f"{path}: holds no statistics (saved with save(..., stats=False), or a full-sample "
                             f"fit, which keeps none): there is nothing to re-solve, so verify=True cannot check it "
                             f"(verify=False trusts the checksummed solution)")
    ref = type(est)(**(est.get_params() if params is None else params))
    for name in ("feature_names_in_", "selection_", "noise_levels_"):  # what a solve reads besides the statistics
        if hasattr(est, name):
            setattr(ref, name, getattr(est, name))
    try:
        fitted = solve(ref)
    except ValueError as exc:
        raise ModelFileError(f"{path}: verify=True could not solve the stored statistics with the stored settings "
                             f"({exc}); the file was modified, or its statistics do not belong to it: refit") from None
    solved = {k: v for k, v in solution_arrays(fitted, names).items() if k.startswith("fitted.")}
    solved.update({f"fitted.{name}": getattr(ref, name) for name in extra})
    stored = {k: v for k, v in arrays.items() if k.startswith("fitted.")}
    if legacy:
        solved = {k: v for k, v in solved.items() if k in stored}
    check_same_solution(path, stored, solved)


def check_same_solution(path: Path, stored: dict[str, np.ndarray], solved: dict[str, np.ndarray]) -> None:
    """``verify``: every stored solution array equals the re-solved one (to :data:`VERIFY_RTOL`), or
    :class:`~tgpflow.errors.ModelFileError` naming the first that does not."""
    for name in sorted(set(stored) | set(solved)):
        if name not in stored or name not in solved:
            raise ModelFileError(f"{path}: the stored solution and the solve of the stored statistics hold different "
                                 f"arrays ({name!r} is in only one of them)")
        a, b = np.asarray(stored[name]), np.asarray(solved[name])
        scale = float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))  # (FVPD's λ = ∞ precision is infinite)
        if a.shape != b.shape or not np.allclose(a, b, rtol=VERIFY_RTOL, atol=1e-12 * max(scale, 1.0)):
            shown = name.removeprefix("fitted.")
            raise ModelFileError(f"{path}: the stored {shown} does not match the solve of the stored statistics "
                                 f"(verify=True); the file was modified after it was solved, or the statistics do "
                                 f"not belong to it: refit")
