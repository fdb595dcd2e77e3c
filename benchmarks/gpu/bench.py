"""GPU figures of issue 45, each beside a same-run reference (docs/gpu.md; how to run: benchmarks/gpu/README.md).

1. cuBLAS references: DSYRK and DGEMM TFLOP/s on an (S + d + 1) × 32 768 float64 block, S = 1000.
2. The FD statistics pass, 14.3M × 3, S = 1000: rows on the device in 10 chunks (as Dask tasks would hand them
   over), then the same rows from the host (each chunk moved inside its task); the ratio to cuBLAS DSYRK alone on
   the same block shapes; float64 GPU vs CPU statistics on 200 000 rows (relative error); precision="mixed": its
   speed and its error against float64.
3. Scoring 10M rows with an FD model (S = 1000) on the GPU, beside ``cupy.cos`` alone on the same (S, n) elements
   (the element-wise floor) and beside the CPU path on the same rows.
4. A default FVPD fit of 2M × 7 (selection and diagnostics included), on the GPU and, time permitting, the CPU.
5. A default NCFD fit of 14.3M × 3 on the GPU.
6. NystromKEF n = 10⁶, d = 10, m = 500 on the GPU; its pass beside cuBLAS DSYRK and the CPU path (per row).

Without a GPU (``--rehearse``, or CuPy missing) only tiny CPU versions of 4, 5 and 6 run, to check the script.
Writes ``gpu_results.json`` and ``gpu_results.md`` into ``--out``.
Usage: python benchmarks/gpu/bench.py --out DIR [--budget-s 330] [--rehearse | --only scoring|kef]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

S, D = 1000, 3
N_PASS = 14_300_000
N_SCORE = 10_000_000
BLOCK = 32_768


class Run:
    """The figures, the clock and the budget."""

    def __init__(self, budget_s: float) -> None:
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.rows: list[dict[str, Any]] = []

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def add(self, name: str, value: float, unit: str, *, target: str = "", reference: str = "",
            ratio: float | None = None, ok: bool | None = None) -> None:
        row = {"name": name, "value": value, "unit": unit, "target": target, "reference": reference,
               "ratio": ratio, "meets_target": ok}
        self.rows.append(row)
        extra = f"; {reference}" if reference else ""
        extra += f"; ratio {ratio:.3f}" if ratio is not None else ""
        extra += f"; target {target}: {'met' if ok else 'NOT met'}" if ok is not None else ""
        print(f"{name}: {value:.4g} {unit}{extra}", flush=True)


def timed(fn: Any, repeats: int = 1) -> float:
    """Best wall time of ``fn()`` over ``repeats`` (the caller synchronises the device inside ``fn``)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def max_relative(got: Any, want: Any, fields: tuple[str, ...]) -> float:
    """The largest relative difference of the named statistics (each against its largest entry)."""
    return max(float(np.abs(getattr(got, k) - getattr(want, k)).max() / np.abs(getattr(want, k)).max())
               for k in fields)


def cublas_references(run: Run) -> dict[str, float]:
    import cupy as cp

    from tgpflow.stats.tgp_cupy import syrk_add

    a = cp.random.default_rng(0).standard_normal((S + D + 1, BLOCK))
    acc = cp.zeros((S + D + 1, S + D + 1))

    def syrk() -> None:
        for _ in range(10):
            syrk_add(a, acc)
        cp.cuda.Device().synchronize()

    def gemm() -> None:
        for _ in range(10):
            a @ a.T
        cp.cuda.Device().synchronize()

    syrk(), gemm()
    n, k = S + D + 1, BLOCK
    t_syrk, t_gemm = timed(syrk, 3) / 10, timed(gemm, 3) / 10
    run.add("cuBLAS DSYRK", n * n * k / t_syrk / 1e12, "TFLOP/s (n²k flops)")
    run.add("cuBLAS DGEMM (A Aᵀ)", 2 * n * n * k / t_gemm / 1e12, "TFLOP/s")
    return {"syrk_block_s": t_syrk}


def fd_pass(run: Run, refs: dict[str, float]) -> Any:
    import cupy as cp

    from tgpflow import RandomFourierFeatures
    from tgpflow.core.backend import DeviceTarget, to_device
    import tgpflow.stats.tgp_cupy as tgp_cupy
    from tgpflow.stats.tgp import tgp_chunk_stats

    g = cp.random.default_rng(1)
    x = g.standard_normal((N_PASS, D))
    x[: N_PASS // 3] = x[: N_PASS // 3] * 0.5 + 2.0  # two blobs: realistic angles, not the point here
    feats = RandomFourierFeatures.draw(S, bandwidth=0.5, n_dims=D, shift=np.zeros(D), random_state=2)
    chunks = np.array_split(np.arange(N_PASS), 10)

    def on_device() -> None:
        for c in chunks:
            tgp_chunk_stats(x[c[0]:c[-1] + 1], feats)
        cp.cuda.Device().synchronize()

    blocks = N_PASS / BLOCK
    t_syrk = blocks * refs["syrk_block_s"]
    fused_default = tgp_cupy.FUSED
    for fused in (not fused_default, fused_default):  # the default last: its timing is the headline
        tgp_cupy.FUSED = fused
        tgp_chunk_stats(x[:50_000], feats)  # this kernel's compilation, outside the timing
        t_dev = timed(on_device, 2)
        kind = "fused sine kernel" if fused else "GEMM + element-wise sincos"
        run.add(f"FD pass 14.3M×3, S=1000, rows on the GPU ({kind})", t_dev, "s", target="≤ 2 s", ok=t_dev <= 2.0,
                reference=f"cuBLAS DSYRK alone on the same blocks {t_syrk:.3f} s", ratio=t_syrk / t_dev)
    run.add("FD pass (default kernel): fraction of the DSYRK rate", t_syrk / t_dev, "", target="≥ 0.6",
            ok=t_syrk / t_dev >= 0.6)
    host = cp.asnumpy(x)
    target = DeviceTarget("cupy")

    def from_host() -> None:
        for c in chunks:
            tgp_chunk_stats(to_device(host[c[0]:c[-1] + 1], target), feats)
        cp.cuda.Device().synchronize()

    t_host = timed(from_host, 1)
    run.add("FD pass 14.3M×3, rows from the host (moved per chunk)", t_host, "s", target="≤ 2 s", ok=t_host <= 2.0,
            reference=f"rows already on the GPU {t_dev:.3f} s", ratio=t_dev / t_host)
    sub = host[:200_000]
    cpu, gpu = tgp_chunk_stats(sub, feats), tgp_chunk_stats(cp.asarray(sub), feats)
    err = max_relative(gpu, cpu, ("gram", "u", "U", "psi"))
    run.add("float64 GPU vs CPU statistics (200k rows), max relative error", err, "", target="≤ 1e-10",
            ok=err <= 1e-10)
    tgp_chunk_stats(x[:50_000], feats, precision="mixed")

    def mixed() -> None:
        for c in chunks:
            tgp_chunk_stats(x[c[0]:c[-1] + 1], feats, precision="mixed")
        cp.cuda.Device().synchronize()

    t_mixed = timed(mixed, 1)
    run.add("FD pass 14.3M×3, precision='mixed'", t_mixed, "s", reference=f"float64 {t_dev:.3f} s",
            ratio=t_dev / t_mixed)
    m = tgp_chunk_stats(cp.asarray(sub), feats, precision="mixed")
    run.add("mixed vs float64 Gram (200k rows), max relative error",
            float(np.abs(m.gram - cpu.gram).max() / np.abs(cpu.gram).max()), "", target="≤ 1e-4 (docs/gpu.md)",
            ok=float(np.abs(m.gram - cpu.gram).max() / np.abs(cpu.gram).max()) <= 1e-4)
    return host


def scoring(run: Run, host: np.ndarray) -> None:
    """An FD model fitted with the defaults (λ and γ selected) on 1M rows; its log density at 10M rows on the GPU,
    beside cupy.cos alone and the same model on the CPU."""
    import cupy as cp

    from tgpflow import GPTiltedDensity

    est = GPTiltedDensity(method="fd", n_features=S, bounds=None, device="gpu").fit(host[:1_000_000])
    rows = np.ascontiguousarray(np.concatenate([host[:N_SCORE - 1_000_000], host[-1_000_000:]]))
    est.log_density(rows[:100_000])  # warm-up
    t_gpu = timed(lambda: est.log_density(rows), 2)
    a = est.log_density(rows[:200_000])
    angle = cp.random.default_rng(3).standard_normal((S, 250_000))
    buf = cp.empty_like(angle)

    def cos_only() -> None:
        for _ in range(N_SCORE // 250_000):
            cp.cos(angle, out=buf)
        cp.cuda.Device().synchronize()

    t_cos = timed(cos_only, 2)
    run.add("FD scoring 10M rows (S=1000), GPU", t_gpu, "s", target="≤ 1 s", ok=t_gpu <= 1.0,
            reference=f"cupy.cos alone on the same S×n elements {t_cos:.3f} s; model λ {est.lam_:.3g}, "
                      f"γ {est.bandwidth_:.3g}", ratio=t_cos / t_gpu)
    est.set_params(device="cpu")  # the same model, evaluated on the host
    n_cpu = N_SCORE if run.left() > 200 else 1_000_000
    t_cpu = timed(lambda: est.log_density(rows[:n_cpu]), 1) * (N_SCORE / n_cpu)
    b = est.log_density(rows[:200_000])
    run.add("FD scoring 10M rows, CPU (16 cores" + ("" if n_cpu == N_SCORE else ", 1M rows × 10") + ")", t_cpu, "s",
            reference=f"GPU {t_gpu:.3f} s", ratio=t_cpu / t_gpu)
    rel = float(np.max(np.abs(a - b) / np.abs(b)))
    run.add("GPU vs CPU log density (200k rows), max relative difference", rel, "", target="≤ 1e-10", ok=rel <= 1e-10)


def mixture_rows(n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    centres = g.normal(scale=3.0, size=(4, d))
    x = g.normal(size=(n, d)) @ np.diag(g.uniform(0.5, 1.5, d))
    return x + centres[g.integers(0, 4, n)]


def default_fits(run: Run, gpu: bool, scale: float = 1.0) -> None:
    """4 and 5 on ``gpu`` (else the CPU); then, while the budget lasts, the FVPD fit again on the CPU."""
    from tgpflow import GPTiltedDensity

    device = "gpu" if gpu else "cpu"

    def fit(method: str, x: np.ndarray, on: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        est = GPTiltedDensity(method=method, device=on).fit(x)
        seconds = time.perf_counter() - t0
        healthy = not est.fit_diagnostics_.get("warnings")
        return seconds, f"λ {est.lam_:.3g}, γ {est.bandwidth_:.3g}, {'healthy' if healthy else 'warned'}"

    logging.basicConfig(level=logging.WARNING, format="  %(name)s %(message)s")  # the fits' phases, with seconds
    logging.getLogger("tgpflow").setLevel(logging.INFO)
    n7, n3 = int(2_000_000 * scale), int(N_PASS * scale)
    x7 = mixture_rows(n7, 7, 4)
    t_fvpd, note = fit("fvpd", x7, device)
    run.add(f"default FVPD fit {n7}×7, {device}", t_fvpd, "s", target="≤ 15 s" if gpu else "",
            ok=(t_fvpd <= 15) if gpu else None, reference=note)
    if run.left() < 60:
        run.add("default NCFD fit 14.3M×3", float("nan"), "s", reference="skipped: the run's budget is spent")
        return
    t_ncfd, note = fit("ncfd", mixture_rows(n3, 3, 5), device)
    run.add(f"default NCFD fit {n3}×3, {device}", t_ncfd, "s", target="≤ 20 s" if gpu else "",
            ok=(t_ncfd <= 20) if gpu else None, reference=note)
    if gpu and run.left() > 2 * t_fvpd + 30:
        t_cpu, note = fit("fvpd", x7, "cpu")
        run.add(f"default FVPD fit {n7}×7, CPU (all cores)", t_cpu, "s", reference=f"GPU {t_fvpd:.1f} s; {note}",
                ratio=t_cpu / t_fvpd)


KEF_N, KEF_D, KEF_M = 1_000_000, 10, 500


def kernel_models(run: Run, gpu: bool, scale: float = 1.0) -> None:
    """6. NystromKEF n = 10⁶, d = 10, m = 500 (defaults otherwise: λ = 1e-3, σ_k by the median heuristic, flat base):
    the whole fit on the GPU; its statistics pass beside cuBLAS DSYRK on the same (rows·d × md) blocks and beside
    the CPU path on a slice of the rows (per row); float64 GPU vs CPU statistics and log densities."""
    from tgpflow import NystromKEF
    from tgpflow.stats.kef import kef_chunk_stats

    n = int(KEF_N * scale)
    x = mixture_rows(n, KEF_D, 6)
    device = "gpu" if gpu else "cpu"
    t0 = time.perf_counter()
    est = NystromKEF(n_basis=KEF_M, device=device).fit(x)
    t_fit = time.perf_counter() - t0
    healthy = not est.fit_diagnostics_.get("warnings")
    md = KEF_M * KEF_D
    run.add(f"NystromKEF fit n={n}, d={KEF_D}, m={KEF_M}, {device}", t_fit, "s", target="≤ 30 s" if gpu else "",
            ok=(t_fit <= 30) if gpu else None,
            reference=f"σ_k {est.basis_.bandwidth:.3g}, solve {est.solver_info_.get('method')}, "
                      f"{'healthy' if healthy else 'warned'}")
    basis = est.basis_
    n_cpu = max(200, min(n, 10_000) if gpu else n)
    t_cpu = timed(lambda: kef_chunk_stats(x[:n_cpu], basis), 1) * (n / n_cpu)
    if not gpu:
        run.add(f"KEF statistics pass {n}×{KEF_D}, m={KEF_M}, CPU", t_cpu, "s")
        return
    import cupy as cp

    xd = cp.asarray(x)

    def gpu_pass() -> Any:
        out = kef_chunk_stats(xd, basis)
        cp.cuda.Device().synchronize()
        return out

    gpu_pass()  # warm-up (kernels compiled, pools grown)
    t_gpu = timed(gpu_pass, 1)
    from tgpflow.stats.kef import kef_memory
    from tgpflow.stats.kef_on_device import KERNEL_DEVICE_BLOCK_BYTES
    from tgpflow.stats.tgp_cupy import syrk_add

    rows = KERNEL_DEVICE_BLOCK_BYTES // kef_memory(basis).per_row
    a = cp.random.default_rng(0).standard_normal((rows * KEF_D, md))
    acc = cp.zeros((md, md))

    def syrk() -> None:
        for _ in range(3):
            syrk_add(a, acc, trans="T")
        cp.cuda.Device().synchronize()

    syrk()
    t_syrk = timed(syrk, 2) / 3 * (n / rows)  # DSYRK alone over the pass's blocks
    flops = float(n) * KEF_D * md * md
    run.add(f"KEF statistics pass {n}×{KEF_D}, m={KEF_M} (md={md}), GPU", t_gpu, "s",
            reference=f"cuBLAS DSYRK alone on the same blocks {t_syrk:.2f} s ({flops / t_syrk / 1e12:.1f} TFLOP/s); "
                      f"CPU path {t_cpu:.1f} s (16 cores, {n_cpu} rows × {n // n_cpu})",
            ratio=t_syrk / t_gpu)
    run.add("KEF pass, CPU time / GPU time (per row)", t_cpu / t_gpu, "")
    small = x[:50_000]
    host, dev = kef_chunk_stats(small, basis), kef_chunk_stats(cp.asarray(small), basis)
    rel = max_relative(dev, host, ("C", "h_lap", "E0", "F"))
    run.add("KEF statistics GPU vs CPU (50k rows), max relative difference", rel, "", target="≤ 1e-10",
            ok=rel <= 1e-10)
    probe = x[:200_000]
    a_gpu = est.log_density(probe)
    t_score = timed(lambda: est.log_density(x), 1)
    est.set_params(device="cpu")
    b_cpu = est.log_density(probe)
    rel = float(np.max(np.abs(a_gpu - b_cpu)) / np.max(np.abs(b_cpu)))
    run.add(f"NystromKEF log density {n} rows, GPU", t_score, "s",
            reference=f"GPU vs CPU (200k rows) max difference / max |log p| {rel:.2g}")


def device_name() -> str:
    try:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return f"{name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, CuPy {cp.__version__}"
    except Exception as exc:  # no CuPy or no GPU: the rehearsal
        return f"no GPU ({type(exc).__name__})"


def write(run: Run, out: Path, device: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    info = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "device": device,
            "python": platform.python_version(), "numpy": np.__version__, "seconds": time.perf_counter() - run.t0,
            "figures": run.rows}
    (out / "gpu_results.json").write_text(json.dumps(info, indent=1, default=str))
    lines = [f"GPU figures, {info['date']}, {device} (benchmarks/gpu/bench.py)", "",
             "| figure | value | unit | reference (same run) | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for r in run.rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        met = "" if r["meets_target"] is None else ("yes" if r["meets_target"] else "**no**")
        lines.append(f"| {r['name']} | {r['value']:.4g} | {r['unit']} | {r['reference']} | {ratio} | {r['target']} "
                     f"| {met} |")
    (out / "gpu_results.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=330.0, help="stop optional steps past this many seconds")
    parser.add_argument("--rehearse", action="store_true", help="no GPU steps: tiny CPU fits only")
    parser.add_argument("--only", choices=["scoring", "kef"], help="one step alone (its rows drawn here)")
    args = parser.parse_args()
    from tgpflow.core.backend import gpu_visible

    run = Run(args.budget_s)
    device = device_name()
    print(f"device: {device}", flush=True)
    failed = 0

    def stage(name: str, fn: Any, *a: Any, **kw: Any) -> Any:
        """One step; a failure is recorded and printed, and the steps after it still run (one GPU window)."""
        nonlocal failed
        try:
            return fn(*a, **kw)
        except Exception as exc:
            failed += 1
            traceback.print_exc()
            run.add(f"{name}: FAILED ({type(exc).__name__}: {str(exc)[:200]})", float("nan"), "")
            return None

    try:
        if args.rehearse or not gpu_visible():
            stage("default fits (CPU rehearsal)", default_fits, run, gpu=False, scale=0.005)
            stage("kernel models (CPU rehearsal)", kernel_models, run, gpu=False, scale=0.005)
        elif args.only == "scoring":
            stage("scoring", scoring, run, mixture_rows(N_SCORE, D, 1))
        elif args.only == "kef":
            stage("kernel models", kernel_models, run, gpu=True)
        else:
            refs = stage("cuBLAS references", cublas_references, run) or {"syrk_block_s": float("nan")}
            host = stage("FD pass", fd_pass, run, refs)
            if host is None:
                host = mixture_rows(N_PASS, D, 1)
            stage("scoring", scoring, run, host)
            del host
            stage("default fits", default_fits, run, gpu=True)
            stage("kernel models", kernel_models, run, gpu=True)
    finally:
        write(run, args.out, device)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
