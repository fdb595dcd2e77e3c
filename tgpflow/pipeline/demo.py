"""``python -m tgpflow.pipeline.demo``: the pipeline spec ``pipelines/demo.yaml`` end to end.

Writes four synthetic daily partitions under ``demo-pipeline/data/`` (the demo's mixture),
runs the spec (a first fit), adds a fifth day and runs again (an incremental refit that reads
one partition), then runs a third time (nothing to do), printing what each run did. Needs
nothing outside the project.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tgpflow.io.demo_data import make_dataset
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml"


def _day(data: Path, day: int) -> None:
    tmp = data / f".tmp{day}"
    tmp.mkdir(parents=True)
    make_dataset(tmp, n_rows=50_000, n_files=1, seed=day)
    (tmp / "part-000.parquet").rename(data / f"day-{day:02d}.parquet")
    tmp.rmdir()


def main() -> int:
    root = Path("demo-pipeline")
    shutil.rmtree(root, ignore_errors=True)
    data = root / "data"
    for day in range(4):
        _day(data, day)
    spec = load_spec(SPEC)
    for step in range(3):
        if step == 1:
            _day(data, 4)
        result = run_pipeline(spec)
        print(json.dumps({k: result.get(k) for k in ("run", "changed", "added", "removed", "versions", "rows", "message")
                          if k in result}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
