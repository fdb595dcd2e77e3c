"""Models, statistics stores and score outputs over fsspec (issue 16): ``memory://`` (a filesystem without
atomic rename: the pointer protocol of :mod:`tgpflow.io.atomic`) and ``file://`` (the local rename protocol,
reached through a URL), with the same guarantees as local paths: a round trip gives the same model, a writer
that fails or is killed midway leaves the previous good artifact loadable and nothing half-written visible,
and nothing tgpflow did not write is replaced. Faults are injected with monkeypatch only."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import fsspec
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from fsspec.implementations.memory import MemoryFileSystem

import tgpflow
from tgpflow import GPTiltedDensity, NystromKEF, RootSobolevDensity
from tgpflow.cli import main
from tgpflow.errors import DiagnosticWarning, ModelFileError, OutputExistsError
from tgpflow.io.artifact import read_artifact
from tgpflow.io.atomic import VERSION, as_path, atomic_path, atomic_write_text, discard, remove_temporaries, resolve
from tgpflow.io.outputs import MARKER, output_kind
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore, StoreBusyError
from tests.conftest import write_parquet


def _names(fs: MemoryFileSystem, prefix: str) -> list[str]:
    """Every object under ``prefix``, relative to it."""
    return sorted(p.removeprefix(prefix).lstrip("/") for p in fs.find(prefix))


def _hidden_versions(fs: MemoryFileSystem, directory: str) -> list[str]:
    return sorted(Path(p).name for p in fs.ls(directory, detail=False) if VERSION.match(Path(p).name))


def _url(where: str, tmp_path: Path, name: str) -> str:
    return f"memory://bucket/{name}" if where == "memory" else f"file://{tmp_path}/{name}"


ESTIMATORS = {
    "fd": lambda: GPTiltedDensity(method="fd", n_features=24, lam=0.1, bandwidth=1.0, random_state=0),
    "fvpd": lambda: GPTiltedDensity(method="fvpd", n_features=24, lam=0.1, bandwidth=1.0, random_state=0),
    "nkef": lambda: NystromKEF(n_basis=16, bandwidth=2.0, lam=1e-3, base="gaussian", random_state=0),
    "rsr": lambda: RootSobolevDensity(n_features=32, max_iter=20, random_state=0),
}


def _other(X: np.ndarray) -> GPTiltedDensity:
    """A second model, different from ``ESTIMATORS["fd"]``'s (another feature draw)."""
    with warnings.catch_warnings():  # its fit diagnostics are beside the point here
        warnings.simplefilter("ignore", DiagnosticWarning)
        return GPTiltedDensity(method="fd", n_features=24, lam=0.1, bandwidth=1.0, random_state=9).fit(X)


# -- models ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_model_saved_to_a_url_loads_back_with_the_same_density(mem, tmp_path, gaussian_mix, where, name):
    est = ESTIMATORS[name]().fit(gaussian_mix)
    url = _url(where, tmp_path, f"{name}.zarr")
    est.save(url)
    back = tgpflow.load(url)
    assert type(back) is type(est)
    rows = gaussian_mix[:50]
    np.testing.assert_allclose(back.log_density(rows), est.log_density(rows), rtol=1e-12, atol=0)
    # the same bytes as a save to a plain local path: only the place differs
    local = est.save(tmp_path / f"plain-{name}.zarr")
    for key, a in read_artifact(local)[1].items():
        np.testing.assert_array_equal(read_artifact(url)[1][key], a, err_msg=key)
    if where == "file":  # the local protocol: a plain directory, renamed into place
        assert (tmp_path / f"{name}.zarr" / "zarr.json").is_file()
    else:  # one hidden version, named by the pointer
        names = _names(mem, f"/bucket/{name}.zarr")
        pointer = json.loads(mem.cat_file(f"/bucket/{name}.zarr/{MARKER}"))
        assert pointer["kind"] == "model" and VERSION.match(pointer["current"])
        assert {n.split("/")[0] for n in names} == {MARKER, pointer["current"]}


class _Recording(MemoryFileSystem):
    """``memory://`` under another protocol, recording the storage options each instance is made with."""

    protocol = ("tgpflowtest",)
    seen: list[dict] = []

    def __init__(self, *args, **storage_options):
        _Recording.seen.append(dict(storage_options))
        super().__init__(*args, **storage_options)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("tgpflowtest://"):
            path = "memory://" + path.removeprefix("tgpflowtest://")
        return MemoryFileSystem._strip_protocol(path)


@pytest.mark.filterwarnings("ignore:UPath 'tgpflowtest' filesystem not explicitly implemented")
def test_save_and_load_pass_storage_options_to_every_filesystem_they_open(mem, gaussian_mix):
    fsspec.register_implementation("tgpflowtest", _Recording, clobber=True)  # a protocol only this test uses
    est = ESTIMATORS["fd"]().fit(gaussian_mix)
    for step in ("save", "load"):
        _Recording.clear_instance_cache()  # so that every filesystem opened is made, and recorded, anew
        _Recording.seen.clear()
        if step == "save":
            est.save("tgpflowtest://bucket/m.zarr", storage_options={"token": "t"})
        else:
            back = tgpflow.load("tgpflowtest://bucket/m.zarr", storage_options={"token": "t"}, verify=True)
        # every filesystem got them: the path's (a save writes the group's objects through it), and on load also
        # the Zarr FsspecStore's (made asynchronous by zarr)
        assert _Recording.seen and all(s.get("token") == "t" for s in _Recording.seen), (step, _Recording.seen)
        assert any(s.get("asynchronous") for s in _Recording.seen) == (step == "load"), (step, _Recording.seen)
    np.testing.assert_array_equal(back.theta_, est.theta_)
    assert mem.isfile(f"/bucket/m.zarr/{MARKER}")  # the memory store behind the recording protocol


def test_npz_and_verify_over_memory(mem, gaussian_mix):
    est = ESTIMATORS["fvpd"]().fit(gaussian_mix)
    est.save("memory://bucket/m.npz")
    assert mem.isfile("/bucket/m.npz") and _names(mem, "/bucket") == ["m.npz"]  # one object, no temporary
    back = tgpflow.load("memory://bucket/m.npz", verify=True)
    np.testing.assert_array_equal(back.log_density(gaussian_mix), est.log_density(gaussian_mix))


def _broken_write(monkeypatch) -> None:
    import zarr.core.group as zg

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(zg.Group, "create_array", broken)


@pytest.mark.parametrize("where", ["memory", "file"])
def test_a_failed_save_keeps_the_previous_model_and_leaves_nothing(mem, tmp_path, gaussian_mix, monkeypatch, where):
    url = _url(where, tmp_path, "m.zarr")
    good = ESTIMATORS["fd"]().fit(gaussian_mix)
    good.save(url)
    before = _names(mem, "/bucket") if where == "memory" else sorted(p.name for p in tmp_path.iterdir())
    other = _other(gaussian_mix)
    with monkeypatch.context() as m:
        _broken_write(m)
        with pytest.raises(OSError, match="disk full"):
            other.save(url)
    after = _names(mem, "/bucket") if where == "memory" else sorted(p.name for p in tmp_path.iterdir())
    assert after == before  # the new version (or temporary) was removed; the old one is whole
    np.testing.assert_array_equal(tgpflow.load(url).theta_, good.theta_)


class Killed(BaseException):
    """A SIGKILL, as seen from inside the process: nothing after it runs (no ``except Exception``)."""


def _killed_before_cleanup(monkeypatch, fs: MemoryFileSystem, fail: str, target: str) -> None:
    """A writer SIGKILLed at its commit: ``fail`` (``pipe_file``: a directory's pointer; ``copy``: a file's copy)
    of a path ending in ``target`` raises, and nothing the writer would do afterwards (its clean-up) happens."""
    real = getattr(type(fs), fail)

    def killed(self, path, *a, **k):
        if str(a[0] if fail == "copy" else path).endswith(target):
            raise Killed
        return real(self, path, *a, **k)

    monkeypatch.setattr(type(fs), fail, killed)
    monkeypatch.setattr(type(fs), "rm", lambda *a, **k: None)


def test_a_writer_killed_before_its_pointer_leaves_the_good_model_and_an_invisible_version(mem, gaussian_mix,
                                                                                              monkeypatch):
    url = "memory://bucket/m.zarr"
    good = ESTIMATORS["fd"]().fit(gaussian_mix)
    good.save(url)
    committed = json.loads(mem.cat_file(f"/bucket/m.zarr/{MARKER}"))["current"]
    other = _other(gaussian_mix)
    with monkeypatch.context() as m:
        _killed_before_cleanup(m, mem, "pipe_file", MARKER)
        with pytest.raises(Killed):
            other.save(url)
    versions = {n.split("/")[0] for n in _names(mem, "/bucket/m.zarr")} - {MARKER}
    assert committed in versions and len(versions) == 2  # the killed writer's version, complete but unreferenced
    assert _names(mem, "/bucket") == [n for n in _names(mem, "/bucket") if n.startswith("m.zarr/")]  # no stray
    np.testing.assert_array_equal(tgpflow.load(url).theta_, good.theta_)
    assert output_kind(url) == "model"
    removed = remove_temporaries("memory://bucket")
    assert [Path(r).name for r in removed] == sorted(versions - {committed})
    assert {n.split("/")[0] for n in _names(mem, "/bucket/m.zarr")} == {MARKER, committed}
    np.testing.assert_array_equal(tgpflow.load(url).theta_, good.theta_)
    other.save(url)  # the next write replaces it, and leaves only its own version
    np.testing.assert_array_equal(tgpflow.load(url).theta_, other.theta_)
    assert len({n.split("/")[0] for n in _names(mem, "/bucket/m.zarr")}) == 2


def test_a_first_write_killed_midway_counts_as_absent(mem, gaussian_mix, monkeypatch):
    url = "memory://bucket/m.zarr"
    est = ESTIMATORS["fd"]().fit(gaussian_mix)
    with monkeypatch.context() as m:
        _killed_before_cleanup(m, mem, "pipe_file", MARKER)
        with pytest.raises(Killed):
            est.save(url)
    assert _names(mem, "/bucket/m.zarr") and MARKER not in _names(mem, "/bucket/m.zarr")  # a hidden version only
    with pytest.raises(ModelFileError, match="not a Zarr v3 group"):
        tgpflow.load(url)
    assert output_kind(url) is None
    est.save(url, overwrite=False)  # nothing was committed there: not an overwrite
    np.testing.assert_array_equal(tgpflow.load(url).theta_, est.theta_)


def test_a_file_killed_before_its_copy_leaves_only_a_hidden_temporary(mem, gaussian_mix, monkeypatch):
    url = "memory://bucket/m.npz"
    good = ESTIMATORS["fd"]().fit(gaussian_mix)
    good.save(url)
    other = _other(gaussian_mix)
    with monkeypatch.context() as m:
        _killed_before_cleanup(m, mem, "copy", "/m.npz")
        with pytest.raises(Killed):
            other.save(url)
    names = _names(mem, "/bucket")
    assert len(names) == 2 and names[1] == "m.npz" and names[0].startswith(".m.npz.tmp-")
    np.testing.assert_array_equal(tgpflow.load(url).theta_, good.theta_)
    assert remove_temporaries("memory://bucket") == [f"memory://bucket/{names[0]}"]
    assert _names(mem, "/bucket") == ["m.npz"]


@pytest.mark.parametrize("where", ["memory", "file"])
def test_what_tgpflow_did_not_write_is_refused_and_untouched(mem, tmp_path, gaussian_mix, where):
    est = ESTIMATORS["fd"]().fit(gaussian_mix)
    user_dir, user_file = _url(where, tmp_path, "results"), _url(where, tmp_path, "notes.parquet")
    fs, directory = fsspec.core.url_to_fs(user_dir)
    _, file = fsspec.core.url_to_fs(user_file)
    fs.makedirs(directory, exist_ok=True)
    fs.pipe_file(f"{directory}/a.csv", b"a,b\n1,2\n")
    fs.pipe_file(file, b"a week of work")
    for url in (user_dir, user_file):
        with pytest.raises(OutputExistsError, match="did not write"):
            est.save(url, overwrite=True)
    assert fs.cat_file(f"{directory}/a.csv") == b"a,b\n1,2\n" and fs.cat_file(file) == b"a week of work"
    assert sorted(Path(p).name for p in fs.ls(str(Path(directory).parent), detail=False)) == ["notes.parquet",
                                                                                               "results"]
    est.save(_url(where, tmp_path, "m.zarr"))
    with pytest.raises(OutputExistsError, match="pass --overwrite"):
        est.save(_url(where, tmp_path, "m.zarr"), overwrite=False)
    with pytest.raises(OutputExistsError, match="holds a tgpflow model, not a scores"):
        with atomic_path(_url(where, tmp_path, "m.zarr"), "scores", directory=True):
            pass


def test_a_model_copied_to_memory_as_a_plain_directory_loads_and_is_replaced_whole(mem, tmp_path, gaussian_mix):
    """A Zarr model uploaded as it lies on disk (no pointer) reads through FsspecStore; replacing it leaves only
    the new version and the pointer."""
    good = ESTIMATORS["fd"]().fit(gaussian_mix)
    local = good.save(tmp_path / "m.zarr")
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        mem.pipe_file(f"/bucket/m.zarr/{f.relative_to(local).as_posix()}", f.read_bytes())
    np.testing.assert_array_equal(tgpflow.load("memory://bucket/m.zarr").theta_, good.theta_)
    assert output_kind("memory://bucket/m.zarr") == "model"
    other = _other(gaussian_mix)
    other.save("memory://bucket/m.zarr")
    current = json.loads(mem.cat_file(f"/bucket/m.zarr/{MARKER}"))["current"]
    assert {n.split("/")[0] for n in _names(mem, "/bucket/m.zarr")} == {MARKER, current}
    np.testing.assert_array_equal(tgpflow.load("memory://bucket/m.zarr").theta_, other.theta_)


def test_discard_and_small_text_files_over_memory(mem, gaussian_mix):
    atomic_write_text("memory://bucket/CURRENT", "v000001\n")
    atomic_write_text("memory://bucket/CURRENT", "v000002\n")
    assert _names(mem, "/bucket") == ["CURRENT"] and mem.cat_file("/bucket/CURRENT") == b"v000002\n"
    ESTIMATORS["fd"]().fit(gaussian_mix).save("memory://bucket/m.zarr")
    discard("memory://bucket/m.zarr")
    assert not mem.exists("/bucket/m.zarr") and output_kind("memory://bucket/m.zarr") is None


def test_as_path_keeps_local_paths_local(tmp_path):
    assert as_path(f"file://{tmp_path}/m.zarr") == tmp_path / "m.zarr"
    assert as_path(str(tmp_path / "m.zarr")) == tmp_path / "m.zarr"
    assert type(as_path(tmp_path)) is type(tmp_path)
    assert str(as_path("memory://bucket/m.zarr")) == "memory://bucket/m.zarr"


# -- score and sample outputs --------------------------------------------------------------------------

FIT = ["--model", "fd", "--n-features", "24", "--lam", "0.1", "--bandwidth", "1.0", "--progress", "none"]


def test_cli_fit_score_and_sample_to_memory_read_back_equal_in_memory_results(mem, tmp_path, gaussian_mix):
    data = write_parquet(tmp_path / "data.parquet", gaussian_mix, ["u", "v"], row_group_size=150)
    runner = CliRunner()
    r = runner.invoke(main, ["--json", "fit", str(data), "--out", "memory://bucket/m.zarr", *FIT])
    assert r.exit_code == 0, r.output
    est = tgpflow.load("memory://bucket/m.zarr")
    r = runner.invoke(main, ["--json", "info", "memory://bucket/m.zarr"])
    assert r.exit_code == 0 and json.loads(r.output)["fingerprint"] == est.features_.fingerprint, r.output
    r = runner.invoke(main, ["--json", "score", "memory://bucket/m.zarr", str(data), "--out", "memory://bucket/scores",
                             "--progress", "none"])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.output.strip().splitlines()[-1])
    assert printed["data"] == str(resolve("memory://bucket/scores"))
    scores = pd.read_parquet(printed["data"])  # what a reader of the committed version gets
    expected = est.log_density(pd.DataFrame(gaussian_mix, columns=["u", "v"]), normalized=True)  # as score writes
    np.testing.assert_allclose(scores["log_density"], expected, rtol=1e-12)
    np.testing.assert_array_equal(scores["anomaly_score"], -scores["log_density"])
    assert output_kind("memory://bucket/scores") == "scores"
    # a second score run needs --overwrite, then replaces the dataset whole
    r = runner.invoke(main, ["--json", "score", "memory://bucket/m.zarr", str(data), "--out", "memory://bucket/scores",
                             "--progress", "none"])
    assert r.exit_code == 2 and "pass --overwrite" in r.output
    r = runner.invoke(main, ["--json", "score", "memory://bucket/m.zarr", str(data), "--out", "memory://bucket/scores",
                             "--progress", "none", "--overwrite"])
    assert r.exit_code == 0, r.output
    again = json.loads(r.output.strip().splitlines()[-1])["data"]
    assert again != printed["data"] and not mem.exists(printed["data"].removeprefix("memory://"))
    np.testing.assert_allclose(pd.read_parquet(again)["log_density"], expected, rtol=1e-12)
    # samples: one Parquet object
    r = runner.invoke(main, ["--json", "sample", "memory://bucket/m.zarr", "-n", "100", "--out",
                             "memory://bucket/s.parquet"])
    assert r.exit_code == 0, r.output
    with mem.open("/bucket/s.parquet", "rb") as fh:
        table = pq.read_table(fh)
    np.testing.assert_array_equal(np.column_stack([table["u"], table["v"]]), est.sample(100, random_state=0))
    assert output_kind("memory://bucket/s.parquet") == "samples"
    assert not [n for n in _names(mem, "/bucket") if ".tmp-" in n]


# -- the pipeline's statistics store and model directory -----------------------------------------------

MODELS = [{"name": "fd", "estimator": "GPTiltedDensity",
           "params": {"method": "fd", "n_features": 32, "lam": 0.1, "bandwidth": 1.0}},
          {"name": "kef", "estimator": "NystromKEF", "params": {"n_basis": 10, "base": "gaussian"}}]


def _pipeline_spec(tmp_path: Path, out: str, name: str) -> Path:
    spec = {"name": "t", "source": {"path": str(tmp_path / "data" / "*.parquet")},
            "preprocess": {"center": True, "scale": True}, "models": MODELS,
            "outputs": {"store": f"{out}/store.zarr", "models": f"{out}/models",
                        "scores": {"path": f"{out}/scores", "model": "fd", "threshold_quantile": 0.05}}}
    path = tmp_path / f"spec-{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _partition(tmp_path: Path, s: int) -> np.ndarray:
    X = np.random.default_rng(s).normal(size=(400, 2)) * [1.0, 2.0] + [0.5, -1.0]
    (tmp_path / "data").mkdir(exist_ok=True)
    write_parquet(tmp_path / "data" / f"p{s:03d}.parquet", X, ["a", "b"], row_group_size=200)
    return X


def test_a_pipeline_store_on_memory_accumulates_and_commits_like_a_local_one(mem, tmp_path):
    data = {s: _partition(tmp_path, s) for s in range(2)}
    mem_spec = load_spec(_pipeline_spec(tmp_path, "memory://bucket", "memory"))
    local_spec = load_spec(_pipeline_spec(tmp_path, str(tmp_path / "local"), "local"))
    for spec in (mem_spec, local_spec):
        assert run_pipeline(spec)["changed"]
    data[2] = _partition(tmp_path, 2)
    results = [run_pipeline(spec) for spec in (mem_spec, local_spec)]
    assert [len(r["added"]) for r in results] == [1, 1] and results[0]["versions"] == {"fd": "v000002",
                                                                                        "kef": "v000002"}
    store = StatsStore("memory://bucket/store.zarr")
    manifest, local = store.read_manifest(), StatsStore(tmp_path / "local" / "store.zarr").read_manifest()
    for key in ("run", "partitions", "preprocess", "columns"):
        assert manifest[key] == local[key], key
    # the running total is the sum of the partitions' statistics (accumulated once each, in two runs)
    for name in ("fd", "kef"):
        total = store.load(manifest["models"][name]["total"])
        parts = [store.load(p["stats"][name]) for p in manifest["partitions"].values()]
        assert total.n == sum(p.n for p in parts) == 1200
        for key, a in sum(parts).to_arrays().items():
            np.testing.assert_allclose(total.to_arrays()[key], a, rtol=1e-12, atol=1e-12, err_msg=key)
    # the totals of run 1 were collected once run 2 committed
    totals = sorted(Path(p).name for p in mem.ls("/bucket/store.zarr/totals", detail=False))
    assert totals == sorted(Path(manifest["models"][m]["total"]).name for m in ("fd", "kef"))
    # the current model equals a full fit of all rows with the frozen preprocessing and draw
    est = tgpflow.load("memory://bucket/models/fd")
    pre = manifest["preprocess"]
    X = (np.concatenate([data[s] for s in sorted(data)]) - pre["center"]) / np.asarray(pre["scale"])
    ref = GPTiltedDensity(method="fd", n_features=32, lam=0.1, bandwidth=1.0).fit(X, features=est.features_)
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(est.theta_, tgpflow.load(tmp_path / "local" / "models" / "fd").theta_)
    # per-partition score files: one object each, equal to the local run's
    for s in range(3):
        with mem.open(f"/bucket/scores/p{s:03d}.parquet", "rb") as fh:
            got = pq.read_table(fh).to_pandas()
        want = pd.read_parquet(tmp_path / "local" / "scores" / f"p{s:03d}.parquet")
        pd.testing.assert_frame_equal(got, want)
    r = CliRunner().invoke(main, ["--json", "stats", "info", "memory://bucket/store.zarr"])  # verifies every entry
    assert r.exit_code == 0 and json.loads(r.output)["partitions"] == 3, r.output
    r = CliRunner().invoke(main, ["--json", "info", "memory://bucket/models/fd"])
    assert r.exit_code == 0 and json.loads(r.output)["current"] == "v000002", r.output
    # a rerun with nothing new changes nothing; nothing hidden is left behind
    assert not run_pipeline(mem_spec)["changed"]
    assert not [n for n in _names(mem, "/bucket") if ".tmp-" in n or ".lock" in n]
    pointed = [Path(m).parent for m in mem.find("/bucket") if m.endswith(MARKER) and ".v-" not in m]
    assert pointed and all(_hidden_versions(mem, d) == [json.loads(mem.cat_file(f"{d}/{MARKER}"))["current"]]
                           for d in map(str, pointed))  # replaced and abandoned versions are gone


def test_the_store_lock_on_memory_is_exclusive_and_released(mem):
    store = StatsStore("memory://bucket/store.zarr")
    with store.lock():
        assert mem.isfile("/bucket/store.zarr/.lock")
        note = mem.cat_file("/bucket/store.zarr/.lock").decode()
        with pytest.raises(StoreBusyError, match="another run holds the store lock") as info, StatsStore(
                "memory://bucket/store.zarr").lock(timeout=0.2):
            pass
        assert note in str(info.value) and "delete memory://bucket/store.zarr/.lock" in str(info.value)
    assert not mem.exists("/bucket/store.zarr/.lock")
    with store.lock():  # released: it can be taken again
        pass
