"""The README's first fit runs as written (browser-free): its shell commands through the CLI and its Python block,
on a smaller table of the same three columns; what they print starts as the README shows, and the Python block's
log densities are the scores the command wrote."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tgpflow.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(section: str) -> dict[str, list[str]]:
    text = README.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", text, re.S):
        blocks.setdefault(lang, []).append(body)
    return blocks


@pytest.mark.slow
def test_the_readme_first_fit_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    n = 3000
    pd.DataFrame({"latency_ms": rng.gamma(2.0, 40.0, n), "bytes_in": rng.lognormal(8.0, 1.0, n),
                  "cpu": rng.beta(2.0, 5.0, n)}).to_parquet("requests.parquet")
    blocks = _blocks("A first fit")
    commands = [shlex.split(line) for line in blocks["bash"][0].splitlines() if line.startswith("tgpflow ")]
    shown = [line for line in blocks["text"][0].splitlines() if not line.startswith(" ")]
    assert len(commands) == len(shown) == 2
    for argv, first_line in zip(commands, shown, strict=True):
        r = CliRunner().invoke(main, [*argv[1:], "--progress", "none"])
        assert r.exit_code == 0, r.output
        # the same sentence, with this table's figures
        pattern = re.escape(first_line).replace("20,000", r"[\d,]+").replace(r"32\ s", r"[\d.]+\ s")
        assert re.fullmatch(pattern, r.stdout.splitlines()[0]), (first_line, r.stdout)
    namespace: dict = {}
    exec(compile(blocks["python"][0], str(README), "exec"), namespace)
    log_p, rows = namespace["log_p"], namespace["rows"]
    scores = pd.read_parquet("scores")  # what `tgpflow score` wrote, streamed through Dask chunk by chunk
    assert log_p.shape == (n,) and rows.shape == (10_000, 3) and np.isfinite(log_p).all()
    np.testing.assert_allclose(log_p, scores["log_density"], rtol=1e-12, atol=1e-12)
    # the samples are in the data's units: each column's median within a few standard errors of the rows'
    frame = pd.read_parquet("requests.parquet")
    np.testing.assert_array_less(np.abs(np.median(rows, axis=0) - frame.median().to_numpy()),
                                 6 * 1.25 * frame.std().to_numpy() / np.sqrt(n))
