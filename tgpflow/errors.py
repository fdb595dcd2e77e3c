"""Exception and warning types of tgpflow.

Every error subclasses ``ValueError`` (scikit-learn's convention for bad input) and
carries a message that says what is wrong, where (file, row group or chunk, column)
and how to fix it.
"""

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


def validation_message(err: Any, where: str, what: str) -> str:
    """One line per error of a pydantic ``ValidationError``, each naming the key's path:
    ``"{where}: {what} is not valid (2 errors):\n  models.0.name: …"``."""
    n = err.error_count()
    lines = [f"{where}: {what} is not valid ({n} error{'s' if n > 1 else ''}):"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {path}: {e['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


class SchedulerError(TgpflowError, ConnectionError):
    """No Dask scheduler to use: a malformed scheduler file, or none answered in time. Names the address or file."""


class SchedulerAddressError(TgpflowError, ValueError):
    """A scheduler named by neither an existing scheduler file nor an address: the request is wrong (CLI exit 2)."""
