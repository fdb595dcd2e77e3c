#!/usr/bin/env bash
# All GPU verification of tgpflow in one command (benchmarks/gpu/README.md): install the carried wheels into a
# temporary site directory, run the GPU tests and the GPU benchmark, write the logs, one JSON and one Markdown
# table into OUTDIR. Usage (from the repository root): bash benchmarks/gpu/run.sh OUTDIR [BENCH_OPTIONS]
# BENCH_OPTIONS, one quoted argument, go to bench.py: "--rehearse" (no GPU steps), "--only scoring".
set -u -o pipefail
OUT=${1:?usage: benchmarks/gpu/run.sh OUTDIR [BENCH_OPTIONS]}
MODE=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
SITE=$(mktemp -d /tmp/tgpflow-site.XXXXXX)
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl \
    || { echo "run.sh: installing the wheels of .whl/ failed (see benchmarks/gpu/README.md)"; exit 1; }
export PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1
cd "$ROOT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true; "$PY" -c \
  "import numpy, scipy, numba, dask, distributed, zarr; print('numpy', numpy.__version__, 'scipy', scipy.__version__, 'numba', numba.__version__, 'dask', dask.__version__)"; } \
  | tee "$OUT/environment.txt"
# the CuPy tests (skipped without a GPU), then the device path through array_api_strict and the CLI's device choice
timeout 150 "$PY" -m pytest -q -p no:cacheprovider -p no:xdist -o timeout=90 -m gpu tests/test_gpu.py 2>&1 \
    | tee "$OUT/pytest_gpu.log"
GPU_RC=$?
timeout 60 "$PY" -m pytest -q -p no:cacheprovider -p no:xdist tests/test_device_path.py 2>&1 | tee "$OUT/pytest_device_path.log"
PATH_RC=$?
timeout 360 "$PY" benchmarks/gpu/bench.py --out "$OUT" --budget-s 220 $MODE 2>&1 | tee "$OUT/bench.log"
BENCH_RC=$?
echo "run.sh: pytest -m gpu rc=$GPU_RC, device-path tests rc=$PATH_RC, benchmark rc=$BENCH_RC" | tee -a "$OUT/bench.log"
rm -rf "$SITE"
exit $(( GPU_RC != 0 || PATH_RC != 0 || BENCH_RC != 0 ))
