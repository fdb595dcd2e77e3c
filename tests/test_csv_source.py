"""CSV sources (docs/data.md, "CSV"): files, directories and globs of delimited text, read in blocks at line ends."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import tgpflow
from tgpflow.cli import main
from tgpflow.core.engine import compute
from tgpflow.errors import SourceError
from tgpflow.io import as_source
from tgpflow.io.backends import csv as csv_backend


def _rows(source) -> np.ndarray:
    return np.concatenate(compute(*source.blocks()))


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(csv_backend, "CSV_BLOCK_BYTES", 4096)  # many blocks from a small file


def _frame(rng, n=1500) -> pd.DataFrame:
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 7, n), "c": rng.gamma(2.0, size=n)})


def test_a_csv_file_reads_back_the_values_it_was_written_from_in_many_blocks(tmp_path, rng, small_blocks):
    frame = _frame(rng)
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)  # floats written with repr: they read back exactly
    src = as_source(str(path))
    assert src.columns == ("a", "b", "c") and src.named
    assert src.n_chunks == path.stat().st_size // 4096 > 3  # read_bytes spreads the spare bytes over the blocks
    assert src.labels[2] == f"{path} block 3 of {src.n_chunks}" and src.n_rows is None
    np.testing.assert_array_equal(_rows(src), frame.to_numpy(dtype=np.float64))
    picked = as_source(str(path), columns=["c", "a"])  # the selection's order, not the file's
    np.testing.assert_array_equal(_rows(picked), frame[["c", "a"]].to_numpy())


def test_globs_directories_tsv_and_compressed_files(tmp_path, rng, small_blocks):
    first, second = _frame(rng, 700), _frame(rng, 900)
    (tmp_path / "dir").mkdir()
    first.to_csv(tmp_path / "dir" / "p1.csv", index=False)
    second.to_csv(tmp_path / "dir" / "p2.csv", index=False)
    (tmp_path / "dir" / "notes.txt").write_text("not data")
    both = pd.concat([first, second]).to_numpy(dtype=np.float64)
    np.testing.assert_array_equal(_rows(as_source(str(tmp_path / "dir" / "p*.csv"))), both)
    np.testing.assert_array_equal(_rows(as_source(str(tmp_path / "dir"))), both)  # its CSV files, in name order
    first.to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    np.testing.assert_array_equal(_rows(as_source(str(tmp_path / "t.tsv"))), first.to_numpy(dtype=np.float64))
    with gzip.open(tmp_path / "z.csv.gz", "wt") as fh:
        second.to_csv(fh, index=False)
    zipped = as_source(str(tmp_path / "z.csv.gz"))
    assert zipped.n_chunks == 1  # a compressed file cannot be cut
    np.testing.assert_array_equal(_rows(zipped), second.to_numpy(dtype=np.float64))
    with open(tmp_path / "excel.csv", "w", encoding="utf-8-sig") as fh:  # a byte-order mark, semicolons
        second.to_csv(fh, sep=";", index=False)
    np.testing.assert_array_equal(_rows(as_source(str(tmp_path / "excel.csv"), columns=["a", "c"])),
                                  second[["a", "c"]].to_numpy(dtype=np.float64))
    second.assign(a=second["a"].map(lambda v: f"{v:.3f}".replace(".", ","))).to_csv(tmp_path / "euro.csv", sep=";",
                                                                                       index=False)
    with pytest.raises(SourceError, match=r"euro.csv block \d+ of \d+: column 'a' holds text, e.g. '-?\d+,\d{3}' \(a "
                                          r"decimal comma"):
        compute(*as_source(str(tmp_path / "euro.csv")).blocks())
    first.to_csv(tmp_path / "plain.txt", index=False)
    np.testing.assert_array_equal(_rows(as_source(str(tmp_path / "plain.txt"), format="csv")),
                                  first.to_numpy(dtype=np.float64))


def test_bad_csv_input_names_the_file_the_block_and_the_column(tmp_path, rng, small_blocks):
    frame = _frame(rng).astype({"b": object})
    frame.loc[1200, "b"] = "n/a?"  # text in the fourth block or later
    frame.loc[10, "c"] = np.nan
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    src = as_source(str(path))
    with pytest.raises(SourceError) as err:
        compute(*src.blocks())
    msg = str(err.value)
    assert str(path) in msg and "block" in msg and ("'b'" in msg or "'c'" in msg)
    with pytest.raises(SourceError, match=r"block 1 of \d+: 1 of \d+ rows have missing.*column 'c': 1"):
        compute(as_source(str(path), columns=["a", "c"]).blocks()[0])
    kept = as_source(str(path), columns=["a", "c"], on_bad_rows="drop")
    assert _rows(kept).shape[0] == len(frame) - 1
    other = tmp_path / "other.csv"
    frame.rename(columns={"c": "d"}).to_csv(other, index=False)
    with pytest.raises(SourceError, match="same columns"):
        as_source(str(tmp_path / "*.csv"))
    with pytest.raises(SourceError, match="no such file"):
        as_source(str(tmp_path / "missing.csv"))
    with pytest.raises(SourceError, match="missing column 'z'"):
        as_source(str(path), columns=["z"])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SourceError, match="no header line"):
        as_source(str(tmp_path / "empty.csv"))
    (tmp_path / "ragged.csv").write_text("a,b\n1,2\n3,4,5,6\n")
    with pytest.raises(SourceError, match=r"ragged.csv block 1 of 1: not readable as CSV \(ParserError"):
        compute(*as_source(str(tmp_path / "ragged.csv")).blocks())


def test_a_fit_from_csv_equals_the_fit_from_the_array_and_the_cli_scores_its_rows_in_file_order(tmp_path, rng,
                                                                                                small_blocks):
    frame = pd.DataFrame(rng.normal(size=(3000, 3)), columns=["a", "b", "c"])
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    params = dict(method="fd", n_features=32, lam=0.1, bandwidth=1.0, random_state=0, base="empirical", discrete=None,
                  bounds=None, pilot="exact")  # no held-out split, no pilot sample: the sums over all rows decide
    from_csv = tgpflow.GPTiltedDensity(**params).fit(str(path))
    from_array = tgpflow.GPTiltedDensity(**params).fit(frame)
    X = frame.to_numpy(dtype=np.float64)
    np.testing.assert_allclose(from_csv.log_density(frame), from_array.log_density(frame), rtol=1e-9, atol=1e-9)
    runner = CliRunner()
    model = str(tmp_path / "m.zarr")
    frame.insert(0, "id", [f"r{i}" for i in range(3000)])  # text: a column to keep, not to fit
    frame.to_csv(path, index=False)
    r = runner.invoke(main, ["--json", "fit", str(path), "--model", "fd", "--n-features", "32", "--lam", "0.1",
                             "--bandwidth", "1.0", "--columns", "a,b,c", "--out", model, "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows"] == 3000
    frame.loc[[5, 2500], "c"] = np.nan  # dropped rows keep their numbers: the others' do not move
    frame.to_csv(path, index=False)
    r = runner.invoke(main, ["--json", "score", model, str(path), "--out", str(tmp_path / "s.parquet"),
                             "--on-bad-rows", "drop",
                             "--keep-columns", "id", "--progress", "none"])
    assert r.exit_code == 0, r.output
    scores = pd.read_parquet(tmp_path / "s.parquet")
    rows = np.delete(np.arange(3000), [5, 2500])
    np.testing.assert_array_equal(scores["row"], rows)
    assert scores["id"].tolist() == [f"r{i}" for i in rows]
    est = tgpflow.load(model)
    held = pd.DataFrame(X[rows], columns=["a", "b", "c"])  # named, as it was fitted (an array: sklearn warns)
    np.testing.assert_allclose(scores["log_density"], est.log_density(held, normalized=True), rtol=1e-12)


def test_a_scores_graph_parses_each_block_once_for_the_rows_and_the_kept_columns(tmp_path, rng, small_blocks):
    frame = _frame(rng)
    frame.insert(0, "id", [f"r{i}" for i in range(len(frame))])
    frame.to_csv(tmp_path / "d.csv", index=False)
    src = as_source(str(tmp_path / "d.csv"), columns=["a", "c"])
    kept = csv_backend.context_frames(str(tmp_path / "d.csv"), ["id"])

    def parses(obj) -> set:
        return {k for k in dict(obj.__dask_graph__()) if str(k).startswith("_parse_block")}

    assert len(kept) == src.n_chunks > 3
    for chunk, context in zip(src.chunks(), kept):
        assert len(parses(chunk)) == 1 and parses(chunk) == parses(context)  # the same task: one parse
    np.testing.assert_array_equal(pd.concat(compute(*kept))["id"], frame["id"])
