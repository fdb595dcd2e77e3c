import importlib.util
import json

import numpy as np
import pytest
import pandas as pd
from click.testing import CliRunner

import tgpflow
from tgpflow.core.backend import gpu_visible
from tgpflow.cli import main
from tests.conftest import write_parquet


def _data(tmp_path, rng, bad=False):
    X = rng.normal(size=(2000, 2))
    if bad:
        X[7, 0] = np.nan
    for i in range(2):
        write_parquet(tmp_path / f"p{i}.parquet", X[i * 1000:(i + 1) * 1000], ["u", "v"], row_group_size=500)
    return str(tmp_path / "p*.parquet"), X


def test_fit_score_sample_info(tmp_path, rng):
    src, X = _data(tmp_path, rng)
    runner = CliRunner()
    model = str(tmp_path / "m.zarr")
    r = runner.invoke(main, ["--json", "fit", src, "--model", "fd", "--out", model, "--n-features", "32",
                             "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows"] == 2000
    r = runner.invoke(main, ["--json", "score", model, src, "--out", str(tmp_path / "scores.parquet"), "--progress",
                             "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["normalized"]
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    est = tgpflow.load(model)  # a normalised log density: the model's minus its log normaliser
    frame = pd.DataFrame(X, columns=["u", "v"])
    np.testing.assert_allclose(scores["log_density"], est.log_density(frame) - est.normalizer_.log_z, rtol=1e-12)
    np.testing.assert_allclose(scores["log_density"], est.log_density(frame, normalized=True), rtol=1e-12)
    np.testing.assert_array_equal(scores["row"], np.arange(2000))
    r = runner.invoke(main, ["--json", "sample", model, "-n", "100", "--out", str(tmp_path / "s.parquet")])
    assert r.exit_code == 0, r.output
    assert pd.read_parquet(tmp_path / "s.parquet").shape == (100, 2)
    # a name of another format would hide the Parquet it holds: refused before any work, nothing written
    r = runner.invoke(main, ["sample", model, "-n", "100", "--out", str(tmp_path / "s.csv")])
    assert r.exit_code == 2 and "writes a Parquet file, not CSV" in r.output and "s.parquet" in r.output
    assert not (tmp_path / "s.csv").exists()
    # rows whose columns have other names: the error names the model's columns and how to map the source's
    write_parquet(tmp_path / "other.parquet", X[:100], ["u", "w"])
    r = runner.invoke(main, ["score", model, str(tmp_path / "other.parquet"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "missing column(s) ['v']" in r.output and "was fitted on ['u', 'v']" in r.output
    assert "--columns" in r.output and not (tmp_path / "o").exists()
    r = runner.invoke(main, ["score", model, str(tmp_path / "other.parquet"), "--out", str(tmp_path / "o"),
                             "--columns", "u,w", "--progress", "none"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["--json", "info", model])
    assert r.exit_code == 0 and json.loads(r.stdout)["columns"] == ["u", "v"]


def test_fit_with_bounds_reports_diagnostics_and_info_shows_them(tmp_path, rng):
    X = np.abs(rng.normal(size=(3000, 2))) + 0.05
    write_parquet(tmp_path / "pos.parquet", X, ["u", "v"], row_group_size=1000)
    runner = CliRunner()
    model = str(tmp_path / "b.zarr")
    r = runner.invoke(main, ["--json", "fit", str(tmp_path / "pos.parquet"), "--model", "fd", "--out", model,
                             "--n-features", "32",
                             "--bounds", "u:0:,v:0:", "--progress", "none"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["diagnostics"]["warnings"] == [] and 0 < out["diagnostics"]["ess_fraction"] <= 1
    info = json.loads(runner.invoke(main, ["--json", "info", model]).stdout)
    assert info["bounds"] == {"u": [0.0, None], "v": [0.0, None]}
    assert info["diagnostics"]["mass_outside"] == pytest.approx(out["diagnostics"]["mass_outside"])
    r = runner.invoke(main, ["--json", "sample", model, "-n", "500", "--out", str(tmp_path / "s.parquet")])
    assert r.exit_code == 0 and json.loads(r.stdout)["ess_fraction"] > 0.01
    assert pd.read_parquet(tmp_path / "s.parquet").to_numpy().min() > 0  # samples respect the bounds
    r = runner.invoke(main, ["--json", "fit", str(tmp_path / "pos.parquet"), "--out", model, "--bounds", "u:zero:"])
    assert r.exit_code == 2 and "--bounds" in r.output


def test_info_says_a_fixed_lambda_as_fit_did(tmp_path, rng):
    src, _ = _data(tmp_path, rng)
    runner = CliRunner()
    model = str(tmp_path / "fixed.zarr")
    r = runner.invoke(main, ["fit", src, "--model", "fd", "--out", model, "--n-features", "16", "--lam", "0.1",
                             "--bandwidth", "1.5", "--progress", "none"])
    assert r.exit_code == 0 and "  chosen: bandwidth 1.5, λ 0.1\n" in r.stdout, r.output
    r = runner.invoke(main, ["info", model])
    assert r.exit_code == 0 and "  chosen: bandwidth 1.5, λ 0.1\n" in r.stdout, r.output  # it said bandwidth only
    assert json.loads(runner.invoke(main, ["--json", "info", model]).stdout)["lam"] == 0.1


def test_exit_codes_and_nothing_written_on_failure(tmp_path, rng):
    src, _ = _data(tmp_path, rng, bad=True)
    runner = CliRunner()
    out = tmp_path / "m.zarr"
    r = runner.invoke(main, ["--json", "fit", src, "--out", str(out), "--n-features", "8", "--progress", "none"])
    assert r.exit_code == 1
    assert "p0.parquet row group 0" in r.output and "column 'u': 1" in r.output
    assert not out.exists() and not any(p.name.startswith(".m.zarr") for p in tmp_path.iterdir())
    assert runner.invoke(main, ["--json", "fit", src]).exit_code == 2  # usage: --out missing
    assert runner.invoke(main, ["--json", "fit", src, "--out", str(out), "--model", "nope"]).exit_code == 2
    r = runner.invoke(main, ["--json", "fit", src, "--out", str(out), "--n-features", "8", "--on-bad-rows", "drop",
                             "--progress", "none"])
    record = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 0 and record["rows_dropped"] == 1 and record["rows"] == 1999
    assert "n_rows_dropped" not in record  # the same count under a second name, once
    (tmp_path / "junk.zarr").mkdir()
    r = runner.invoke(main, ["--json", "info", str(tmp_path / "junk.zarr")])
    assert r.exit_code == 1 and "not a Zarr v3 group" in r.output


def test_scheduler_address_is_used(tmp_path, rng):
    from distributed import LocalCluster

    src, _ = _data(tmp_path, rng)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "m.zarr"), "--n-features", "8",
                                      "--scheduler", cluster.scheduler_address, "--progress", "log"])
    assert r.exit_code == 0, r.output


def test_fit_ncfd_with_selection_then_report(tmp_path, rng):
    src, X = _data(tmp_path, rng)
    runner = CliRunner()
    model = str(tmp_path / "nc.zarr")
    r = runner.invoke(main, ["--json", "fit", src, "--model", "ncfd", "--out", model, "--n-features", "32", "--lam",
                             "auto",
                             "--bandwidth", "0.3,0.6", "--noise-levels", "4", "--progress", "none"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["selected"]["bandwidth"] in (0.3, 0.6) and out["lam"] == out["selected"]["lam"]
    rep = tmp_path / "report"
    r = runner.invoke(main, ["--json", "report", model, src, "--out", str(rep), "--directions", "20",
                             "--model-samples", "5000"])
    assert r.exit_code == 0, r.output
    metrics = json.loads((rep / "metrics.json").read_text())
    assert 0 <= metrics["sliced"]["ks_median"] <= 1 and metrics["sliced"]["n_directions"] == 20
    assert np.isfinite(metrics["hyvarinen_loss"]) and metrics["selection"]["chosen"]["bandwidth"] in (0.3, 0.6)
    for name in ("density.png", "ncfd_levels.png"):
        assert (rep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report")]  # no temporaries left


def test_report_of_higher_dimensional_data_draws_projected_cdfs(tmp_path, rng):
    X = rng.normal(size=(1500, 4))
    path = write_parquet(tmp_path / "d4.parquet", X)
    est = tgpflow.GPTiltedDensity(method="fvpd", n_features=30).fit(str(path))
    est.save(tmp_path / "m.zarr")
    r = CliRunner().invoke(main, ["--json", "report", str(tmp_path / "m.zarr"), str(path), "--out",
                                  str(tmp_path / "rep"),
                                  "--directions", "10", "--model-samples", "2000"])
    assert r.exit_code == 0, r.output
    assert "projected_cdfs.png" in json.loads((tmp_path / "rep" / "metrics.json").read_text())["figures"]


def test_fit_rejects_bad_numbers(tmp_path, rng):
    src, _ = _data(tmp_path, rng)
    r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "m.zarr"), "--lam", "abc"])
    assert r.exit_code == 2 and "--lam" in r.output


def test_fit_kernel_models_then_score_and_info(tmp_path, rng):
    src, X = _data(tmp_path, rng)
    runner = CliRunner()
    kef = str(tmp_path / "kef.zarr")
    r = runner.invoke(main, ["--json", "fit", src, "--model", "nkef", "--out", kef, "--n-basis", "20", "--base",
                             "gaussian",
                             "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows"] == 2000
    est = tgpflow.load(kef)
    assert isinstance(est, tgpflow.NystromKEF) and est.base == "gaussian"
    r = runner.invoke(main, ["--json", "score", kef, src, "--out", str(tmp_path / "s.parquet"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(pd.read_parquet(tmp_path / "s.parquet")["log_density"].to_numpy(),
                               est.log_density(pd.DataFrame(X, columns=["u", "v"]), normalized=True), rtol=1e-10)
    r = runner.invoke(main, ["--json", "info", kef])
    assert r.exit_code == 0 and json.loads(r.stdout)["n_basis"] == 20 and json.loads(r.stdout)["method"] == "nkef"
    stein = str(tmp_path / "stein.zarr")
    r = runner.invoke(main, ["--json", "fit", src, "--model", "score", "--kernel", "diagonal", "--out", stein,
                             "--n-basis", "20",
                             "--lam", "auto", "--progress", "none"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["--json", "score", stein, src, "--out", str(tmp_path / "t.parquet"), "--progress", "none"])
    assert r.exit_code == 1 and "no log density" in r.output
    r = runner.invoke(main, ["--json", "fit", src, "--model", "nkef", "--base", "learn", "--out",
                             str(tmp_path / "x.zarr")])
    assert r.exit_code == 2


def test_fit_on_gpu_names_the_extra_without_cupy_and_the_cpu_for_other_families(tmp_path, rng):
    src, _ = _data(tmp_path, rng)
    if not gpu_visible():  # CI: no CuPy, or no CUDA device
        r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "g.zarr"), "--device", "gpu",
                                      "--n-features", "16", "--progress", "none"])
        assert r.exit_code == 1 and 'pip install "tgpflow[gpu]"' in r.output, r.output
        assert not (tmp_path / "g.zarr").exists()
    r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "k.zarr"), "--device", "gpu",
                                  "--model", "rsr", "--progress", "none"])  # a family without a device path
    assert r.exit_code == 1 and "use device='cpu'" in r.output and "computes on the CPU" in r.output, r.output
    assert not (tmp_path / "k.zarr").exists()
    if importlib.util.find_spec("dask_cuda") is None:  # --local gpu names the extra too
        r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "c.zarr"), "--local", "gpu",
                                      "--n-features", "16", "--progress", "none"])
        assert r.exit_code == 1 and '--local gpu needs dask-cuda: pip install "tgpflow[gpu]"' in r.output, r.output
        assert not (tmp_path / "c.zarr").exists()
    r = CliRunner().invoke(main, ["--json", "fit", src, "--out", str(tmp_path / "m.zarr"), "--precision", "mixed",
                                  "--model", "fd", "--n-features", "16", "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert tgpflow.load(tmp_path / "m.zarr").precision == "mixed"


def test_rsr_fit_and_anomaly_scores_for_any_source(tmp_path, rng):
    src, X = _data(tmp_path, rng)
    runner = CliRunner()
    for method, extra in (("rsr", ["--smoothness", "1.0"]), ("fd", [])):
        model = str(tmp_path / f"{method}.zarr")
        r = runner.invoke(main, ["--json", "fit", src, "--model", method, "--out", model, "--n-features", "64",
                                 "--progress",
                                 "none", *extra])
        assert r.exit_code == 0, r.output
        out = tmp_path / f"{method}-scores.parquet"
        r = runner.invoke(main, ["--json", "score", model, src, "--out", str(out), "--progress", "none"])
        assert r.exit_code == 0, r.output
        scores = pd.read_parquet(out)
        est = tgpflow.load(model)
        np.testing.assert_allclose(scores["anomaly_score"], -scores["log_density"])
        log_z = est.normalizer_.log_z if getattr(est, "normalizer_", None) is not None else 0.0  # RSR has none
        assert (scores["anomaly"] == (scores["anomaly_score"] > est.anomaly_threshold_ + log_z)).all()
        assert 0.0 < scores["anomaly"].mean() < 0.05  # ≈ the 1% training quantile
        r = runner.invoke(main, ["--json", "info", model])
        assert r.exit_code == 0 and json.loads(r.stdout)["method"] == method
    r = runner.invoke(main, ["--json", "report", str(tmp_path / "rsr.zarr"), src, "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0 and "anomaly_scores.png" in json.loads(r.stdout)["figures"], r.output


# the CLI logs diagnostic warnings (e.g. R̂ of the kernel model's chains); the figures are asserted below
@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_sample_methods_on_the_model_score(tmp_path, rng):
    src, X = _data(tmp_path, rng)  # N(0, I) rows
    runner = CliRunner()
    fd, kef, sc = (str(tmp_path / f"{m}.zarr") for m in ("fd", "kef", "sc"))
    for model, out, extra in (("fd", fd, ["--n-features", "64"]),
                              ("nkef", kef, ["--n-basis", "60", "--base", "gaussian"]),
                              ("score", sc, ["--n-basis", "60"])):
        r = runner.invoke(main, ["--json", "fit", src, "--model", model, "--out", out, "--progress", "none", *extra])
        assert r.exit_code == 0, r.output
    # MCMC: 10 chains of 50 kept draws, every 40th of 2000 steps (enough for R̂ ≤ 1.01 and ESS ≥ 400)
    for model, method, extra in ((fd, "mala", ["--steps", "2000"]), (fd, "svgd", ["--steps", "300"]),
                                 (kef, "langevin", ["--steps", "2000"]),
                                 (sc, "langevin", ["--init", src, "--steps", "2000"])):
        out = tmp_path / f"{method}-{len(extra)}.parquet"
        r = runner.invoke(main, ["--json", "sample", model, "-n", "500", "--out", str(out), "--method", method,
                                 "--warmup", "200", *extra])
        assert r.exit_code == 0, r.output
        rows = pd.read_parquet(out)
        assert list(rows.columns) == ["u", "v"] and rows.shape == (500, 2)
        assert np.all(np.isfinite(rows.to_numpy()))
        if model != sc:  # proper densities ≈ N(0, I): moments within a few standard errors + model bias
            assert np.all(np.abs(rows.mean().to_numpy()) < 0.2), (method, rows.mean())
            assert np.all(np.abs(rows.var().to_numpy() - 1) < 0.3), (method, rows.var())
        info = json.loads(r.stdout.strip().splitlines()[-1])
        if method == "mala":
            assert 0.4 < info["acceptance_rate"] < 0.8
            assert info["init"] == "base" and info["rhat_max"] <= 1.01 and info["ess_bulk_min"] >= 400
    r = runner.invoke(main, ["--json", "sample", sc, "-n", "10", "--out", str(tmp_path / "x.parquet"), "--method",
                             "mala"])
    assert r.exit_code == 1 and "no log density" in r.output and not (tmp_path / "x.parquet").exists()
    rsr = str(tmp_path / "rsr.zarr")
    assert runner.invoke(main, ["--json", "fit", src, "--model", "rsr", "--out", rsr, "--n-features", "50",
                                "--progress", "none"]).exit_code == 0
    r = runner.invoke(main, ["--json", "sample", rsr, "-n", "10", "--out", str(tmp_path / "x.parquet"), "--method",
                             "mala"])
    assert r.exit_code == 1 and "--init SOURCE" in r.output  # no resampler and no basis to start from
    r = runner.invoke(main, ["--json", "sample", rsr, "-n", "200", "--out", str(tmp_path / "x.parquet"), "--method",
                             "mala",
                             "--init", src, "--warmup", "100", "--steps", "100"])
    assert r.exit_code == 0, r.output


def test_what_fit_prints_and_what_report_accepts_come_from_the_registrys_capabilities(tmp_path, rng, monkeypatch):
    """``tgpflow fit`` prints the kind's own summary (:class:`tgpflow.models.registry.ModelKind` ``summary``),
    read here off the saved model's attributes: a kernel family's has no GP-tilted fields, RSR's its smoothness;
    ``tgpflow report`` follows ``reports``, not a class name (a GP-tilted kind registered without it is refused,
    and RSR with it set gets past the check); the pass's work estimate follows ``work`` (None for RSR)."""
    import dataclasses

    from tgpflow.models import registry

    src, X = _data(tmp_path, rng)
    runner = CliRunner()
    printed = {}
    for method, extra in (("fd", ["--n-features", "32"]), ("nkef", ["--n-basis", "20"]),
                          ("rsr", ["--smoothness", "1.0", "--n-features", "64"])):
        model = str(tmp_path / f"{method}.zarr")
        r = runner.invoke(main, ["--json", "fit", src, "--model", method, "--out", model, "--progress", "none", *extra])
        assert r.exit_code == 0, r.output
        printed[method] = out = json.loads(r.stdout.strip().splitlines()[-1])
        est = tgpflow.load(model)
        assert out["model"] == model and out["method"] == method and out["rows"] == est.n_samples_seen_ == len(X)
    fd, nkef, rsr = (tgpflow.load(str(tmp_path / f"{m}.zarr")) for m in ("fd", "nkef", "rsr"))
    assert printed["fd"]["n_features"] == 32 and printed["fd"]["bounds"] == (
        None if fd.bounds_ is None else fd.bounds_.to_dict())
    assert printed["fd"]["diagnostics"]["ess_fraction"] == pytest.approx(fd.fit_diagnostics_["ess_fraction"])
    assert printed["nkef"]["bandwidth"] == pytest.approx(nkef.bandwidth_)
    assert not {"n_features", "bounds", "discrete", "base_mixture"} & set(printed["nkef"])
    assert printed["rsr"]["smoothness"] == pytest.approx(rsr.smoothness_) and "lam" not in printed["rsr"]
    kinds = registry.model_kinds()
    assert kinds["RootSobolevDensity"].pass_work(rsr, 10_000, 3) is None
    assert kinds["GPTiltedDensity"].pass_work(fd, 2_000, 3) == 2 * kinds["GPTiltedDensity"].pass_work(fd, 1_000, 3)
    report = ["report", str(tmp_path / "fd.zarr"), src, "--out", str(tmp_path / "rep")]
    monkeypatch.setitem(registry._KINDS, "GPTiltedDensity", dataclasses.replace(kinds["GPTiltedDensity"],
                                                                                reports=False))
    r = runner.invoke(main, report)
    assert r.exit_code == 1 and "reports are not implemented for a GPTiltedDensity" in r.output
    monkeypatch.setitem(registry._KINDS, "GPTiltedDensity", kinds["GPTiltedDensity"])
    r = runner.invoke(main, ["--json", *report])
    assert r.exit_code == 0 and "reports are not implemented" not in r.output, r.output
