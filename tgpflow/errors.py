"""Exception and warning types of tgpflow.

Every error subclasses ``ValueError`` (scikit-learn's convention for bad input) and
carries a message that says what is wrong, where (file, row group or chunk, column)
and how to fix it.
"""

from collections.abc import Iterable
from typing import Any


class TgpflowError(Exception):
    """Base class of tgpflow's own errors."""


class SourceError(TgpflowError, ValueError):
    """Bad input data: names the file or chunk, the column and the count of bad rows."""


class EmptySourceError(SourceError):
    """A readable source with no rows (e.g. a day's Parquet file written with zero rows)."""


class FeaturesMismatchError(TgpflowError, ValueError):
    """Statistics or models computed with different feature draws were combined."""


class ModelFileError(TgpflowError, ValueError):
    """A model or statistics file is missing, corrupt, tampered with or of an unknown schema."""


class TgpflowWarning(UserWarning):
    """A documented numerical fallback was taken (jitter, CG) or data were dropped."""


class UnverifiedMetadataWarning(TgpflowWarning):
    """A file written before tgpflow checksummed metadata was read: its arrays are verified, its JSON
    metadata (parameters, thresholds, run info) is not. Re-saving it adds the checksum."""


class DiagnosticWarning(TgpflowWarning):
    """A fitted model or a sample failed a quality check (mass without data, too few effective draws,
    chains that disagree); the message says what to change."""


class OutputExistsError(TgpflowError, FileExistsError):
    """An output path exists and may not be replaced: it is not a tgpflow output of the requested kind,
    or replacing it was not asked for (``--overwrite``). Nothing was written."""


def cause(exc: BaseException) -> str:
    """``"TypeName: first sentence"`` of a library's exception, to quote inside a one-sentence message
    (pyarrow's, for one, run to several sentences and lines)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].split(". ")[0].rstrip(".") if lines else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def model_keys(model: Any) -> set[str]:
    """Every key a pydantic model (a spec, a cluster file) accepts, at any depth: what a mistyped key is matched
    against."""
    import typing

    keys: set[str] = set()
    todo, seen = [model], set()
    while todo:
        node = todo.pop()
        fields = getattr(node, "model_fields", None) if isinstance(node, type) else None
        if isinstance(fields, dict):
            if node in seen:
                continue
            seen.add(node)
            for name, field in fields.items():
                keys.add(field.alias or name)
                todo.append(field.annotation)
        else:
            todo.extend(typing.get_args(node))
    return keys


def validation_message(err: Any, where: str, what: str, keys: Iterable[str] = ()) -> str:
    """One line per error of a pydantic ``ValidationError``, each naming the key's path:
    ``"{where}: {what} is not valid (2 errors):\n  models.0.name: …"``; an unknown key gets the closest of ``keys``
    (the names the file may use) as "did you mean"."""
    import difflib

    n = err.error_count()
    lines = [f"{where}: {what} is not valid ({n} error{'s' if n > 1 else ''}):"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and e["loc"]:
            message = f"not a known key{closest_hint(str(e['loc'][-1]), sorted(set(keys)))}"
        elif e["type"] == "union_tag_not_found":  # a keyed choice without its key (refit: {polcy: …})
            tag = str((e.get("ctx") or {}).get("discriminator", "")).strip("'")
            given = list(e["input"]) if isinstance(e.get("input"), dict) else []
            close = difflib.get_close_matches(tag, given, n=1)
            message = f"needs the key {tag!r}" + (f" ({close[0]!r} is given: did you mean {tag!r}?)" if close else "")
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


class SchedulerError(TgpflowError, ConnectionError):
    """No Dask scheduler to use: a malformed scheduler file, or none answered in time. Names the address or file."""


class SchedulerAddressError(TgpflowError, ValueError):
    """A scheduler named by neither an existing scheduler file nor an address: the request is wrong (CLI exit 2)."""


#: How a user selects columns, in each place tgpflow reads data: the hint of an error about a column.
COLUMNS_HINT = "columns=[...] (CLI: --columns; a pipeline spec: source.columns)"
#: How a user drops bad rows instead of failing, in each place tgpflow reads data.
DROP_HINT = "on_bad_rows='drop' (CLI: --on-bad-rows drop; a pipeline spec: source.on_bad_rows: drop)"


def closest_hint(name: str, names: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``names`` to a ``name`` that is not among them, else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(n) for n in names], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
