"""`tgpflow report MODELDIR --out DIR` on a pipeline's model directory: the page, its figures and its numbers, opened in
a real headless browser (Chromium from the system's packages; CI installs it, .ci/run)."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from tests.test_pipeline_drift import _spec, _write_day
from tgpflow.cli import main
from tgpflow.pipeline.history import history
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.versions import ModelVersions

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
#: Appended to a copy of the page: once loaded, the body says how many images it has and how many were decoded.
IMAGE_PROBE = ('<script>window.addEventListener("load", () => {const i = [...document.images]; '
               'document.body.setAttribute("data-images", i.length + ":" + '
               'i.filter(x => x.complete && x.naturalWidth > 0).length)});</script></body>')


def _browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI has no headless Chromium: .ci/run installs chromium-headless-shell")
        pytest.skip("no headless Chromium on this machine (apt-get install chromium-headless-shell)")
    return found


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """Six daily runs, column c shifted by a standard deviation on the last two days, and the report."""
    tmp = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(12)
    spec = load_spec(_spec(tmp))
    for t in range(6):
        _write_day(tmp, t, rng, shift=1.0 if t >= 4 else 0.0)
        run_pipeline(spec, date=f"2026-04-{t + 1:02d}")
    out = tmp / "report"
    r = CliRunner().invoke(main, ["report", str(tmp / "models" / "fd"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.stdout and "current v000006" in r.stdout
    assert "latest drifted partition: d005.parquet" in r.stdout
    return tmp, out


def test_the_report_holds_the_history_and_every_figure(report_dir):
    tmp, out = report_dir
    summary = json.loads((out / "report.json").read_text())
    assert summary["history"] == json.loads(json.dumps(history(ModelVersions(tmp / "models" / "fd"))))
    assert summary["figures"] == ["timeline.png", "marginals.png", "drifted.png"]
    assert summary["latest_drifted"] == "d005.parquet"
    page = (out / "index.html").read_text()
    for version in [f"v00000{k}" for k in range(1, 7)]:
        assert f"<td>{version}</td>" in page
    for figure in summary["figures"]:
        assert f'<img src="{figure}"' in page and (out / figure).stat().st_size > 10_000
    assert "<script" not in page  # a static page
    # a pipeline directory without a report target, and a model file without rows, are refused with the usage
    r = CliRunner().invoke(main, ["report", str(tmp / "data" / "d000.parquet"), "--out", str(tmp / "r2")])
    assert r.exit_code == 2 and "not a pipeline's model directory" in r.output


def test_the_page_loads_in_a_headless_browser_with_every_image(report_dir):
    _, out = report_dir
    browser = _browser()
    probe = out / "probe.html"  # beside the page, so its images resolve the same way
    probe.write_text((out / "index.html").read_text().replace("</body>", IMAGE_PROBE))
    flags = ["--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert 'data-images="3:3"' in dom, dom[-500:]
    shot = out.parent / "screenshot.png"
    subprocess.run([browser, *flags, "--window-size=1200,3000", f"--screenshot={shot}", (out / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (3000, 1200) and pixels[..., :3].std() > 0.05  # drawn, not blank


def test_a_report_says_why_a_figure_is_missing_and_takes_the_store_where_it_is(report_dir, tmp_path):
    tmp, _ = report_dir
    moved = tmp_path / "elsewhere.zarr"
    r = CliRunner().invoke(main, ["report", str(tmp / "models" / "fd"), "--out", str(tmp_path / "r1"),
                                  "--store", str(moved)])
    assert r.exit_code == 0 and "figures timeline.png;" in r.stdout
    assert f"note: no statistics store at {moved} (moved? give it: --store)" in r.output
    shutil.copytree(tmp / "store.zarr", moved)
    r = CliRunner().invoke(main, ["report", str(tmp / "models" / "fd"), "--out", str(tmp_path / "r2"),
                                  "--store", str(moved)])
    assert r.exit_code == 0 and "figures timeline.png, marginals.png, drifted.png" in r.stdout
