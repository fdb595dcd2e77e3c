#!/usr/bin/env bash
# Download the wheels of benchmarks/gpu/wheels.txt for CPython 3.12 on x86-64 Linux into .whl/ (ignored by git),
# without their dependencies: the GPU machine has the rest. Run from the repository root, where pip can reach PyPI.
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$ROOT/.whl"
grep -v '^#' "$ROOT/benchmarks/gpu/wheels.txt" | xargs "$PY" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$ROOT/.whl"
du -sh "$ROOT/.whl"
