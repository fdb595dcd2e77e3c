"""Start points for chains and particles on a fitted model (``tgpflow sample --init``).

R̂ across chains can only see chains that disagree if they start over-dispersed, so the default start is
the model's Gaussian base where it has one; otherwise rows of a source (e.g. the training data), the
model's own resampler, or its Nyström basis points jittered by a tenth of the kernel's width.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["start_points", "has_gaussian_base"]


def has_gaussian_base(model: Any) -> bool:
    """Whether ``model`` has a base to draw start points from (a kernel score estimator on a flat base, ``base_``
    None, has ``base_draws`` but nothing to draw)."""
    return hasattr(model, "base_draws") and getattr(model, "base_", "gaussian") is not None


def start_points(model: Any, n: int, *, init: Any = None, columns: list[str] | None = None,
                 random_state: Any = 0) -> np.ndarray:
    """``n`` start points (n, d) for chains on ``model``.

    ``init``: ``"base"`` (the model's Gaussian base: the default where it has one), a source of rows (any
    input :func:`~tgpflow.io.sources.as_source` reads; rows with missing or non-finite values are skipped)
    of which ``n`` are drawn, or None: the base, else the model's resampler, else its Nyström basis. A
    ``ValueError`` names what to pass when the model has none of these.
    """
    rng = np.random.default_rng(random_state)
    kind = type(model).__name__
    has_base = has_gaussian_base(model)
    if (isinstance(init, str) and init == "base") or (init is None and has_base):
        if not has_base:
            raise ValueError(f"a {kind} has no Gaussian base; pass --init SOURCE (init=) with rows to start from")
        return model.base_draws(n, random_state=int(rng.integers(2**31)))
    if init is not None:
        from tgpflow.io.degenerate import check_pilot_rows
        from tgpflow.io.pilot import pilot_sample
        from tgpflow.io.sources import as_source

        names = getattr(model, "feature_names_in_", None)
        cols = columns or ([str(c) for c in names] if names is not None else None)
        pilot = pilot_sample(as_source(init, columns=cols, on_bad_rows="drop"), rows=max(n, 10_000),
                             random_state=int(rng.integers(2**31)))
        check_pilot_rows(pilot, init, 1, "the start points")
        return pilot.rows[rng.choice(len(pilot.rows), n, replace=len(pilot.rows) < n)]
    if hasattr(model, "sample"):
        return model.sample(n, random_state=int(rng.integers(2**31)))
    basis = getattr(model, "basis_", None)
    if basis is not None:
        Y = np.asarray(basis.Y)
        return Y[rng.choice(len(Y), n)] + np.sqrt(basis.bandwidth / 2) * 0.1 * rng.standard_normal((n, Y.shape[1]))
    raise ValueError(f"a {kind} has no resampler to start chains from; pass --init SOURCE (init=), e.g. the "
                     f"training data")
