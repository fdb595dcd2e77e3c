"""What every tgpflow estimator shares: reading any source, and evaluating lazily over it.

``StreamingMixin`` gives an estimator ``_source`` (in-memory arrays through scikit-learn's
``validate_data``; Parquet/Zarr/dask through :func:`tgpflow.io.sources.as_source`, with
``n_features_in_``/``feature_names_in_`` set on a first fit) and ``_map_rows`` (a per-row
function applied chunk by chunk: eager for in-memory input, a lazy dask array otherwise).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.utils.validation import validate_data

from tgpflow.io.sources import Source, as_source

__all__ = ["StreamingMixin", "is_lazy"]


def is_lazy(X: Any) -> bool:
    """Whether X is read chunk by chunk (dask, Parquet/Zarr path, Source) rather than in memory."""
    if isinstance(X, (da.Array, Source, str, Path)):
        return True
    try:
        import dask.dataframe as dd

        return isinstance(X, dd.DataFrame)
    except ImportError:  # pragma: no cover
        return False


class StreamingMixin:
    """Source handling and lazy evaluation for estimators with ``on_bad_rows``."""

    on_bad_rows: str

    def _source(self, X: Any, columns: list[str] | None, reset: bool) -> Source:
        """A validated source; in-memory arrays go through sklearn's validate_data."""
        if not is_lazy(X):
            finite = self.on_bad_rows == "raise"
            X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=finite,
                              ensure_min_samples=1)
            if columns is not None:
                X = X[:, list(columns)]
            return as_source(X, on_bad_rows=self.on_bad_rows)
        source = as_source(X, columns=columns, on_bad_rows=self.on_bad_rows)
        if reset:
            self.n_features_in_ = source.n_columns
            if source.named:
                self.feature_names_in_ = np.asarray(source.columns, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return source

    def _map_rows(self, X: Any, fn: Any, per_row_dims: bool) -> Any:
        """``fn`` over the rows of X: (n,) or (n, d) results; lazy for lazy X."""
        if is_lazy(X):
            source = self._source(X, None, reset=False)
            if source.n_columns != self.n_features_in_:
                raise ValueError(f"X has {source.n_columns} features, but {type(self).__name__} is expecting "
                                 f"{self.n_features_in_} features as input")
            ev = dask.delayed(fn, pure=True)
            parts = []
            for block, size in zip(source.blocks(), source.sizes, strict=True):
                rows = size if source.on_bad_rows == "raise" else math.nan
                shape = (rows, source.n_columns) if per_row_dims else (rows,)
                parts.append(da.from_delayed(ev(block), shape=shape, dtype=np.float64,
                                             meta=np.empty((0,) * len(shape))))
            return da.concatenate(parts) if len(parts) > 1 else parts[0]
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return fn(X)
