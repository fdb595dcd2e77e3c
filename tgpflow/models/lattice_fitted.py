"""A fitted density of dequantized rows, evaluated as cell densities on its discrete columns (docs/gp_tilted.md,
"Integer codes and other lattices"; :mod:`tgpflow.features.lattice`).

``inner`` is any :class:`~tgpflow.models.fitted.Fitted` value in the data's units, fitted to rows whose discrete
columns were moved by uniform noise over their cells. In the data's units

* ``log p(x) = log (1/|C|) ∫_C q``: the cell average of the inner density q over the cell C of the lattice point
  nearest x (the other columns at their values), a weighted mean over the fixed points of
  :meth:`~tgpflow.features.lattice.LatticeCells.cell_rule`, by log-sum-exp in float64;
* samples, base draws and reference draws are the inner model's with the discrete columns rounded to the
  lattice (:meth:`~tgpflow.features.lattice.LatticeCells.snap`); weights and the normaliser are unchanged;
* the score, its Jacobian diagonal and the Hyvärinen terms are the inner model's: a discrete column has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
from scipy.special import logsumexp

from tgpflow.features.lattice import LatticeCells
from tgpflow.models.fitted import Fitted, WrappedFitted, fitted_from_arrays, prefixed

__all__ = ["LatticeFitted", "with_lattice"]

#: Rows per block of a cell average (each is evaluated at the cell's points,
#: :meth:`~tgpflow.features.lattice.LatticeCells.cell_rule`).
_BLOCK_ROWS = 1024


def with_lattice(fitted: Fitted, cells: LatticeCells | None) -> Fitted:
    """``fitted`` (in the data's units) with its discrete columns as cells, or itself without any."""
    return fitted if cells is None else LatticeFitted(fitted, cells)


@dataclasses.dataclass(frozen=True, eq=False)
class LatticeFitted(WrappedFitted):
    """See the module docstring."""

    kind: ClassVar[str] = "lattice"
    inner: Fitted
    cells: LatticeCells

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        return self.cells.snap(rows)

    def at_level(self, sigma: float) -> LatticeFitted:
        """The NCFD model at noise level σ (in the inner model's units), with the same cells."""
        return LatticeFitted(self.inner.at_level(sigma), self.cells)  # type: ignore[attr-defined]

    # -- storage ----------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"inner.{k}": v for k, v in self.inner.to_arrays().items()}
        out.update({"cells.positions": self.cells.positions, "cells.origin": self.cells.origin,
                    "cells.step": self.cells.step})
        return out

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "columns": list(self.cells.columns), "seed": int(self.cells.seed),
                "inner": self.inner.to_meta()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> LatticeFitted:
        part = prefixed(arrays, "cells.")
        cells = LatticeCells(np.asarray(part["positions"], dtype=np.int64), tuple(meta["columns"]),
                             np.asarray(part["origin"], dtype=np.float64), np.asarray(part["step"], dtype=np.float64),
                             int(meta["seed"]))
        return cls(fitted_from_arrays(prefixed(arrays, "inner."), meta["inner"]), cells)

    # -- evaluation -------------------------------------------------------------------------
    def log_density(self, x: np.ndarray) -> np.ndarray:
        centres = self.cells.snap(x)
        offsets, weights, n_plain = self.cells.cell_rule()
        k = offsets.shape[0]
        out = np.empty(x.shape[0])
        for start in range(0, x.shape[0], _BLOCK_ROWS):
            block = centres[start:start + _BLOCK_ROWS]
            points = np.repeat(block, k, axis=0)
            points[:, self.cells.positions] += np.tile(offsets, (block.shape[0], 1))
            values = self.inner.log_density(points).reshape(block.shape[0], k)
            with np.errstate(divide="ignore"):  # a cell where q is 0 (beyond a bound) has log density -inf
                mean, sign = logsumexp(values, axis=1, b=weights, return_sign=True)
            # the extrapolation can only fail (≤ 0) where the coarse rule exceeds 4× the fine one: keep the fine one
            plain = logsumexp(values[:, :n_plain], axis=1) - np.log(n_plain)
            out[start:start + block.shape[0]] = np.where(sign > 0, mean, plain)
        return out

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        return self.inner.grad_log_density(x)

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.score_hessian_diag(x)  # type: ignore[attr-defined]

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        return self.inner.hyvarinen_terms(x)
