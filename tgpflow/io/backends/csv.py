"""The CSV backend: delimited text — a file, a directory of files or a glob, on any fsspec filesystem (local,
``s3://``, ``gs://``, …), each file with a header line (docs/data.md, "CSV").

A file is cut into blocks of about :data:`CSV_BLOCK_BYTES` at line ends (Dask's ``read_bytes``, as
``dask.dataframe.read_csv`` cuts it) and each block is one chunk, parsed by pandas with the file's header line
in front; a compressed file (``.gz``, ``.bz2``, ``.xz``, ``.zst``: by its suffix) cannot be cut and is one chunk.
The separator is a tab for ``.tsv`` files; otherwise the comma, semicolon, tab or bar that the header line holds
most of (a spreadsheet's export in a locale with a decimal comma uses semicolons). Text is UTF-8, with or without
a byte-order mark. A block's row count is known only once it is parsed, so the chunk sizes are unknown (NaN): a
row's key is its position in its block, after the block's index
(:meth:`~tgpflow.io.sources.Source.row_keys`), stable while the files and :data:`CSV_BLOCK_BYTES` are. Each block
is parsed with pandas' own type inference and checked like any chunk (:func:`~tgpflow.io.validate.validate_block`):
a column that holds text is refused, naming the file, the block and the column; empty fields are missing values.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import dask

from tgpflow.errors import COLUMNS_HINT, SourceError
from tgpflow.io.hidden import is_hidden
from tgpflow.io.sources import Source, make_source, select_indices
from tgpflow.io.validate import OnBadRows

__all__ = ["can_open", "open_source", "context_frames", "header_names", "is_csv_name", "KEYWORDS", "CSV_BLOCK_BYTES",
           "CSV_SUFFIXES"]

#: The keywords of :func:`~tgpflow.io.sources.as_source` this backend reads.
KEYWORDS = frozenset({"storage_options"})
#: Bytes of text per chunk (before parsing: a float64 row of d columns takes 8d bytes, its text about 10–20 d).
CSV_BLOCK_BYTES = 64 * 2**20
#: The names a CSV file ends in (before a compression suffix).
CSV_SUFFIXES = (".csv", ".tsv")
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
#: The separators a header line is read for (:func:`_separator`), the comma first.
SEPARATORS = (",", ";", "\t", "|")
#: UTF-8, with or without the byte-order mark that spreadsheet programs write at a file's start.
ENCODING = "utf-8-sig"


def _plain_name(name: str) -> str:
    """A file name in lower case without its compression suffix."""
    name = name.lower().rstrip("/")
    for suffix in _COMPRESSIONS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def is_csv_name(name: str) -> bool:
    """Whether a file name (or glob) ends in a CSV suffix, possibly followed by a compression suffix."""
    return _plain_name(name).endswith(CSV_SUFFIXES)


def can_open(data: Any, format: str | None, storage_options: dict[str, Any] | None = None) -> bool:
    """A path with ``format="csv"``, one whose name ends in ``.csv``/``.tsv`` (compressed or not), or a directory
    whose files (not hidden ones) include such files and no Parquet files."""
    if not isinstance(data, (str, Path)):
        return False
    if format is not None or is_csv_name(str(data)):
        return format in (None, "csv")
    return _csv_directory(str(data), storage_options)


def _csv_directory(path: str, storage_options: dict[str, Any] | None) -> bool:
    from fsspec.core import url_to_fs

    try:
        fs, root = url_to_fs(path, **(storage_options or {}))
        if any(c in root for c in "*?[") or not fs.isdir(root):
            return False
        names = [f.rstrip("/").rsplit("/", 1)[-1].lower() for f in fs.ls(root, detail=False)]
    except (OSError, ValueError):  # unreachable or not a path of a known filesystem: the other backends say why
        return False
    names = [n for n in names if not is_hidden(n)]
    return any(is_csv_name(n) for n in names) and not any(n.endswith(".parquet") for n in names)


def open_source(path: Any, *, columns: Any, on_bad_rows: OnBadRows,
                storage_options: dict[str, Any] | None = None) -> Source:
    """The rows of the CSV file(s) at ``path``, one chunk per block (module docstring)."""
    where = str(path)
    names, blocks = _blocks(where, storage_options)
    idx = tuple(select_indices(columns, names, where))
    raws = _selected(blocks, idx, numeric=True)
    return make_source(where, tuple(names[i] for i in idx), True, raws, [b[3] for b in blocks],
                       [float("nan")] * len(raws), on_bad_rows)


def context_frames(path: Any, keep: list[str], storage_options: dict[str, Any] | None = None) -> list[Any]:
    """Delayed pandas DataFrames of the ``keep`` columns (any type, as pandas reads them), one per block, in the
    order of :func:`open_source`'s chunks: what a scores file keeps beside each row
    (:func:`~tgpflow.io.row_context.row_context`)."""
    where = str(path)
    names, blocks = _blocks(where, storage_options)
    return _selected(blocks, tuple(select_indices(keep, names, where)), numeric=False)


def _selected(blocks: list[tuple[Any, bytes, str, str]], idx: tuple[int, ...], numeric: bool) -> list[Any]:
    """Per block, the delayed frame of the columns at ``idx``: each block is parsed by one task whose key depends on
    the block only, so that a graph that takes the numeric columns and the kept ones (a scores file) parses it
    once."""
    parse, pick = dask.delayed(_parse_block, pure=True), dask.delayed(_pick_columns, pure=True)
    return [pick(parse(block, header, sep, label), idx, label, numeric) for block, header, sep, label in blocks]


def header_names(path: Any, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The column names of the header of the first file at ``path``."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(str(path), **(storage_options or {}))
    return _header(fs, _files(fs, root, str(path))[0], str(path))[1]


def _blocks(where: str, storage_options: dict[str, Any] | None) -> tuple[list[str], list[tuple[Any, bytes, str, str]]]:
    """The column names and, per block of every file, (its delayed bytes, the header to put in front of it, the
    separator, its label)."""
    from dask.bytes import read_bytes
    from fsspec.core import url_to_fs
    from fsspec.utils import infer_compression

    fs, root = url_to_fs(where, **(storage_options or {}))
    files = _files(fs, root, where)
    _, names, _ = _header(fs, files[0], where)
    out = []
    for name in files:
        own, own_names, sep = _header(fs, name, name)
        if own_names != names:
            raise SourceError(f"{name}: its header names the columns {own_names}, and {files[0]}'s names "
                              f"{names}; the files of one source must have the same columns")
        compression = infer_compression(name)
        _, blocks = read_bytes(fs.unstrip_protocol(name), delimiter=b"\n",
                               blocksize=None if compression else CSV_BLOCK_BYTES, sample=False,
                               compression=compression, **(storage_options or {}))
        parts = blocks[0] if blocks else []
        out += [(block, b"" if i == 0 else own, sep, f"{name} block {i + 1} of {len(parts)}")
                for i, block in enumerate(parts)]
    if not out:
        raise SourceError(f"{where}: its files are empty (no header line, no rows)")
    return names, out


def _files(fs: Any, root: str, where: str) -> list[str]:
    """The files of a file, a directory (its CSV files, not hidden ones) or a glob, in name order."""
    if any(c in root for c in "*?["):
        files = sorted(f for f in fs.glob(root) if not fs.isdir(f))
    elif fs.isdir(root):
        files = sorted(f for f in fs.ls(root, detail=False)
                       if is_csv_name(f) and not is_hidden(f))
    elif fs.exists(root):
        files = [root]
    else:
        raise SourceError(f"{where}: no such file or directory")
    if not files:
        raise SourceError(f"{where}: matches no CSV files (names ending in {', '.join(CSV_SUFFIXES)})")
    return files


def _separator(name: str, header: bytes) -> str:
    """A tab for a ``.tsv`` file; else whichever of :data:`SEPARATORS` the header line holds most of (a comma where
    it holds none: one column)."""
    if _plain_name(name).endswith(".tsv"):
        return "\t"
    counts = {sep: header.count(sep.encode()) for sep in SEPARATORS}
    best = max(counts, key=lambda sep: counts[sep])  # the first of the most frequent: a comma on ties
    return best if counts[best] else ","


def _header(fs: Any, name: str, where: str) -> tuple[bytes, list[str], str]:
    """A file's header line (with its line end), the column names it gives and the file's separator."""
    import pandas as pd
    from fsspec.utils import infer_compression

    with fs.open(name, "rb", compression=infer_compression(name)) as f:
        line = f.readline()
    if not line.strip():
        raise SourceError(f"{where}: has no header line (a CSV source needs the column names on its first line)")
    sep = _separator(name, line)
    names = [str(c) for c in pd.read_csv(io.BytesIO(line), sep=sep, nrows=0, encoding=ENCODING).columns]
    return line if line.endswith(b"\n") else line + b"\n", names, sep


def _parse_block(block: bytes, header: bytes, sep: str, label: str) -> Any:
    """One block's rows as a pandas DataFrame of every column (``header`` is put in front of every block but a
    file's first, which starts with it); a line pandas cannot parse is refused naming the block. Every column is
    parsed, not only the selected ones: with ``usecols`` pandas reads a line of too many fields as its first ones,
    silently."""
    import pandas as pd

    try:
        return pd.read_csv(io.BytesIO(header + block), sep=sep, encoding=ENCODING)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise SourceError(f"{label}: not readable as CSV ({type(exc).__name__}: {exc}); fix the file, or convert it "
                          f"to Parquet with a tool that reports the bad line") from exc


def _pick_columns(frame: Any, idx: tuple[int, ...], label: str, numeric: bool) -> Any:
    """The columns at ``idx`` of a parsed block, in that order. ``numeric``: a column that holds text is refused,
    with one of its values (and the remedy for decimal commas)."""
    import pandas as pd

    frame = frame.iloc[:, list(idx)]
    for name, dtype in frame.dtypes.items() if numeric else ():
        if dtype.kind in "biuf":
            continue
        values = frame[name].dropna().astype(str)
        text = values[pd.to_numeric(values, errors="coerce").isna()]
        example = text.iloc[0] if len(text) else ""
        hint = (" (a decimal comma: write the file with decimal points, or convert it first)"
                if re.fullmatch(r"[-+]?\d+,\d+", example) else "")
        raise SourceError(f"{label}: column {name!r} holds text, e.g. {example!r}{hint}; select numeric columns "
                          f"with {COLUMNS_HINT}")
    return frame
