"""KDE-RFF: the paper's RFF kernel density baseline ``p(x) ∝ φ(x)ᵀψ/N`` from the same pass ([Paisley et al.];
docs/mathematics.md, "MAP, baselines and sampling")."""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import Hyper, Solution, TGPMethod
from tgpflow.models.tgp_methods import register_method


class KDERFF(TGPMethod):
    name = "kde_rff"
    selects = False
    integrable = False  # the RFF kernel sum does not decay: no normaliser on R^d

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        fitted = TGPFitted(hyper.features, hyper.base, kde_weights=stats.psi / stats.n, block_bytes=hyper.block_bytes)
        return Solution(fitted, {"method": "none"})

    def legacy_solution(self, solution: dict[str, np.ndarray], stats: Any) -> dict[str, np.ndarray]:
        if "kde_weights" not in solution and stats is not None:
            solution["kde_weights"] = stats.psi / stats.n  # layout 1 kept ψ/N in the statistics only
        return solution


METHOD = register_method(KDERFF())
