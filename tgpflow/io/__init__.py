"""Sources (Parquet, Zarr, dask, NumPy) → validated row chunks; pilot samples; atomic writers on any fsspec filesystem."""

from tgpflow.io.pilot import PilotSample, pilot_sample
from tgpflow.io.sources import Source, as_source

__all__ = ["Source", "as_source", "PilotSample", "pilot_sample"]
