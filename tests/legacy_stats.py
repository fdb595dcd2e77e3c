"""Statistics artifacts in the layout tgpflow wrote before statistics carried their draw (commit f98e7ed, before
the statistics-algebra base of issue 16), written at test time instead of committed as binary files.

That layout is today's artifact without the draw: no array under a ``draw`` component (``draw.Z``,
``p1.stats.draw.Z``, …) and no ``draws`` entry in the metadata (nor in a bundle's parts). :data:`V1_DIGESTS`
pins, per file, a hash of the kind, schema version, metadata and array names, dtypes and shapes of the files
f98e7ed wrote (they were committed under ``tests/data/stats_v1`` until 2026-11-24): a test checks that
:func:`write_v1` reproduces them exactly, so the files it writes are the old ones up to the values' rounding.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.io.artifact import read_artifact, write_artifact
from tgpflow.pipeline.store import StatsStore
from tgpflow.stats.kde_sdo import kde_sdo_chunk_stats
from tgpflow.stats.kef import diag_chunk_stats, kef_chunk_stats, lite_chunk_stats
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.split import split_chunk_stats
from tgpflow.stats.tgp import tgp_chunk_stats

SIGMAS = np.array([0.0, 0.3, 0.6])

#: File → sha256 (first 32 hex digits) of :func:`layout_document` of the file f98e7ed wrote.
V1_DIGESTS = {
    "bundle.npz": "b6cf52be6b52c003d474def95d912801",
    "diag.npz": "63c332e5b8ad15cdd3a611703ce1d037",
    "kde_sdo.npz": "b872e9753a6bc007238e82aac3eb0051",
    "kde_sdo_weighted.npz": "c34c2387055a0f143693f597113538bc",
    "kef.npz": "b7ad6bad1482261acba9fbb97024506a",
    "lite.npz": "81e8177f7344dbee2c541d17afc94a64",
    "ncfd.npz": "378d0c5751c12dfa9be164a49ee582dd",
    "tgp.npz": "8da9076df525f5783ea04a27adeb2a71",
    "tgp_weighted.npz": "07053aa11417b10551d9221d69e2121f",
}


def inputs() -> tuple[np.ndarray, RandomFourierFeatures, NystromBasis, ProjectionGrid]:
    """The rows, feature draw, Nyström basis and projection grid every file is computed from."""
    X = np.random.default_rng(16).normal(size=(61, 2)) + [1.0, -0.5]
    features = RandomFourierFeatures.draw(8, bandwidth=0.9, n_dims=2, shift=X.mean(axis=0), random_state=0)
    basis = NystromBasis(X[:4], 1.2, "gaussian", X.mean(axis=0))
    grid = ProjectionGrid.from_rows(X, n_directions=3, n_bins=8, random_state=0)
    return X, features, basis, grid


def stats_v1() -> dict[str, Any]:
    """File name → the statistics value it holds (today's computation of the same rows and draws)."""
    X, features, basis, grid = inputs()
    bundle = split_chunk_stats(X, np.arange(61), 0.3, 7, tgp_chunk_stats, {0: (features,)}, grid=grid)
    return {
        "tgp.npz": tgp_chunk_stats(X, features, with_phi_gram=True),
        "tgp_weighted.npz": tgp_chunk_stats(X, features).scaled(0.5),  # float n: 30.5
        "ncfd.npz": ncfd_chunk_stats(X, features, SIGMAS),
        "kde_sdo.npz": kde_sdo_chunk_stats(X, features),
        "kde_sdo_weighted.npz": kde_sdo_chunk_stats(X, features).scaled(0.5),
        "kef.npz": kef_chunk_stats(X, basis),
        "lite.npz": lite_chunk_stats(X, basis),
        "diag.npz": diag_chunk_stats(X, basis),
        "bundle.npz": bundle,
    }


def _without_draws(meta: Any) -> Any:
    if isinstance(meta, dict):
        return {k: _without_draws(v) for k, v in meta.items() if k != "draws"}
    if isinstance(meta, list):
        return [_without_draws(v) for v in meta]
    return meta


def write_v1(directory: Path) -> Path:
    """Write every file of :func:`stats_v1` into ``directory`` in the layout of f98e7ed (module docstring):
    today's artifact (a bundle as the statistics store saves it), read back and written again without the draw."""
    directory.mkdir(parents=True, exist_ok=True)
    today = directory / "today"
    for name, stats in stats_v1().items():
        path = today / StatsStore(today).save(stats, name) if name == "bundle.npz" else stats.save(today / name)
        kind, arrays, meta = read_artifact(path)
        kept = {k: v for k, v in arrays.items() if "draw" not in k.split(".")}
        write_artifact(directory / name, kind, kept, _without_draws(meta))
    return directory


def layout_document(path: Path) -> str:
    """The kind, schema version, metadata and array names, dtypes and shapes of an artifact ``.npz``, as JSON."""
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(str(z["__tgpflow_meta__"]))
        arrays = sorted((k, z[k].dtype.str, list(z[k].shape)) for k in z.files if k != "__tgpflow_meta__")
    return json.dumps({"kind": header["kind"], "schema": header["tgpflow_schema"], "meta": header["meta"],
                       "arrays": arrays}, sort_keys=True)


def layout_digest(path: Path) -> str:
    return hashlib.sha256(layout_document(path).encode()).hexdigest()[:32]
