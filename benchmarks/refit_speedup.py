"""Incremental refit after 1 new partition out of 100 vs a full refit (target ≥ 50× faster).

100 Parquet partitions of 100 000 rows (d = 5) in a temp dir; a spec with one FD model
(S = 1000), centring/scaling, no scoring. Run 1 builds the store (a full fit: pilot, draw, one
pass over all partitions); a 101st partition arrives; run 2 is incremental (one partition read,
the stored total updated, re-solved, a new version written); run 3 is ``refit.policy=full``
over the 101 partitions (the full refit the incremental one replaces). Both on the threaded
scheduler of this machine. Usage: python benchmarks/refit_speedup.py [--partitions 100] [--rows 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    p = argparse.ArgumentParser()
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--features", type=int, default=1000)
    args = p.parse_args()
    d = 5
    with tempfile.TemporaryDirectory(prefix="tgpflow-refit-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()

        def write(i: int) -> None:
            X = np.random.default_rng(i).normal(size=(args.rows, d)) * np.arange(1, d + 1)
            pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(d)}), root / "data" / f"part-{i:04d}.parquet",
                           row_group_size=50_000)

        for i in range(args.partitions):
            write(i)
        spec_path = root / "spec.yaml"
        spec_path.write_text(yaml.safe_dump({
            "name": "bench", "source": {"path": str(root / "data" / "*.parquet")},
            "preprocess": {"center": True, "scale": True},
            "models": [{"name": "fd", "estimator": "GPTiltedDensity",
                        "params": {"method": "fd", "n_features": args.features}}],
            "outputs": {"store": str(root / "store.zarr"), "models": str(root / "models")},
            "refit": {"policy": "incremental"}}))
        spec = load_spec(spec_path)
        t = time.perf_counter()
        run_pipeline(spec)
        t_first = time.perf_counter() - t
        write(args.partitions)
        t = time.perf_counter()
        inc = run_pipeline(spec)
        t_inc = time.perf_counter() - t
        t = time.perf_counter()
        run_pipeline(load_spec(spec_path, overrides=["refit.policy=full"]))
        t_full = time.perf_counter() - t
    n = args.partitions
    print(f"first build over {n} partitions: {t_first:.1f} s; incremental refit after 1 new partition: "
          f"{t_inc:.2f} s (read {len(inc['added'])}); full refit over {n + 1}: {t_full:.1f} s; "
          f"speed-up {t_full / t_inc:.0f}× (target ≥ 50×)")
    print(json.dumps({"partitions": n, "rows_per_partition": args.rows, "S": args.features,
                      "first_seconds": round(t_first, 1), "incremental_seconds": round(t_inc, 2),
                      "full_seconds": round(t_full, 1), "speedup": round(t_full / t_inc, 1)}))


if __name__ == "__main__":
    main()
