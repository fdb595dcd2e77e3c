"""Bounded columns: fit in an unbounded space, report in the data's units (issue: hard bounds).

A smooth tilt of a Gaussian base cannot stop at a hard bound (lengths > 0, angles in [0, 90]):
on MAGIC a third of every GP-tilted model's mass fell below such bounds. A column declared
bounded is mapped to ℝ by a monotone transform ``t`` before the pilot, the pass and the solve:

* ``(a, ∞)``: ``t = log(x − a)``;  ``(−∞, b)``: ``t = −log(b − x)``;
* ``(a, b)``: ``t = logit((x − a)/(b − a)) = log(x − a) − log(b − x)``.

The model is a density q_T on ℝ^d; in the data's units (change of variables, per column)

``log p(x) = log q_T(t(x)) + Σ_j log t'_j(x_j)``,
``∇ log p(x) = t'(x) ⊙ s_T(t(x)) + ∂ log t'(x)``,
``div ∇ log p(x) = Σ_j [t''_j s_T,j + t'_j² ∂_{t_j} s_T,j + ∂² log t'_j]``,

which needs the diagonal of ∇s_T, not only its trace. Samples are ``t⁻¹`` of the model's
draws; the normaliser is the same in both spaces. Rows on or beyond a bound are bad data for a
fit (an error naming the chunk and column, or dropped with ``on_bad_rows="drop"``) and have
density 0 (log density −inf) when evaluated. float64 throughout; ``log1p``/``expm1`` keep the
transforms accurate next to the bounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tgpflow.errors import closest_hint

__all__ = ["ColumnBounds", "BoundsSpec", "bounded_chunk"]

#: What ``bounds=`` accepts: {column: (lower, upper)} or one (lower, upper) pair per column; None = open.
BoundsSpec = Mapping[str, Sequence[float | None]] | Sequence[Sequence[float | None]] | None


def _pair(value: Any, where: str) -> tuple[float, float]:
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        raise ValueError(f"bounds for {where} must be a (lower, upper) pair with None for an open side; got {value!r}")
    lo = -np.inf if value[0] is None else float(value[0])
    hi = np.inf if value[1] is None else float(value[1])
    if np.isnan(lo) or np.isnan(hi) or lo == np.inf or hi == -np.inf or not lo < hi:
        raise ValueError(f"bounds for {where} must satisfy lower < upper; got {value!r}")
    return lo, hi


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnBounds:
    """Per-column lower/upper bounds (±inf where open) and the transforms they imply.

    ``core_lower``, ``core_upper`` (NaN, or None for all columns, where there is none): a column with a core
    [c₀, c₁] inside (a, b) is mapped by the identity on the core and by log tails on the rest,
    ``t = c₀ + w₀ log((x − a)/w₀)`` below (w₀ = c₀ − a) and ``t = c₁ − w₁ log((b − x)/w₁)`` above (w₁ = b − c₁):
    t' = 1 at the core's ends. A core reaches an open side (c₀ = −∞ where a = −∞, c₁ = +∞ where b = +∞): the
    column then has one log tail. A lattice column's core is its range of values, its bounds the outer cell edges
    (:meth:`~tgpflow.features.lattice.LatticeCells.bounds_with`): the model stays inside the outer cells without
    the logit's stretching of the cells next to them (on the letter set it made the samples 8 % wider than the
    data, column by column). A column with an atom at an edge has the block beyond it as its tail and the rest
    of its values as its core, unless they have a long tail
    (:func:`~tgpflow.features.lattice_choice.edge_atoms`): under
    ``log(x − a)`` alone, a Gaussian component's tail was a lognormal one in the data's units (cardio: 18 % of
    FD's mass beyond the training rows' box, mostly past the largest values of three columns with an atom at their
    minimum).

    ``linear_from`` (NaN, or None for all columns, where there is none): a column bounded on one side only, without
    a core, whose log goes on linearly beyond ``m`` on its open side, ``t = ±log g + (x − m)/g`` with ``g = |m − a|``
    (the bound's distance): t and t' continuous at m, the log over the rows' own range, and past them the model's
    tail in the fitting space rather than its exponential (docs/gp_tilted.md, "Hard edges").
    """

    lower: np.ndarray
    upper: np.ndarray
    columns: tuple[str, ...]
    core_lower: np.ndarray | None = None
    core_upper: np.ndarray | None = None
    linear_from: np.ndarray | None = None

    def __post_init__(self) -> None:
        if (self.core_lower is None) != (self.core_upper is None):
            raise ValueError("a core needs both core_lower and core_upper")
        if self.core_lower is not None:
            c0, c1 = np.asarray(self.core_lower, np.float64), np.asarray(self.core_upper, np.float64)
            has = ~np.isnan(c0)
            if np.any(np.isnan(c1) != ~has):
                raise ValueError("a core needs both of its ends")
            lo, hi, c0h, c1h = self.lower[has], self.upper[has], c0[has], c1[has]
            # each end strictly inside its bound, or open (±∞) on an open side; and a tail somewhere
            low_ok = (lo < c0h) | ((c0h == -np.inf) & (lo == -np.inf))
            high_ok = (c1h < hi) | ((c1h == np.inf) & (hi == np.inf))
            if not np.all(low_ok & high_ok & (c0h <= c1h) & (np.isfinite(lo) | np.isfinite(hi))):
                raise ValueError("a core must lie strictly inside its column's bounds, lower end first, and reach "
                                 "an open side only there")
            object.__setattr__(self, "core_lower", c0)
            object.__setattr__(self, "core_upper", c1)
        if self.linear_from is not None:
            m = np.asarray(self.linear_from, np.float64)
            inside = np.where(self._lo, m > self.lower, m < self.upper)
            if np.any(~np.isnan(m) & ~((self._lo ^ self._hi) & ~self.cored & inside)):
                raise ValueError("a linear tail needs a column bounded on one side only, without a core, and a start "
                                 "strictly inside its bound")
            object.__setattr__(self, "linear_from", m)

    @property
    def cored(self) -> np.ndarray:
        """True for the columns with a core."""
        if self.core_lower is None:
            return np.zeros(self.lower.size, dtype=bool)
        return ~np.isnan(self.core_lower)

    @property
    def linear(self) -> np.ndarray:
        """True for the columns with a linear tail."""
        if self.linear_from is None:
            return np.zeros(self.lower.size, dtype=bool)
        return ~np.isnan(self.linear_from)

    def _linear_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """m, g and the side s (+1: bounded below) of the linear tails per column (0, 1 and ±1 where a column has
        none: those entries are not used). A value x lies on its tail where ``linear & (s·(x − m) > 0)``."""
        has = self.linear
        m = np.where(has, self.linear_from, 0.0)
        s = np.where(self._lo, 1.0, -1.0)
        g = np.where(has, s * (m - np.where(self._lo, self.lower, np.where(self._hi, self.upper, 0.0))), 1.0)
        return m, g, s

    def _core_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """c₀, c₁, w₀, w₁ of bounds with cores (0 and 1 where a column has none: those entries are not used)."""
        core = self.cored
        c0, c1 = np.where(core, self.core_lower, 0.0), np.where(core, self.core_upper, 0.0)
        low, high = core & self._lo, core & self._hi  # the tails (a core that reaches an open side has none there)
        w0 = np.where(low, c0 - np.where(low, self.lower, 0.0), 1.0)
        w1 = np.where(high, np.where(high, self.upper, 0.0) - c1, 1.0)
        return c0, c1, w0, w1

    @classmethod
    def from_param(cls, bounds: BoundsSpec, columns: Sequence[str]) -> ColumnBounds | None:
        """Resolve the ``bounds=`` parameter against the data's columns (None when nothing is bounded)."""
        if bounds is None:
            return None
        d = len(columns)
        lower, upper = np.full(d, -np.inf), np.full(d, np.inf)
        if isinstance(bounds, Mapping):
            names = [str(c) for c in columns]
            for name, value in bounds.items():
                if str(name) not in names:
                    raise ValueError(f"bounds name column {name!r}{closest_hint(name, names)}, which is not among "
                                     f"the data's columns {names}")
                j = names.index(str(name))
                lower[j], upper[j] = _pair(value, f"column {name!r}")
        else:
            if len(bounds) != d:
                raise ValueError(f"bounds as a list needs one (lower, upper) pair per column: {d}; got {len(bounds)}")
            for j, value in enumerate(bounds):
                lower[j], upper[j] = _pair(value, f"column {columns[j]!r}")
        if not (np.isfinite(lower).any() or np.isfinite(upper).any()):
            return None
        return cls(lower, upper, tuple(str(c) for c in columns))

    @property
    def _lo(self) -> np.ndarray:
        return np.isfinite(self.lower)

    @property
    def _hi(self) -> np.ndarray:
        return np.isfinite(self.upper)

    def inside(self, x: np.ndarray) -> np.ndarray:
        """True for rows strictly inside every bound."""
        return np.all((x > self.lower) & (x < self.upper), axis=1)

    def violations(self, x: np.ndarray) -> dict[str, int]:
        """Rows on or beyond a bound, per column name."""
        bad = (x <= self.lower) | (x >= self.upper)
        return {self.columns[j]: int(n) for j, n in enumerate(bad.sum(axis=0)) if n}

    # -- the transform and its derivatives (per column; open columns pass through) ----------
    def _gaps(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x − a and b − x where finite (1 where open: those entries are not used)."""
        with np.errstate(invalid="ignore"):
            below = np.where(self._lo, x - np.where(self._lo, self.lower, 0.0), 1.0)
            above = np.where(self._hi, np.where(self._hi, self.upper, 0.0) - x, 1.0)
        return below, above

    def forward(self, x: np.ndarray) -> np.ndarray:
        """t(x) (rows must be inside)."""
        below, above = self._gaps(x)
        t = np.where(self._lo, np.log(below), np.where(self._hi, 0.0, x))
        t = np.where(self._hi, t - np.log(above), t)
        if self.linear.any():
            m, g, s = self._linear_parts()
            t = np.where(self.linear & (s * (x - m) > 0), s * np.log(g) + (x - m) / g, t)
        if not self.cored.any():
            return t
        c0, c1, w0, w1 = self._core_parts()
        with np.errstate(divide="ignore", invalid="ignore"):
            on_core = np.where(x < c0, c0 + w0 * np.log(below / w0), np.where(x > c1, c1 - w1 * np.log(above / w1), x))
        return np.where(self.cored, on_core, t)

    def inverse(self, t: np.ndarray) -> np.ndarray:
        """x = t⁻¹(t): a + e^t, b − e^{−t}, or a + (b − a)·sigmoid(t)."""
        lo, hi = np.where(self._lo, self.lower, 0.0), np.where(self._hi, self.upper, 0.0)
        with np.errstate(over="ignore"):
            both = lo + (hi - lo) / (1.0 + np.exp(-t))
            x = np.where(self._lo, lo + np.exp(t), t)
            x = np.where(self._hi & ~self._lo, hi - np.exp(-t), x)
        x = np.where(self._lo & self._hi, both, x)
        if self.linear.any():
            m, g, s = self._linear_parts()
            t_m = s * np.log(g)
            x = np.where(self.linear & (s * (t - t_m) > 0), m + g * (t - t_m), x)
        if not self.cored.any():
            return x
        c0, c1, w0, w1 = self._core_parts()
        with np.errstate(over="ignore"):
            on_core = np.where(t < c0, lo + w0 * np.exp(np.minimum(t - c0, 0.0) / w0),
                               np.where(t > c1, hi - w1 * np.exp(-np.maximum(t - c1, 0.0) / w1), t))
        return np.where(self.cored, on_core, x)

    def derivatives(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``log t'``, ``t'``, ``t''``, ``(log t')'`` and ``(log t')''`` per entry, each (n, d).

        With ``u = 1/(x − a)`` (0 where open) and ``v = 1/(b − x)``: ``t' = u + v`` (1 for an open
        column), ``t'' = v² − u²``, ``t''' = 2u³ + 2v³`` and ``(log t')'' = t'''/t' − (t''/t')²``.
        """
        below, above = self._gaps(x)
        u = np.where(self._lo, 1.0 / below, 0.0)
        v = np.where(self._hi, 1.0 / above, 0.0)
        d1 = np.where(self._lo | self._hi, u + v, 1.0)
        d2 = v * v - u * u
        d3 = 2.0 * (u**3 + v**3)
        dlog = d2 / d1
        out = [np.log(d1), d1, d2, dlog, d3 / d1 - dlog * dlog]
        if self.linear.any():  # t' = 1/g past m; t'' and the derivatives of log t' vanish
            m, g, s = self._linear_parts()
            beyond = self.linear & (s * (x - m) > 0)
            out = [np.where(beyond, v, o) for v, o in zip((-np.log(g), 1.0 / g, 0.0, 0.0, 0.0), out, strict=True)]
        if not self.cored.any():
            return tuple(out)  # type: ignore[return-value]
        # a core: t' = 1 on it; below, t' = w₀u, t'' = −w₀u², (log t')' = −u, (log t')'' = u²; above, mirrored
        c0, c1, w0, w1 = self._core_parts()
        low, high = x < c0, x > c1
        zero = np.zeros_like(d1)
        with np.errstate(divide="ignore"):  # log(w·u) where u = 0 (the core, the other side) is not used
            logs = np.log(w0 * u), np.log(w1 * v)
        on_core = [np.where(low, logs[0], np.where(high, logs[1], zero)),
                   np.where(low, w0 * u, np.where(high, w1 * v, 1.0)),
                   np.where(low, -w0 * u * u, np.where(high, w1 * v * v, zero)),
                   np.where(low, -u, np.where(high, v, zero)),
                   np.where(low, u * u, np.where(high, v * v, zero))]
        return tuple(np.where(self.cored, c, o) for c, o in zip(on_core, out, strict=True))  # type: ignore[return-value]

    def log_jacobian(self, x: np.ndarray) -> np.ndarray:
        """Σ_j log t'_j(x_j) per row."""
        return self.derivatives(x)[0].sum(axis=1)

    def to_pairs(self) -> list[list[float | None]]:
        """One ``[lower, upper]`` pair per column (None where open): ``bounds=`` that declares these bounds."""
        return [[None if not np.isfinite(lo) else float(lo), None if not np.isfinite(hi) else float(hi)]
                for lo, hi in zip(self.lower, self.upper, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        def side(v: float) -> float | None:
            return None if not np.isfinite(v) else float(v)

        return {c: [side(lo), side(hi)] for c, lo, hi in zip(self.columns, self.lower, self.upper, strict=True)
                if np.isfinite(lo) or np.isfinite(hi)}

    def scaled(self, scaling: Any) -> ColumnBounds:
        """The same bounds in a :class:`~tgpflow.features.scaling.Scaling`'s standardized units, ``(a − c)/s``
        (an open side stays open): the log/logit transform there differs from the one in the data's units by a
        constant per column (``log((x − a)/s) = log(x − a) − log s``; the logit's ratio is unchanged), which
        :meth:`transformed_scaling` gives as an affine map of the transformed values."""
        if scaling is None:
            return self
        with np.errstate(invalid="ignore"):
            return ColumnBounds(scaling.forward(self.lower), scaling.forward(self.upper), self.columns,
                                **self._mapped(scaling.forward))

    def _mapped(self, fn: Any) -> dict[str, np.ndarray]:
        """The cores and the linear tails there are, each through ``fn``."""
        return {k: fn(getattr(self, k)) for k in ("core_lower", "core_upper", "linear_from")
                if getattr(self, k) is not None}

    def transformed_scaling(self, scaling: Any) -> Any:
        """The affine map ``z = (t − c')/s'`` of the transformed values ``t`` (in the data's units) that gives the
        transform of the standardized rows by the :meth:`scaled` bounds: an open column is standardized
        (``c' = c, s' = s``); ``(a, ∞)``: ``c' = log s``; ``(−∞, b)``: ``c' = −log s``; ``(a, b)``: the identity
        (``s' = 1`` for the bounded ones). The model is fitted to ``z``; the transform is taken in the data's
        units and then mapped, which keeps ``log(x − a)`` exact next to a bound (standardizing first, then
        subtracting the standardized bound, cancels: at ``x − a = 1e-12`` with ``c/s = 2`` it lost 8e-4)."""
        from tgpflow.features.scaling import Scaling

        if scaling is None:
            return None
        core = self.cored  # affine in x on the core and its tails alike: standardized as an open column
        lo, hi = self._lo & ~core, self._hi & ~core
        log_s = np.log(scaling.scale)
        center = np.where(lo & hi, 0.0, np.where(lo, log_s, np.where(hi, -log_s, scaling.center)))
        return Scaling(center, np.where(lo | hi, 1.0, scaling.scale))

    def unscaled(self, scaling: Any) -> ColumnBounds:
        """Bounds given in a scaling's standardized units, in the data's units (``c + s·a``): the inverse of
        :meth:`scaled`."""
        if scaling is None:
            return self
        return ColumnBounds(scaling.inverse(self.lower), scaling.inverse(self.upper), self.columns,
                            **self._mapped(scaling.inverse))

    def named(self, names: Sequence[str]) -> ColumnBounds:
        """The same bounds with the columns named from ``names`` (all the data's columns)."""
        return dataclasses.replace(self, columns=tuple(str(c) for c in names))

    @property
    def fingerprint(self) -> str:
        """A digest of the bounds: statistics summed in other transformed spaces do not combine."""
        from tgpflow.features.digest import array_hash

        d = self.lower.size
        if self.linear.any():
            none = np.full(d, np.nan)
            cores = (none, none) if self.core_lower is None else (self.core_lower, self.core_upper)
            return array_hash(b"tgpflow.ColumnBounds.v3", (d,),
                              (self.lower, self.upper, *cores, self.linear_from)).hexdigest()
        if not self.cored.any():  # bounds without cores keep the digest they always had
            return array_hash(b"tgpflow.ColumnBounds.v1", (d,), (self.lower, self.upper)).hexdigest()
        return array_hash(b"tgpflow.ColumnBounds.v2", (d,),
                          (self.lower, self.upper, self.core_lower, self.core_upper)).hexdigest()

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a statistics value or a model file carries (without the column names: :meth:`named` gives
        them back); the cores and the linear tails only where there are some."""
        out = {"lower": self.lower, "upper": self.upper}
        if self.cored.any():
            out.update(core_lower=self.core_lower, core_upper=self.core_upper)
        if self.linear.any():
            out.update(linear_from=self.linear_from)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], columns: Sequence[str] | None = None) -> ColumnBounds:
        lower, upper = (np.asarray(arrays[k], dtype=np.float64) for k in ("lower", "upper"))
        cores = {k: np.asarray(arrays[k], dtype=np.float64) for k in ("core_lower", "core_upper", "linear_from")
                 if k in arrays}
        names = tuple(columns) if columns is not None else tuple(f"x{j}" for j in range(lower.size))
        return cls(lower, upper, names, **cores)

    def columns_at(self, positions: np.ndarray) -> ColumnBounds:
        """The bounds (cores and linear tails too) of the columns at ``positions`` only, named by their positions."""
        return ColumnBounds(self.lower[positions], self.upper[positions], tuple(str(j) for j in positions),
                            **self._mapped(lambda v: v[positions]))

    def describe(self) -> str:
        parts = []
        for j, name in enumerate(self.columns):
            lo, hi = self.lower[j], self.upper[j]
            if np.isfinite(lo) or np.isfinite(hi):
                linear = f" (linear beyond {self.linear_from[j]:g})" if self.linear[j] else ""
                parts.append(f"{name} in ({lo:g}, {hi:g}){linear}")
        return ", ".join(parts)

    def to_record(self) -> dict[str, Any]:
        """JSON of the bounds as a model file and a pipeline's frozen draw keep them: the columns, ``to_dict`` and
        the linear tails by column (the cores come back from the discrete columns:
        :meth:`~tgpflow.features.lattice.LatticeCells.bounds_with`)."""
        out: dict[str, Any] = {"columns": list(self.columns), "bounds": self.to_dict()}
        if self.linear.any():
            out["linear_from"] = {c: float(m) for c, m, on in zip(self.columns, self.linear_from, self.linear,
                                                                  strict=True) if on}
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ColumnBounds | None:
        """The bounds of :meth:`to_record` (a record without linear tails: those of an older file)."""
        names = [str(c) for c in record["columns"]]
        bounds = cls.from_param(record["bounds"], names)
        if bounds is None or not record.get("linear_from"):
            return bounds
        linear = np.full(len(names), np.nan)
        for name, m in record["linear_from"].items():
            linear[names.index(str(name))] = float(m)
        return dataclasses.replace(bounds, linear_from=linear)


def bounded_chunk(validated: tuple[np.ndarray, int, np.ndarray | None], label: str, bounds: ColumnBounds,
                  on_bad_rows: str, scaling: Any = None) -> tuple[np.ndarray, int, np.ndarray | None]:
    """A validated chunk mapped to the transformed space; rows on or beyond a bound raise a
    :class:`~tgpflow.errors.SourceError` naming the chunk and the columns, or are dropped. ``bounds`` are in
    the data's units, and so are the check and the transform; a ``scaling`` (the model's standardization) then
    maps the transformed values to the fitting space (:meth:`ColumnBounds.transformed_scaling`)."""
    from tgpflow.errors import SourceError

    rows, dropped, kept = validated
    inside = bounds.inside(rows)
    if not inside.all():
        bad = bounds.violations(rows)
        if on_bad_rows != "drop":
            detail = ", ".join(f"column {c!r}: {n}" for c, n in bad.items())
            raise SourceError(f"{label}: {int((~inside).sum())} of {rows.shape[0]} rows lie on or beyond the model's "
                              f"bounds ({detail}; bounds: {bounds.describe()}; bounds='auto' reads them off the first "
                              f"fit's pilot). A log/logit transform needs values strictly inside: declare a bound "
                              f"beyond the data's extreme values (bounds=...), fit without them (bounds=None), or "
                              f"pass on_bad_rows='drop' (--on-bad-rows drop)")
        positions = np.arange(rows.shape[0]) if kept is None else kept
        rows, kept, dropped = rows[inside], positions[inside], dropped + int((~inside).sum())
    t = bounds.forward(rows)
    if scaling is not None:
        t = bounds.transformed_scaling(scaling).forward(t)
    return np.ascontiguousarray(t), dropped, kept
