"""Bad data and usage errors (issue 15, items 6–11): every bad input ends in one sentence that names the
file (and row group or chunk) and the column where there is one, exit 2 for usage and 1 for data, no
traceback, no output written and every existing file untouched (the directory hashes the same after)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from click.testing import CliRunner

import tgpflow
from tgpflow import GPTiltedDensity, RootSobolevDensity
from tgpflow.cli import main
from tgpflow.errors import SourceError
from tests.conftest import write_parquet
from tests.oracles import tree_hash

REPO = Path(__file__).resolve().parents[1]
FAST = ["--n-features", "16", "--progress", "none"]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """One directory of bad (and good) inputs and a fitted model; the tests hash it before and after."""
    root = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2))
    write_parquet(root / "good.parquet", X, ["u", "v"], row_group_size=300)
    bad = X.copy()
    bad[5, 0] = np.nan
    write_parquet(root / "nan.parquet", bad, ["u", "v"], row_group_size=300)
    write_parquet(root / "allbad.parquet", np.full_like(X, np.nan), ["u", "v"], row_group_size=300)
    pq.write_table(pa.Table.from_arrays([pa.array(X[:, 0]), pa.array(X[:, 1])], names=["u", "u"]), root / "dup.parquet")
    ids = rng.integers(2**53 + 1, 2**62, size=600)
    pq.write_table(pa.table({"u": X[:, 0], "id": ids}), root / "bigint.parquet", row_group_size=50)
    pq.write_table(pa.table({"u": X[:, 0], "id": pa.array(ids.astype(np.uint64) * 2)}), root / "ubig.parquet")
    z = zarr.create_array(str(root / "bigint.zarr"), shape=(600, 2), chunks=(200, 2), dtype="int64")
    z[...] = np.column_stack([ids, rng.integers(0, 100, 600)])
    write_parquet(root / "huge.parquet", X * [1e300, 1.0], ["u", "v"])
    write_parquet(root / "const.parquet", np.column_stack([np.ones(600), X[:, 1]]), ["u", "v"])
    write_parquet(root / "three.parquet", rng.normal(size=(3, 3)), ["a", "b", "c"])
    write_parquet(root / "collinear.parquet", np.column_stack([X, X[:, 0] - 2 * X[:, 1] + 1]), ["a", "b", "c"])
    pd.DataFrame({"u": X[:, 0], "label": ["x"] * 600}).to_parquet(root / "text.parquet")
    write_parquet(root / "empty.parquet", np.empty((0, 2)), ["u", "v"])
    (root / "corrupt.parquet").write_bytes(b"not parquet at all")
    (root / "mixed").mkdir()
    write_parquet(root / "mixed" / "a.parquet", X, ["u", "v"])
    write_parquet(root / "mixed" / "b.parquet", X, ["u", "w"])
    z = zarr.create_array(str(root / "nan.zarr"), shape=(600, 2), chunks=(200, 2), dtype="f8")
    z[...] = bad[::-1]
    (root / "junk.zarr").mkdir()
    GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5).fit(str(root / "good.parquet")).save(
        root / "m.zarr")
    return root


def one_sentence(message: str) -> bool:
    """One line, and no full stop followed by a new sentence."""
    return "\n" not in message.strip() and not re.search(r"[.!?]\s+[A-Z]", message)


def run(ws: Path, argv: list[str]) -> tuple[int, str]:
    """Run the CLI in-process (warnings and above on stderr; an argument that names an entry of ``ws`` is
    made absolute); returns (exit code, stderr)."""
    args = [str(ws / a) if (ws / a.split(",")[0]).exists() and "/" not in a else a for a in argv]
    r = CliRunner().invoke(main, ["--log-level", "WARNING", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), f"escaped the CLI: {r.exception!r}\n{r.output}"
    return r.exit_code, r.stderr


def check_refused(ws: Path, outdir: Path, argv: list[str], code: int, names: list[str]) -> str:
    """Run a bad command with ``--out`` in the empty ``outdir``; check the message, the code, and that
    ``ws`` hashes the same and ``outdir`` stays empty (no output, no temporary)."""
    out = outdir / "out.zarr"
    before = tree_hash(ws)
    got, stderr = run(ws, [*argv, "--out", str(out)])
    assert got == code, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    if code == 1:  # nothing but the one-line error: no leaked warning or log line
        assert len(lines) == 1, stderr
    error = lines[-1]
    assert error.startswith("Error: ") and one_sentence(error), error
    for name in names:
        assert name in error, (name, error)
    assert tree_hash(ws) == before and not any(outdir.iterdir())
    return error


# (id, argv without --out, exit code, what the message must name)
DATA_ERRORS = [
    # item 6: all rows bad under --on-bad-rows drop: no valid rows remain (not "the pilot")
    ("allbad-drop-fd", ["fit", "allbad.parquet", "--on-bad-rows", "drop", *FAST], 1,
     ["allbad.parquet", "no valid rows remain", "600 rows"]),
    ("allbad-drop-rsr", ["fit", "allbad.parquet", "--model", "rsr", "--on-bad-rows", "drop", *FAST], 1,
     ["allbad.parquet", "no valid rows remain"]),
    ("allbad-drop-nkef", ["fit", "allbad.parquet", "--model", "nkef", "--n-basis", "5", "--on-bad-rows", "drop",
                          "--progress", "none"], 1, ["allbad.parquet", "no valid rows remain"]),
    ("allbad-sample-init", ["sample", "m.zarr", "-n", "10", "--method", "langevin", "--init", "allbad.parquet"], 1,
     ["allbad.parquet", "no valid rows remain"]),
    ("allbad-raise", ["fit", "allbad.parquet", *FAST], 1, ["allbad.parquet row group", "column 'u': 300"]),
    # item 7: duplicate column names
    ("duplicate-columns", ["fit", "dup.parquet", *FAST], 1, ["dup.parquet", "column 'u' appears 2 times"]),
    ("duplicate-selected", ["fit", "dup.parquet", "--columns", "u", *FAST], 1, ["dup.parquet", "column 'u'"]),
    # item 8: integers beyond 2**53, values whose squares overflow
    ("int64-beyond-2**53", ["fit", "bigint.parquet", *FAST], 1, ["bigint.parquet row group", "column 'id'", "2**53"]),
    ("uint64-beyond-2**53", ["fit", "ubig.parquet", *FAST], 1, ["ubig.parquet row group 0", "column 'id'", "2**53"]),
    ("int64-zarr", ["fit", "bigint.zarr", *FAST], 1, ["bigint.zarr chunk", "column '0'", "2**53"]),
    ("overflow-fd", ["fit", "huge.parquet", *FAST], 1, ["huge.parquet row group 0", "column 'u'", "overflow"]),
    ("overflow-rsr", ["fit", "huge.parquet", "--model", "rsr", *FAST], 1, ["huge.parquet", "column 'u'", "overflow"]),
    ("overflow-nkef", ["fit", "huge.parquet", "--model", "nkef", "--n-basis", "5", "--progress", "none"], 1,
     ["huge.parquet", "column 'u'", "overflow"]),
    ("overflow-score", ["score", "m.zarr", "huge.parquet", "--progress", "none"], 1,
     ["huge.parquet", "column 'u'", "overflow"]),
    # item 9: a constant column, too few rows, collinear columns, a fix the command accepts
    ("constant-column", ["fit", "const.parquet", *FAST], 1, ["const.parquet", "column 'u' is constant", "--columns v"]),
    ("constant-kde-rff", ["fit", "const.parquet", "--model", "kde_rff", *FAST], 1, ["const.parquet", "'u'"]),
    ("three-rows-three-columns", ["fit", "three.parquet", *FAST], 1,
     ["three.parquet", "3 row(s) in 3 column(s) are too few", "at least 4 rows"]),
    ("collinear-columns", ["fit", "collinear.parquet", *FAST], 1, ["collinear.parquet", "collinear", "'a'", "'c'"]),
    ("report-nan", ["report", "m.zarr", "nan.parquet", "--directions", "4", "--model-samples", "1000"], 1,
     ["nan.parquet row group 0", "column 'u': 1", "--on-bad-rows drop"]),
    # bad data that already ended in one sentence
    ("nan", ["fit", "nan.parquet", *FAST], 1, ["nan.parquet row group 0", "1 of 300 rows", "column 'u': 1"]),
    ("nan-zarr", ["fit", "nan.zarr", *FAST], 1, ["nan.zarr chunk 2 (rows 400–599)", "column '0': 1"]),
    ("text-column", ["fit", "text.parquet", *FAST], 1, ["text.parquet", "column 'label'"]),
    ("missing-column", ["fit", "good.parquet", "--columns", "u,zz", *FAST], 1, ["good.parquet", "'zz'"]),
    ("zero-rows", ["fit", "empty.parquet", *FAST], 1, ["empty.parquet", "zero rows"]),
    ("corrupt-file", ["fit", "corrupt.parquet", *FAST], 1, ["corrupt.parquet", "not a readable Parquet file"]),
    ("schema-differs", ["fit", "mixed", "--columns", "u", *FAST], 1, ["b.parquet", "schema differs"]),
    ("column-missing-in-a-file", ["fit", "mixed", *FAST], 1, ["b.parquet", "missing column(s) ['v']"]),
    ("no-such-source", ["fit", "nowhere/x.parquet", *FAST], 2, ["x.parquet"]),  # a usage error
    ("score-nan", ["score", "m.zarr", "nan.parquet", "--progress", "none"], 1,
     ["nan.parquet row group 0", "column 'u': 1"]),
    ("score-missing-columns", ["score", "m.zarr", "collinear.parquet", "--progress", "none"], 1,
     ["collinear.parquet", "missing column(s) ['u', 'v']"]),
    ("score-width", ["score", "m.zarr", "good.parquet", "--columns", "u", "--progress", "none"], 1,
     ["good.parquet", "1 features", "expecting 2"]),
    ("score-not-a-model", ["score", "junk.zarr", "good.parquet"], 1, ["junk.zarr"]),
]

# item 10: every malformed option is a usage error (exit 2), named, before any work
USAGE_ERRORS = [
    ("lam-negative", ["fit", "good.parquet", "--lam", "-1"], ["--lam"]),
    ("lam-zero", ["fit", "good.parquet", "--lam", "0"], ["--lam"]),
    ("lam-inf", ["fit", "good.parquet", "--lam", "inf"], ["--lam", "not finite"]),
    ("lam-text", ["fit", "good.parquet", "--lam", "abc"], ["--lam"]),
    ("lam-list", ["fit", "good.parquet", "--lam", "0.1,0.2"], ["--lam"]),
    ("bandwidth-negative", ["fit", "good.parquet", "--bandwidth", "-0.5"], ["--bandwidth"]),
    ("bandwidth-zero-in-grid", ["fit", "good.parquet", "--bandwidth", "0.5,0"], ["--bandwidth", "'0'"]),
    ("bandwidth-nan", ["fit", "good.parquet", "--bandwidth", "nan"], ["--bandwidth"]),
    ("bandwidth-rule-of-other-model", ["fit", "good.parquet", "--model", "nkef", "--bandwidth", "scott"],
     ["--bandwidth", "'scott'"]),
    ("smoothness-zero", ["fit", "good.parquet", "--model", "rsr", "--smoothness", "0"], ["--smoothness"]),
    ("smoothness-negative-in-grid", ["fit", "good.parquet", "--model", "rsr", "--smoothness", "1,-2"],
     ["--smoothness"]),
    ("sigma-max-negative", ["fit", "good.parquet", "--model", "ncfd", "--sigma-max", "-1"], ["--sigma-max"]),
    ("n-features-zero", ["fit", "good.parquet", "--n-features", "0"], ["--n-features"]),
    ("unknown-model", ["fit", "good.parquet", "--model", "nope"], ["--model"]),
    ("bad-rows-policy", ["score", "m.zarr", "good.parquet", "--on-bad-rows", "skip"], ["--on-bad-rows"]),
    ("bounds-malformed", ["fit", "good.parquet", "--bounds", "u:zero:"], ["--bounds"]),
    ("base-of-other-model", ["fit", "good.parquet", "--model", "nkef", "--base", "learn"], ["--base"]),
]


@pytest.mark.parametrize("argv, code, names", [c[1:] for c in DATA_ERRORS], ids=[c[0] for c in DATA_ERRORS])
def test_bad_data_is_one_sentence_exit_1_and_writes_nothing(ws, tmp_path, argv, code, names):
    check_refused(ws, tmp_path, argv, code, names)


@pytest.mark.parametrize("argv, names", [c[1:] for c in USAGE_ERRORS], ids=[c[0] for c in USAGE_ERRORS])
def test_usage_errors_exit_2_and_write_nothing(ws, tmp_path, argv, names):
    check_refused(ws, tmp_path, argv, 2, names)


def test_a_fit_that_fails_after_reading_exits_1_in_a_real_process(ws, tmp_path):
    """The integer column fails while other row groups are still being read, and the process exits at once:
    exit 1 and one line (an Arrow pool thread alive at that exit aborted it, 134: see read_row_group)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "tgpflow.cli", "--log-level", "ERROR", "fit", str(ws / "bigint.parquet"),
                        "--out", str(tmp_path / "x.zarr"), *FAST], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=120)
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().startswith("Error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "column 'id'" in p.stderr and not any(tmp_path.iterdir())


def test_an_internal_error_is_one_line_and_debug_shows_the_traceback(ws, monkeypatch):
    import tgpflow.cli.info as info

    monkeypatch.setattr(info, "load_model", lambda path: 1 / 0)
    r = CliRunner().invoke(main, ["info", str(ws / "m.zarr")])
    assert r.exit_code == 1 and "internal error (ZeroDivisionError" in r.stderr and "--debug" in r.stderr
    r = CliRunner().invoke(main, ["--debug", "info", str(ws / "m.zarr")])
    assert isinstance(r.exception, ZeroDivisionError)


def test_score_drop_writes_the_kept_rows_with_their_positions(ws, tmp_path):
    out = tmp_path / "scores.parquet"
    code, stderr = run(ws, ["score", "m.zarr", "nan.parquet", "--on-bad-rows", "drop", "--progress", "none",
                            "--out", str(out)])
    assert code == 0, stderr
    scores = pd.read_parquet(out)
    assert len(scores) == 599 and 5 not in set(scores["row"]) and list(scores["row"][:6]) == [0, 1, 2, 3, 4, 6]
    good = pd.read_parquet(ws / "good.parquet").drop(index=5)
    np.testing.assert_allclose(scores["log_density"], tgpflow.load(ws / "m.zarr").log_density(good, normalized=True),
                               rtol=1e-12)


def test_report_accepts_the_drop_it_suggests(ws, tmp_path):
    code, stderr = run(ws, ["report", "m.zarr", "nan.parquet", "--on-bad-rows", "drop", "--directions", "4",
                            "--model-samples", "1000", "--out", str(tmp_path / "rep")])
    assert code == 0, stderr
    assert (tmp_path / "rep" / "metrics.json").exists()


# item 11: the Python API with a pandas DataFrame
def _frame(rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({"u": rng.normal(size=400), "v": rng.normal(size=400), "w": rng.normal(size=400),
                         "label": ["x"] * 400})


def test_pandas_columns_are_selected_by_name(rng):
    frame = _frame(rng)
    est = GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5).fit(frame, columns=["w", "u"])
    assert list(est.feature_names_in_) == ["w", "u"] and est.n_features_in_ == 2
    ref = GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5).fit(frame[["w", "u"]])
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-12)
    np.testing.assert_allclose(est.log_density(frame[["w", "u"]]), ref.log_density(frame[["w", "u"]]), rtol=1e-12)
    rsr = RootSobolevDensity(n_features=16).fit(frame, columns=["u", "v"])
    assert list(rsr.feature_names_in_) == ["u", "v"]


PANDAS_ERRORS = [
    ("string-column", lambda f: (f, None), ["pandas DataFrame", "column 'label'", "--columns"]),
    ("string-column-selected", lambda f: (f, ["u", "label"]), ["column 'label'"]),
    ("missing-column", lambda f: (f, ["u", "zz"]), ["pandas DataFrame", "'zz'"]),
    ("int-beyond-2**53", lambda f: (f.assign(id=np.arange(400) + 2**60), ["u", "id"]), ["column 'id'", "2**53"]),
    ("nullable-int-beyond-2**53", lambda f: (f.assign(id=pd.array([2**60] * 399 + [None], "Int64")), ["u", "id"]),
     ["column 'id'", "2**53"]),
    ("overflow", lambda f: (f.assign(w=f["w"] * 1e300), ["u", "w"]), ["column 'w'", "overflow"]),
    ("nan", lambda f: (f.assign(v=f["v"].where(f.index != 7)), ["u", "v"]), ["column 'v': 1"]),
    ("duplicate-names", lambda f: (f[["u", "v"]].set_axis(["u", "u"], axis=1), None), ["column 'u' appears 2 times"]),
    ("constant", lambda f: (f.assign(v=3.0), ["u", "v"]), ["column 'v' is constant", "columns=['u']"]),
]


@pytest.mark.parametrize("make, names", [c[1:] for c in PANDAS_ERRORS], ids=[c[0] for c in PANDAS_ERRORS])
def test_pandas_errors_name_the_column(rng, make, names):
    frame, columns = make(_frame(rng))
    with pytest.raises(SourceError) as err:
        GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5).fit(frame, columns=columns)
    assert one_sentence(str(err.value)), str(err.value)
    for name in names:
        assert name in str(err.value), (name, str(err.value))


def test_numpy_integers_beyond_2_53_are_refused_by_column(rng):
    X = np.column_stack([rng.integers(0, 10, 100), np.full(100, 2**60)])
    with pytest.raises(SourceError, match=r"array: column '1' holds 100 integer\(s\) beyond ±2\*\*53"):
        GPTiltedDensity(n_features=8).fit(X)
    with pytest.raises(SourceError, match="no valid rows remain"):
        GPTiltedDensity(n_features=8, on_bad_rows="drop").fit(np.full((50, 2), np.nan))


def test_a_misspelt_column_in_bounds_or_discrete_gets_the_closest_name():
    """bounds= and discrete= name columns: a name that is not among them is refused with the closest one."""
    from tgpflow.features.bounds import ColumnBounds

    with pytest.raises(ValueError, match=r"bounds name column 'agee' \(did you mean 'age'\?\), which is not among"):
        ColumnBounds.from_param({"agee": (0.0, None)}, ["income", "age", "score"])
    rows = np.c_[np.arange(300) % 7, np.linspace(0.0, 1.0, 300)]
    with pytest.raises(ValueError, match=r"discrete names column 'houre' \(did you mean 'hour'\?\)"):
        tgpflow.GPTiltedDensity(discrete=["houre"], n_features=16).fit(pd.DataFrame(rows, columns=["hour", "load"]))
