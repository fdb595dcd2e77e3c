"""The ``tgpflow`` command line (click); also ``dask tgpflow`` through dask's CLI entry point.

:data:`main` is the command group (:mod:`tgpflow.cli.app`, with what every command shares); each command is
one module beside it, registered on the group when this package is imported: ``fit``, ``score``, ``sample``,
``report``, ``run`` (with ``validate``, ``gc`` and ``schema``), ``stats``, ``info``, ``diff`` and ``params``.
Reading them imports no estimator: ``tgpflow --help`` loads neither scikit-learn nor distributed
(tests/test_import_cost.py).
"""

# each module registers its commands on the group
from tgpflow.cli import diff, fit, info, params, report, run, sample, score, stats  # noqa: F401
from tgpflow.cli.app import main

__all__ = ["main"]
