"""The pilot sample: a bounded, uniform, seeded sample of rows read before the pass.

It sets only what the feature draw depends on (MATH.md §1): Scott's bandwidth γ (with N
from metadata), Σ_z = dΣ/tr Σ and the shift x₀. The design is two-stage and
self-weighting, so every row has the same inclusion probability:

* with chunk sizes known (Parquet row groups, Zarr/dask/NumPy chunks) and at most
  ``max_chunks`` chunks, rows are drawn uniformly without replacement over the global row
  index, so the sample spreads over all chunks in proportion to their size;
* with more chunks, ``max_chunks`` chunks are chosen by systematic sampling with
  probability proportional to size (evenly spread over the dataset, seeded start) and
  rows/max_chunks rows per hit are drawn uniformly from each (a chunk larger than the
  sampling step is hit, and sampled, several times).
* with unknown sizes (DataFrame partitions), ``max_chunks`` partitions are chosen
  systematically and N is estimated as n_chunks × the mean size of those read (logged).

Only the chosen chunks are read — at most ``max_chunks`` of them — and they are read
through the same validation as the pass, so bad data in them fails early with its name.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tgpflow.core.choices import DEFAULT_PILOT_ROWS
from tgpflow.core.engine import Progress, compute
from tgpflow.core.moments import Moments
from tgpflow.io.sources import Source

__all__ = ["PilotSample", "pilot_sample", "DEFAULT_PILOT_ROWS", "DEFAULT_PILOT_CHUNKS"]

DEFAULT_PILOT_CHUNKS = 16


@dataclasses.dataclass(frozen=True)
class PilotSample:
    """Pilot rows, the total row count N (exact or estimated) and what was read (chunks, and the rows
    of those chunks that validation dropped)."""

    rows: np.ndarray
    n_total: int
    n_total_exact: bool
    chunks_read: int
    rows_dropped: int = 0

    @property
    def moments(self) -> Moments:
        return Moments.from_rows(self.rows)


def _systematic(weights: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Systematic PPS sampling of k points: the distinct units hit and how often each was hit.

    A unit larger than the step is hit several times; giving it that many shares of rows
    keeps every row's inclusion probability equal (a self-weighting design).
    """
    cum = np.cumsum(weights, dtype=np.float64)
    step = cum[-1] / k
    points = rng.uniform(0.0, step) + step * np.arange(k)
    return np.unique(np.minimum(np.searchsorted(cum, points, side="right"), len(cum) - 1), return_counts=True)


def pilot_sample(source: Source, rows: int = DEFAULT_PILOT_ROWS, random_state: int | None = 0,
                 max_chunks: int = DEFAULT_PILOT_CHUNKS, *, progress: Progress | None = None) -> PilotSample:
    """Draw the pilot sample of ``source`` (see the module docstring); ``progress`` is called with the futures
    of its one distributed compute (:data:`tgpflow.core.engine.Progress`)."""
    rng = np.random.default_rng(random_state)
    sizes = np.asarray(source.sizes, dtype=np.float64)
    k_all = len(sizes)
    known = not np.isnan(sizes).any()
    if known:
        n_total = int(sizes.sum())
        if k_all <= max_chunks:
            take = min(rows, n_total)
            idx = np.sort(rng.choice(n_total, size=take, replace=False))
            bounds = np.concatenate([[0], np.cumsum(sizes).astype(np.int64)])
            chunk_of = np.searchsorted(bounds, idx, side="right") - 1
            chosen = np.unique(chunk_of)
            wanted = {int(c): idx[chunk_of == c] - bounds[c] for c in chosen}
        else:
            chosen, hits = _systematic(sizes, max_chunks, rng)
            per = max(1, rows // max_chunks)
            wanted = {int(c): np.sort(rng.choice(int(sizes[c]), size=min(per * h, int(sizes[c])), replace=False))
                      for c, h in zip(chosen, hits, strict=True)}
        data, dropped = _read(source, list(wanted), progress)
        parts = []
        for (c, r), block in zip(wanted.items(), data, strict=True):
            # Rows dropped as bad shift positions; keep the draw inside the rows that remain.
            parts.append(block[r[r < block.shape[0]]])
        sample = np.concatenate(parts) if parts else np.empty((0, source.n_columns))
        return PilotSample(sample, n_total, True, len(wanted), dropped)
    chosen, _ = _systematic(np.ones(k_all), min(max_chunks, k_all), rng)
    data, dropped = _read(source, [int(c) for c in chosen], progress)
    per = max(1, rows // len(chosen))
    parts = [b[np.sort(rng.choice(b.shape[0], size=min(per, b.shape[0]), replace=False))] for b in data]
    sample = np.concatenate(parts)
    mean_size = float(np.mean([b.shape[0] for b in data]))
    n_est = max(1, int(round(mean_size * k_all)))
    return PilotSample(sample, n_est, False, len(chosen), dropped)


def _read(source: Source, chunks: list[int], progress: Progress | None) -> tuple[list[np.ndarray], int]:
    """The validated rows of the given chunks, and how many rows validation dropped from them (one compute)."""
    blocks, counts = source.blocks(), source.dropped_counts()
    out = compute(*[blocks[c] for c in chunks], *[counts[c] for c in chunks], progress=progress)
    return list(out[:len(chunks)]), int(sum(out[len(chunks):]))
