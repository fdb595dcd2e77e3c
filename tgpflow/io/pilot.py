"""The pilot sample: a bounded, uniform, seeded sample of rows read before the pass.

It sets only what the feature draw depends on (docs/mathematics.md, "Features and the pilot pass"): Scott's bandwidth γ
(with N from metadata), Σ_z = dΣ/tr Σ and the shift x₀. The design is two-stage and
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

__all__ = ["PilotSample", "LazyPilot", "pilot_sample", "DEFAULT_PILOT_ROWS", "DEFAULT_PILOT_CHUNKS"]

DEFAULT_PILOT_CHUNKS = 16


@dataclasses.dataclass(frozen=True)
class PilotSample:
    """Pilot rows, the total row count N (exact or estimated), what was read (chunks, and the rows
    of those chunks that validation dropped) and each row's key (:meth:`~tgpflow.io.sources.Source.row_keys`: the
    key the pass's hashed train/validation split uses)."""

    rows: np.ndarray
    n_total: int
    n_total_exact: bool
    chunks_read: int
    rows_dropped: int = 0
    keys: np.ndarray | None = None

    @property
    def moments(self) -> Moments:
        return Moments.from_rows(self.rows)


@dataclasses.dataclass
class LazyPilot:
    """The pilot sample of one call's source, ``n_rows`` rows at most, read when a stage first asks for it
    (:meth:`get`) and then shared by the call's stages; it lives for that call and nothing of it stays on the
    estimator. ``sample``: one already read (e.g. moved into a new fitting space). Every streaming estimator's
    ``prepare`` makes one (:meth:`~tgpflow.models.streaming.StreamingMixin.prepare`) and passes it between its
    stages."""

    source: Source
    n_rows: int
    random_state: np.random.SeedSequence | int | None
    progress: Progress | None = None
    sample: PilotSample | None = None

    def get(self) -> PilotSample:
        if self.sample is None:
            self.sample = pilot_sample(self.source, rows=int(self.n_rows), random_state=self.random_state,
                                       progress=self.progress)
        return self.sample


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
        data, dropped, keys = _read(source, list(wanted), progress)
        parts, part_keys = [], []
        for (c, r), block, key in zip(wanted.items(), data, keys, strict=True):
            # Rows dropped as bad shift positions; keep the draw inside the rows that remain.
            parts.append(block[r[r < block.shape[0]]])
            part_keys.append(key[r[r < block.shape[0]]])
        sample = np.concatenate(parts) if parts else np.empty((0, source.n_columns))
        sample_keys = np.concatenate(part_keys) if part_keys else np.empty(0, dtype=np.int64)
        return PilotSample(sample, n_total, True, len(wanted), dropped, sample_keys)
    chosen, _ = _systematic(np.ones(k_all), min(max_chunks, k_all), rng)
    data, dropped, keys = _read(source, [int(c) for c in chosen], progress)
    per = max(1, rows // len(chosen))
    picks = [np.sort(rng.choice(b.shape[0], size=min(per, b.shape[0]), replace=False)) for b in data]
    sample = np.concatenate([b[p] for b, p in zip(data, picks, strict=True)])
    sample_keys = np.concatenate([k[p] for k, p in zip(keys, picks, strict=True)])
    mean_size = float(np.mean([b.shape[0] for b in data]))
    n_est = max(1, int(round(mean_size * k_all)))
    return PilotSample(sample, n_est, False, len(chosen), dropped, sample_keys)


def _read(source: Source, chunks: list[int],
          progress: Progress | None) -> tuple[list[np.ndarray], int, list[np.ndarray]]:
    """The validated rows of the given chunks, how many rows validation dropped from them, and their rows' keys
    (one compute)."""
    blocks, counts, keys = source.blocks(), source.dropped_counts(), source.row_keys()
    k = len(chunks)
    out = compute(*[blocks[c] for c in chunks], *[counts[c] for c in chunks], *[keys[c] for c in chunks],
                  progress=progress)
    return list(out[:k]), int(sum(out[k:2 * k])), list(out[2 * k:])
