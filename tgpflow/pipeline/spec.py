"""Pipeline specs: YAML validated by pydantic v2 (docs/architecture.md, "Layout").

A spec is data, one-to-one with the Python API, no code. Unknown keys are refused
(``extra="forbid"``) and every error names the path to the bad field. Model parameters are
passed to the estimator's own ``set_params`` and checked against its parameter table (``check_params``).
``{date}`` in any string is replaced by the run date (``tgpflow run --date``), and
``--set a.b=value`` overrides a field before validation.

```yaml
name: nightly
source: {path: "data/day=*/part-*.parquet", columns: [a, b], filters: [[a, ">", 0]]}
# or Zarr stores, one per partition: {path: "data/date=*.zarr", columns: [a, b]}  (array: x for a 2-D array)
# or one Zarr store with a date dimension, one partition per date: {path: data.zarr, array: x, partition_by: date}
preprocess: {center: true, scale: true}        # frozen at the store's first run
models:
  - {name: density, estimator: GPTiltedDensity, params: {method: fvpd, n_features: 1000}}
outputs:
  store: state/stats.zarr
  models: state/models
  scores: {path: "scores/{date}", model: density, threshold_quantile: 0.01}
refit: {policy: window, partitions: 30}          # full | incremental | window | forgetting
drift: {alpha: 0.01}                             # each new partition's drift verdict: its false-alarm rate
cluster: {scheduler: "tcp://scheduler:8786"}     # or {kind: embedded} or {file: cluster/slurm.yaml}
```
"""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tgpflow.errors import closest_hint, model_keys, validation_message
from tgpflow.io.row_context import RESERVED
from tgpflow.models.registry import model_kinds, pipeline_estimators, refits_from_rows

__all__ = ["PipelineSpec", "load_spec", "SpecError"]


class SpecError(ValueError):
    """A spec that does not validate; the message lists each bad field by its path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSpec(_Strict):
    path: str = Field(description="Parquet file, directory or glob (each file is one partition), or the Zarr stores "
                                  "a glob matches or a directory holds (each store is one partition). Partitions are "
                                  "keyed relative to the path's directory before its first glob character.")
    columns: list[str] | None = None
    array: str | None = Field(default=None, description="Zarr partitions that are groups: the 2-D array to read in "
                                                        "each (default: the group's 1-D arrays are its columns, but for a "
                                                        "dimension coordinate, xarray's index of the rows).")
    partition_by: str | None = Field(
        default=None, description="A Zarr store with a date dimension: the group's 1-D coordinate array (e.g. date: "
                                  "strings, integers, datetime64 or xarray's CF-encoded time, one value per row) "
                                  "whose every value is one partition, keyed 'data.zarr#date=2026-11-01'. A date's "
                                  "rows are one contiguous run, the coordinate is sorted, and new dates are rows "
                                  "appended to the store. Zarr stores only.")
    filters: list[tuple[str, Literal["==", "!=", "<", "<=", ">", ">="], float | int | str]] | None = Field(
        default=None, description="Row filters (column, op, value), all must hold (applied per row group).")
    on_bad_rows: Literal["raise", "drop"] = "raise"
    max_dropped_fraction: float = Field(
        default=0.01, ge=0, le=1,
        description="With on_bad_rows: drop, a run fails (before it commits anything) when a model would drop more "
                    "than this share of a new partition's rows (missing or non-finite values, or beyond the model's "
                    "bounds), naming the partition, the model and the count.")
    settle_seconds: float = Field(default=0.0, ge=0, description="A partition modified less than this many seconds "
                                                                 "ago is left out of the run (it may still be "
                                                                 "being written) and read by a later one.")
    marker: str | None = Field(default=None, description="A file the writer leaves when a partition is complete "
                                                         "(e.g. _SUCCESS): a partition whose directory (a Zarr "
                                                         "store: the store) lacks it is left for a later run.")
    max_retries: int = Field(default=3, ge=1, description="Runs that leave out a partition that cannot be read yet "
                                                          "(no footer: still being written) before it is refused by "
                                                          "name.")
    fingerprint: Literal["metadata", "content"] = Field(
        default="metadata", description="How a changed partition is recognised: path+size+mtime, or a hash of its bytes.")


class PreprocessSpec(_Strict):
    center: bool = False
    scale: bool = False


class ModelSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    estimator: str = Field(default="GPTiltedDensity",
                           description="A model kind of tgpflow.models.registry that pipelines accept.")
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("estimator")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in pipeline_estimators():
            raise ValueError(f"estimator must be one of {list(pipeline_estimators())}; got {name!r}")
        return name

    @model_validator(mode="after")
    def _params_are_the_estimators(self) -> ModelSpec:
        est = self.estimator_class()()
        renamed = getattr(getattr(est, "params_table", None), "renamed", {})
        for name in set(self.params) & set(renamed):  # a spec written for an earlier release: say what replaced it
            raise ValueError(f"params: {name!r} is no longer a parameter of {type(est).__name__}: {renamed[name]}")
        known = sorted(est.get_params())
        for name in sorted(set(self.params) - set(known)):
            raise ValueError(f"params: {name!r} is not a parameter of {type(est).__name__}"
                             f"{closest_hint(name, known)}; it takes {', '.join(known)}")
        try:
            est.set_params(**self.params)
            est.check_params()
        except (ValueError, TypeError) as exc:
            raise ValueError(f"params: {exc}") from None
        return self

    def estimator_class(self) -> type:
        """The estimator class this model names."""
        return model_kinds()[self.estimator].estimator_class()

    def statistics_params(self) -> dict[str, Any]:
        """The params the store's statistics depend on (:func:`statistics_params`)."""
        return statistics_params(self.estimator, self.params)

    def refits_from_rows(self) -> bool:
        """Whether this model has no additive statistics (RootSobolevDensity's method "rsr"): each run refits it
        on the rows of every partition it keeps, and the store holds no statistics for it."""
        return refits_from_rows(self.estimator, self.params.get("method", self._default_method()))

    def _default_method(self) -> Any:
        return self.estimator_class()().get_params().get("method")


def statistics_params(estimator: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a model of kind ``estimator`` (a spec's, or as a store's manifest recorded them, perhaps
    by an earlier release) as its statistics see them: renamed parameters under their names of today (``eps``
    of a kernel model: ``ridge``), solve-only ones (a kernel model's ``ridge``, ``rank_tol``) left out
    (:meth:`tgpflow.models.params.ParamTable.statistics_params`)."""
    kind = model_kinds().get(estimator)
    table = getattr(kind.estimator_class(), "params_table", None) if kind is not None else None
    return table.statistics_params(params) if table is not None else dict(params)


class ScoresSpec(_Strict):
    path: str
    model: str | None = Field(default=None, description="Which model scores (default: the first).")
    threshold_quantile: float = Field(default=0.01, gt=0, lt=1,
                                      description="Rows below this quantile of the training log density are flagged.")
    keep_columns: list[str] | None = Field(
        default=None, description="Columns of the partitions (Parquet; any type, e.g. an id and a timestamp) written "
                                  "beside each row's scores, after its position in the partition (row).")

    @field_validator("keep_columns")
    @classmethod
    def _keepable(cls, names: list[str] | None) -> list[str] | None:
        taken = [c for c in names or [] if c in RESERVED]
        if taken:
            raise ValueError(f"keep_columns cannot name {taken[0]!r}: a scores file has a column of that name (row, "
                             f"log_density, anomaly_score, anomaly)")
        if names and len(set(names)) != len(names):
            raise ValueError(f"keep_columns names a column twice: {names}")
        return names
    version: Literal["previous", "current"] = Field(
        default="previous", description="Which version scores a run's new partitions: the one that was current "
                                        "before the run (a detector should not learn an anomaly before it flags "
                                        "it; a first run has none and uses the new one), or the one the run just "
                                        "fitted on them.")


class OutputsSpec(_Strict):
    store: str
    models: str
    scores: ScoresSpec | None = None
    report: str | None = Field(default=None, description="Directory for the GP-tilted models' reports "
                                                         "(<report>/<model>/<version>/: metrics.json and figures).")


class DriftSpec(_Strict):
    alpha: float = Field(default=0.01, gt=0, lt=1,
                         description="False-alarm rate of a run's drift verdict on each new partition: at most this "
                                     "share of partitions of unchanged data are flagged (docs/drift.md).")
    window: int = Field(default=14, ge=1, description="Earlier unflagged partitions whose log-likelihood gaps are "
                                                      "the reference of the z statistic (docs/drift.md).")
    model: str | None = Field(default=None, description="The density model whose log-likelihood the z statistic "
                                                        "reads (default: the scores model, else the first).")


class FullRefit(_Strict):
    policy: Literal["full"]


class IncrementalRefit(_Strict):
    policy: Literal["incremental"]


class WindowRefit(_Strict):
    policy: Literal["window"]
    partitions: int = Field(ge=1)


class ForgettingRefit(_Strict):
    policy: Literal["forgetting"]
    factor: float = Field(gt=0, le=1)


RefitSpec = Annotated[FullRefit | IncrementalRefit | WindowRefit | ForgettingRefit, Field(discriminator="policy")]


class ClusterSpec(_Strict):
    kind: Literal["embedded", "threads"] | None = None
    scheduler: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ClusterSpec:
        given = [k for k in ("kind", "scheduler", "file") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of kind, scheduler, file; got {given}")
        return self


class PipelineSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    source: SourceSpec
    preprocess: PreprocessSpec = PreprocessSpec()
    models: list[ModelSpec] = Field(min_length=1)
    outputs: OutputsSpec
    refit: RefitSpec = IncrementalRefit(policy="incremental")
    cluster: ClusterSpec = ClusterSpec(kind="threads")
    lock_timeout: float = Field(default=0.0, ge=0, description="Seconds to wait for another run's lock (0: fail).")
    drift: DriftSpec = DriftSpec()
    storage_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options of the filesystems of the spec's URLs, by protocol, e.g. {s3: "
        "{endpoint_url: 'http://minio:9000'}} (fsspec's; credentials are better left to the environment).")

    @field_validator("storage_options")
    @classmethod
    def _known_protocols(cls, options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from fsspec.registry import known_implementations, registry

        known = {*known_implementations, *registry}
        for protocol in options:
            if protocol not in known:
                raise ValueError(f"storage_options: {protocol!r} is not a filesystem protocol fsspec knows"
                                 f"{closest_hint(protocol, sorted(known))}")
        return options

    @field_validator("models")
    @classmethod
    def _unique(cls, models: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique; got {names}")
        return models

    @model_validator(mode="after")
    def _forgetting_needs_statistics(self) -> PipelineSpec:
        rows = [m.name for m in self.models if m.refits_from_rows()]
        if self.refit.policy == "forgetting" and rows:
            raise ValueError(f"refit.policy 'forgetting' down-weights stored statistics, and {rows} have none (a "
                             f"RootSobolevDensity with method 'rsr' is refitted on the partitions' rows): use the "
                             f"policy 'window', or method 'kde_sdo'")
        return self

    @model_validator(mode="after")
    def _scores_model(self) -> PipelineSpec:
        if self.outputs.scores and self.outputs.scores.model not in (None, *[m.name for m in self.models]):
            raise ValueError(f"outputs.scores.model {self.outputs.scores.model!r} is not one of the models")
        if self.drift.model not in (None, *[m.name for m in self.models]):
            raise ValueError(f"drift.model {self.drift.model!r} is not one of the models")
        return self


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node: Any = tree
    parts = dotted.split(".")
    for key in parts[:-1]:
        if isinstance(node, list):
            node = node[int(key)]
        else:
            node = node.setdefault(key, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _substitute(tree: Any, date: str) -> Any:
    if isinstance(tree, str):
        return tree.replace("{date}", date)
    if isinstance(tree, dict):
        return {k: _substitute(v, date) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_substitute(v, date) for v in tree]
    return tree


def load_spec(path: str | Path, *, date: str | None = None, overrides: list[str] | None = None) -> PipelineSpec:
    """Read, override (``key.path=value``, value parsed as YAML), date-substitute and validate a spec."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec is a YAML mapping, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    for item in overrides or []:
        if "=" not in item:
            raise SpecError(f"--set expects key.path=value; got {item!r}")
        key, value = item.split("=", 1)
        try:
            _set(raw, key.strip(), yaml.safe_load(value))
        except (IndexError, ValueError, TypeError) as exc:
            raise SpecError(f"--set {item!r}: cannot set {key!r} ({exc})") from None
    raw = _substitute(raw, date or datetime.date.today().isoformat())
    try:
        return PipelineSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(validation_message(exc, str(path), "the spec", model_keys(PipelineSpec))) from None

