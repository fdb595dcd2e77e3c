"""The one list of model kinds and their methods, read by ``tgpflow.load``, pipeline specs, the CLI and the stores.

A :class:`ModelKind` names an estimator class (which is also the kind a saved model's header records),
the module that defines it, the methods it fits and whether a pipeline spec may name it. The GP-tilted
methods are not listed here: each is one file in :mod:`tgpflow.models.tgp_methods` (or a method object
given to :func:`tgpflow.models.tgp_method.register_method`), and :func:`kind_methods` asks that registry.

Reading this module imports no estimator (``tgpflow --help`` lists the methods without scikit-learn);
:func:`model_classes` imports them.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["ModelKind", "register_kind", "unregister_kind", "model_kinds", "kind_of", "kind_names", "model_classes",
           "kind_methods", "pipeline_estimators", "cli_models", "cli_model_of", "stats_classes", "param_applies",
           "models_using", "refits_from_rows", "RSR_METHODS"]

#: The root-Sobolev density and its KDE-SDO baseline.
RSR_METHODS = ("rsr", "kde_sdo")


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """One estimator family.

    ``name`` is the class name (and a saved model's kind), ``module`` where it is defined. ``methods``
    are the values of its ``method`` parameter (None: it has no such parameter; ``"tgp"``: the GP-tilted
    method registry). ``cli`` maps a ``tgpflow fit --model`` value to the parameters it sets, for
    kinds without a ``method`` parameter. ``pipelines``: a pipeline spec may name it. ``row_methods``: the
    methods without additive statistics (an iteration over the rows whose sums depend on the current
    solution): a pipeline refits them on the rows of all its partitions and stores no statistics for them.
    ``table``: the ``"module:Class"`` of its parameter table (:mod:`tgpflow.models.params`). Its capabilities,
    which the CLI reads instead of class names: ``summary``, the ``"module:function"`` of what a fit reports of
    itself (:mod:`tgpflow.models.fit_summaries`); ``work``, that of its pass's flops from the rows and columns
    (None: unknown, e.g. an iteration over the rows); ``reports``: ``tgpflow report`` draws its figures.
    """

    name: str
    module: str
    methods: tuple[str, ...] | str | None = None
    cli: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    pipelines: bool = True
    stats: tuple[str, ...] = ()  # "module:Class" of the statistics its passes make
    row_methods: tuple[str, ...] = ()
    table: str = ""
    summary: str = "tgpflow.models.fit_summaries:kernel_summary"
    work: str | None = "tgpflow.models.fit_summaries:kernel_work"
    reports: bool = False

    def estimator_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.name)

    def summarize(self, est: Any) -> dict[str, Any]:
        """What a fitted ``est`` of this kind reports of itself (``summary``)."""
        return _function(self.summary)(est)

    def pass_work(self, est: Any, n_rows: int | None, n_columns: int) -> float | None:
        """The flops of ``est``'s pass over ``n_rows`` rows, roughly (``work``); None when unknown."""
        return None if self.work is None or n_rows is None else float(_function(self.work)(est, n_rows, n_columns))

    def table_class(self) -> Any:
        """Its parameter table (imports pydantic, not the estimator)."""
        return _function(self.table)

    def stats_classes(self) -> list[type]:
        out = [_function(s) for s in self.stats]
        if self.methods == "tgp":  # a registered method may bring its own statistics
            from tgpflow.models.tgp_methods import get_method, method_names

            out += [get_method(m).stats_type for m in method_names()]
        return out


def _function(path: str) -> Any:
    """The object a ``"module:name"`` path names (imports the module)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


_KINDS: dict[str, ModelKind] = {}


def register_kind(kind: ModelKind) -> ModelKind:
    """Add (or replace) a model kind; returns it."""
    _KINDS[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    """Remove the model kind ``name`` (a plug-in's, or a test's); KeyError when there is none."""
    del _KINDS[name]


_KEF_STATS = ("tgpflow.stats.kef:KEFStats", "tgpflow.stats.kef:DiagStats", "tgpflow.stats.kef:LiteStats")
_TABLES = "tgpflow.models.params"
register_kind(ModelKind("GPTiltedDensity", "tgpflow.models.gp_tilted", methods="tgp",
                        stats=("tgpflow.stats.tgp:TGPStats", "tgpflow.stats.ncfd:NCFDStats"),
                        table=f"{_TABLES}:GPTiltedParams", summary="tgpflow.models.fit_summaries:tgp_summary",
                        work="tgpflow.models.fit_summaries:tgp_work", reports=True))
register_kind(ModelKind("NystromKEF", "tgpflow.models.nystrom_kef", cli=(("nkef", ()),), stats=_KEF_STATS,
                        table=f"{_TABLES}:NystromKEFParams", reports=True))
register_kind(ModelKind("ScoreEstimator", "tgpflow.models.kernel_score", cli=(("score", ()),), stats=_KEF_STATS,
                        table=f"{_TABLES}:ScoreParams", reports=True))
register_kind(ModelKind("RootSobolevDensity", "tgpflow.models.root_sobolev", methods=RSR_METHODS,
                        stats=("tgpflow.stats.kde_sdo:KDESDOStats",), row_methods=("rsr",),
                        table=f"{_TABLES}:RootSobolevParams", summary="tgpflow.models.fit_summaries:rsr_summary",
                        work=None, reports=True))


def model_kinds() -> dict[str, ModelKind]:
    """Every registered kind, by name (a copy)."""
    return dict(_KINDS)


def kind_of(est: Any) -> ModelKind:
    """The kind of a fitted or loaded estimator (the kind its model file records)."""
    return _KINDS[type(est).__name__]


def kind_names() -> tuple[str, ...]:
    """The names of the saved-model kinds (no import)."""
    return tuple(_KINDS)


def model_classes() -> dict[str, type]:
    """Kind name → estimator class (imports the estimators): what :func:`tgpflow.load` dispatches on."""
    return {name: kind.estimator_class() for name, kind in _KINDS.items()}


def stats_classes() -> dict[str, type]:
    """Statistics kind name → class, for every kind (imports them): what a statistics store reads."""
    return {c.__name__: c for kind in _KINDS.values() for c in kind.stats_classes()}


def kind_methods(name: str) -> tuple[str, ...]:
    """The ``method`` values of kind ``name`` (empty for a kind without a ``method`` parameter)."""
    methods = _KINDS[name].methods
    if methods == "tgp":
        from tgpflow.models.tgp_methods import method_names

        return method_names()
    return tuple(methods or ())


def refits_from_rows(name: str, method: str | None) -> bool:
    """Whether kind ``name`` fitted with ``method`` has no additive statistics (``ModelKind.row_methods``)."""
    return method in _KINDS[name].row_methods


def pipeline_estimators() -> tuple[str, ...]:
    """The estimator names a pipeline spec accepts."""
    return tuple(name for name, kind in _KINDS.items() if kind.pipelines)


def param_applies(kind: str, method: str | None, param: str) -> bool:
    """Whether estimator parameter ``param`` does anything for kind ``kind`` fitted with ``method``: it is in
    the kind's parameter table and, for a GP-tilted method, the method has the capability the table says it
    needs (``applies``, e.g. NCFD's noise levels need ``noise_conditional``)."""
    entry = _KINDS[kind]
    table = entry.table_class()
    if param not in table.model_fields:
        return False
    if entry.methods == "tgp" and method is not None:
        from tgpflow.models.tgp_methods import get_method

        return table.applies_to(param, get_method(method))
    return True


def models_using(param: str) -> tuple[str, ...]:
    """The ``tgpflow fit --model`` values whose estimator uses ``param``."""
    return tuple(value for value, (kind, params) in cli_models().items()
                 if param_applies(kind, params.get("method"), param))


def cli_models() -> dict[str, tuple[str, dict[str, Any]]]:
    """``tgpflow fit --model`` value → (kind name, the estimator parameters it sets)."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, kind in _KINDS.items():
        if kind.methods is not None:
            out.update({m: (name, {"method": m}) for m in kind_methods(name)})
        out.update({value: (name, dict(params)) for value, params in kind.cli})
    return out


def cli_model_of(est: Any) -> str | None:
    """The ``tgpflow fit --model`` value that fits an estimator like ``est`` (its kind, and the parameters the value
    sets), or None for a kind the command line does not fit."""
    name = type(est).__name__
    return next((value for value, (kind, params) in cli_models().items()
                 if kind == name and all(getattr(est, k, None) == v for k, v in params.items())), None)
