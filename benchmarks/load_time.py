"""Loading a model reads its stored solution: load time against the time to read the file's arrays.

Fits, saves (Zarr) and loads:

* an NKEF model with md = 5000 (m = 500 basis points in d = 10; a few hundred rows suffice: load
  time does not depend on N), saved with its statistics (C is (md)² = 200 MB) and without them;
* GP-tilted FD, FVPD and base-learning (``base="learn"``) models with S = 1000 features.

For each it prints the best of ``--repeats`` times of ``tgpflow.load(path)``, of reading every
array of the Zarr group with zarr alone (the floor: ``zarr.open_group`` + ``arr[...]``), their
ratio (the issue's target: < 2), and the time of ``tgpflow.load(path, verify=True)``, which solves
the stored statistics again as every load did before model layout 2. Run it with an older tgpflow on
``PYTHONPATH`` for the "before" figures (it then skips what that version lacks: ``verify``,
``stats=False``). Usage: python benchmarks/load_time.py [--rows N] [--repeats R] [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the Zarr group, read with zarr alone (no checks): the floor of a load."""
    import zarr

    return {name: arr[...] for name, arr in zarr.open_group(str(path), mode="r").arrays()}


def measure(name: str, est: Any, out: Path, repeats: int, stats: bool = True) -> dict[str, Any]:
    import tgpflow

    kwargs = {} if stats else {"stats": False}
    path = est.save(out / f"{name}.zarr", **kwargs)
    nbytes = sum(a.nbytes for a in read_arrays(path).values())
    t_read = best_of(lambda: read_arrays(path), repeats)
    t_load = best_of(lambda: tgpflow.load(path), repeats)
    row = {"model": name, "stats_stored": stats, "array_mb": round(nbytes / 2**20, 1), "read_s": round(t_read, 4),
           "load_s": round(t_load, 4), "load_over_read": round(t_load / t_read, 2)}
    if "verify" in inspect.signature(tgpflow.load).parameters and stats:
        row["verify_s"] = round(best_of(lambda: tgpflow.load(path, verify=True), 1), 3)
    print(f"{name:>22} stats={'yes' if stats else 'no ':3} {row['array_mb']:7.1f} MB  read {t_read:8.4f} s  "
          f"load {t_load:8.4f} s  ratio {t_load / t_read:5.2f}"
          + (f"  load(verify=True) {row['verify_s']:7.3f} s" if "verify_s" in row else ""), flush=True)
    return row


def main() -> None:
    import tgpflow
    from tgpflow import GPTiltedDensity, NystromKEF

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=500, help="rows of the NKEF fit (the pass costs N·d·(md)²)")
    p.add_argument("--tgp-rows", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="where to save the models (default: a temporary directory)")
    args = p.parse_args()
    warnings.simplefilter("ignore")  # the fits' diagnostics are not what this measures
    rng = np.random.default_rng(0)
    supports_no_stats = "stats" in inspect.signature(NystromKEF.save).parameters
    print(f"tgpflow {tgpflow.__version__} from {Path(tgpflow.__file__).parent}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        X = rng.normal(size=(args.rows, 10))
        t = time.perf_counter()
        kef = NystromKEF(n_basis=500, bandwidth=20.0, lam=1e-3, base="gaussian", pilot_rows=args.rows).fit(X)
        print(f"NKEF fit (N = {args.rows}, m = 500, d = 10, md = 5000): {time.perf_counter() - t:.1f} s", flush=True)
        rows.append(measure("nkef_md5000", kef, out, args.repeats))
        if supports_no_stats:
            rows.append(measure("nkef_md5000", kef, out / "no_stats", args.repeats, stats=False))
        del kef
        Y = rng.normal(size=(args.tgp_rows, 5)) @ rng.normal(size=(5, 5))
        for name, params in (("fd_S1000", dict(method="fd")), ("fvpd_S1000", dict(method="fvpd")),
                             ("fd_learn_S1000", dict(method="fd", base="learn"))):
            t = time.perf_counter()
            est = GPTiltedDensity(n_features=1000, lam=0.1, bandwidth="scott", **params).fit(Y)
            print(f"{name} fit (N = {args.tgp_rows}, d = 5): {time.perf_counter() - t:.1f} s", flush=True)
            rows.append(measure(name, est, out, args.repeats))
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
