"""A pipeline's partitions as sources: one partition, or all of them, with the store's frozen preprocessing.

A partition is named by its key, relative to the source's root (:mod:`tgpflow.pipeline.discover`). Shared by the run (statistics, pilot) and the steps after its commit (scores, reports), which
read the same rows the same way: the spec's columns, filters and bad-row policy, then
``(x − center) / scale`` when the store froze a preprocessing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.io.sources import Source, as_source
from tgpflow.pipeline.discover import data_root, resolve
from tgpflow.pipeline.spec import PipelineSpec

__all__ = ["preprocessor", "log_jacobian", "partition_source", "union_source"]


def preprocessor(pre: dict[str, Any] | None) -> Callable[[Any], Any] | None:
    """The frozen preprocessing as a function of rows (None without one)."""
    if not pre:
        return None
    center, scale = np.asarray(pre["center"]), np.asarray(pre["scale"])
    return lambda x: (x - center) / scale


def log_jacobian(pre: dict[str, Any] | None) -> float:
    """log |d preprocessed / d raw| = −Σ log scale (0 without a preprocessing): a model's log density of
    the preprocessed rows plus this is the log density of the raw rows."""
    return -float(np.log(np.asarray(pre["scale"])).sum()) if pre else 0.0


def partition_source(spec: PipelineSpec, key: str, columns: list[str] | None, pre: dict[str, Any] | None,
                     format: str | None = None) -> Source:
    """One partition's rows (``key`` relative to the source's root), filtered, validated and preprocessed as
    the spec says; ``format``: the partition's, as discovery found it (``"zarr"``, ``"parquet"``; None: from
    the path, :func:`~tgpflow.io.sources.as_source`)."""
    src = as_source(resolve(data_root(spec.source.path), key), columns=columns, on_bad_rows=spec.source.on_bad_rows,
                    filters=[tuple(f) for f in spec.source.filters] if spec.source.filters else None,
                    array=spec.source.array, format=format)
    fn = preprocessor(pre)
    return src.map_rows(fn) if fn is not None else src


def union_source(spec: PipelineSpec, keys: list[str], columns: list[str] | None, pre: dict[str, Any] | None,
                 format: str | None = None) -> Source:
    """All partitions as one source (the pilot that freezes preprocessing and draws; reports)."""
    parts = [partition_source(spec, k, columns, pre, format) for k in keys]
    first = parts[0]
    return dataclasses.replace(first, description=spec.source.path,
                               labels=tuple(lb for p in parts for lb in p.labels),
                               sizes=tuple(s for p in parts for s in p.sizes),
                               _validated=tuple(v for p in parts for v in p._validated))
