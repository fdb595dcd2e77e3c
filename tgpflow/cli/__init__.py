"""The ``tgpflow`` command line (click); also ``dask tgpflow`` through dask's CLI entry point.

:data:`main` is the command group (:mod:`tgpflow.cli.app`, with what every command shares); each command is
one module beside it, registered on the group when this package is imported: ``fit``, ``score``, ``sample``,
``report``, ``run`` (with ``validate``, ``gc`` and ``schema``), ``stats``, ``info`` and ``diff``. Reading them imports
no estimator: ``tgpflow --help`` loads neither scikit-learn nor distributed (tests/test_import_cost.py).
"""

from tgpflow.cli import diff, fit, info, report, run, sample, score, stats  # noqa: F401  (each registers its commands)
from tgpflow.cli.app import main

__all__ = ["main"]
