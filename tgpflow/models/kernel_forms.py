"""The forms of a kernel model on a Nyström basis, one value each: what a pass sums for it, the statistics that
holds, and whether it is a density (the family's models: :mod:`tgpflow.models.kernel_fitted`).

* ``curl_free``: the Nyström kernel exponential family and the curl-free score estimators (a gradient field
  ∇f, so p ∝ e^f q0 is a density);
* ``diagonal``: the diagonal-kernel score estimators (Stein, SSGE, …: a vector field that need not be a
  gradient, so no density);
* ``lite``: the lite kernel exponential family (f = Σ α_a k(Y_a, ·), one coefficient per basis point).

A form's ``name`` is what model files record (``KernelFitted.model``) and what the solve and the held-out selection
are told (:func:`tgpflow.solve.kef.kernel_solve`): their maths differ per form, and they branch on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tgpflow.stats.kef import DiagStats, KEFStats, LiteStats, diag_chunk_stats, kef_chunk_stats, lite_chunk_stats

__all__ = ["KernelForm", "KERNEL_FORMS", "kernel_form"]


@dataclasses.dataclass(frozen=True)
class KernelForm:
    """One form of kernel model: its ``name``, the chunk function of its pass (``chunk_stats(rows, basis,
    block_bytes)``), the statistics type that returns, and whether the model is a density."""

    name: str
    chunk_stats: Callable[..., Any]
    stats_type: type
    has_density: bool


KERNEL_FORMS = {form.name: form for form in (KernelForm("curl_free", kef_chunk_stats, KEFStats, True),
                                             KernelForm("diagonal", diag_chunk_stats, DiagStats, False),
                                             KernelForm("lite", lite_chunk_stats, LiteStats, True))}


def kernel_form(name: str) -> KernelForm:
    """The form called ``name`` (KeyError naming the forms when there is none)."""
    try:
        return KERNEL_FORMS[name]
    except KeyError:
        raise KeyError(f"no kernel form {name!r}; the forms are {sorted(KERNEL_FORMS)}") from None
