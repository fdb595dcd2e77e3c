"""The files beside a dataset's data that every reader skips: those whose name starts with "_" or "." (Spark's
``_SUCCESS``, the ``_metadata`` and ``_common_metadata`` of Dask and Hive, Hadoop's ``.crc`` checksums, editors'
swap files). One rule for the Parquet, CSV and Zarr listings and a pipeline's partitions.
"""

from __future__ import annotations

__all__ = ["is_hidden"]


def is_hidden(path: str) -> bool:
    """Whether the last component of ``path`` (a local path or a URL; a trailing "/" ignored) is hidden."""
    return path.rstrip("/").rsplit("/", 1)[-1].startswith(("_", "."))
