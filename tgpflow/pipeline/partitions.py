"""A pipeline's partitions as sources: one partition, or all of them, as raw rows in the data's units.

A partition is named by its key, relative to the source's root (:mod:`tgpflow.pipeline.discover`); a date of
a store with a date dimension (``source.partition_by``) is its rows only. Shared by the run (statistics,
pilot) and the steps after its commit (scores, reports), which read the same rows the same way: the spec's
columns, filters and bad-row policy. The store's frozen preprocessing is not applied here: each model applies
it (with its bounds, in the data's units) and carries it into its versions (:mod:`tgpflow.features.scaling`),
so a published model takes and returns rows in the data's units wherever it is loaded.
"""

from __future__ import annotations

from typing import Any


from tgpflow.errors import SourceError
from tgpflow.io.row_context import row_context
from tgpflow.io.backends.zarr import zarr_row_runs
from tgpflow.io.sources import Source, as_source, concat_sources
from tgpflow.pipeline.discover import data_root, resolve, split_key
from tgpflow.pipeline.spec import PipelineSpec

__all__ = ["partition_rows", "partition_source", "partition_context", "union_source"]


def partition_rows(spec: PipelineSpec, keys: list[str]) -> dict[str, tuple[int, int]]:
    """The rows (start, stop) of each date partition among ``keys`` (``source.partition_by``; one read of each
    store's coordinate); refuses a date its store no longer holds."""
    coordinate, root, out = spec.source.partition_by, data_root(spec.source.path), {}
    runs: dict[str, dict[str, tuple[int, int]]] = {}
    for key in keys:
        split = split_key(key, coordinate) if coordinate is not None else None
        if split is None:
            continue
        store, label = split
        if store not in runs:
            runs[store] = zarr_row_runs(resolve(root, store), coordinate, spec.source.array)
        if label not in runs[store]:
            raise SourceError(f"{resolve(root, store)}: has no rows of {coordinate}={label} any more; a store with "
                              f"a date dimension grows by appended dates, and keeps the rows of the earlier ones")
        out[key] = runs[store][label]
    return out


def partition_source(spec: PipelineSpec, key: str, columns: list[str] | None, format: str | None = None,
                     rows: tuple[int, int] | None = None) -> Source:
    """One partition's raw rows (``key`` relative to the source's root), filtered and validated as the spec says;
    ``format``: the partition's, as discovery found it (``"zarr"``, ``"parquet"``; None: from the path, :func:`~tgpflow.io.sources.as_source`). A date partition (``source.partition_by``) reads its
    rows of its store only: ``rows`` when the caller has them (discovery), else :func:`partition_rows`."""
    path, coordinate = resolve(data_root(spec.source.path), key), spec.source.partition_by
    split = split_key(key, coordinate) if coordinate is not None else None
    if split is not None:
        path, format = resolve(data_root(spec.source.path), split[0]), "zarr"
        rows = rows or partition_rows(spec, [key])[key]
    src = as_source(path, columns=columns, on_bad_rows=spec.source.on_bad_rows,
                    filters=[tuple(f) for f in spec.source.filters] if spec.source.filters else None,
                    array=spec.source.array, format=format, rows=rows if split is not None else None,
                    coordinate=coordinate if split is not None else None)
    return src


def union_source(spec: PipelineSpec, keys: list[str], columns: list[str] | None, format: str | None = None) -> Source:
    """All partitions as one source (the pilot that freezes preprocessing and draws; reports)."""
    rows = partition_rows(spec, keys)
    parts = [partition_source(spec, k, columns, format, rows.get(k)) for k in keys]
    return concat_sources(parts, description=spec.source.path)


def partition_context(spec: PipelineSpec, key: str, source: Source, keep: list[str] | None,
                      format: str | None = None) -> list[Any]:
    """Per chunk of ``source`` (:func:`partition_source` of ``key``), the ``row`` positions in the partition and
    the ``keep`` columns of the rows the filters keep (:func:`~tgpflow.io.row_context.row_context`)."""
    path, coordinate = resolve(data_root(spec.source.path), key), spec.source.partition_by
    if coordinate is not None and split_key(key, coordinate) is not None:
        path, format = resolve(data_root(spec.source.path), split_key(key, coordinate)[0]), "zarr"
    return row_context(path, source, keep, filters=[tuple(f) for f in spec.source.filters] if spec.source.filters
                       else None, format=format)
