"""What a run does, from the partitions listed now and the store's committed manifest
(:mod:`tgpflow.pipeline.runner`, steps 1 and 3-4): the partitions it keeps, reads and subtracts, whether it
rebuilds the store, and the refusal of a spec whose models or preprocessing changed since the store was built.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tgpflow.errors import TgpflowError
from tgpflow.pipeline.discover import Partitions
from tgpflow.pipeline.spec import PipelineSpec, statistics_params
from tgpflow.pipeline.store import StatsStore

__all__ = ["RunPlan", "plan_run", "model_changes"]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What a run does, from the partitions listed now and the committed manifest."""

    files: list[str]  # the keys the run keeps (the window's, under refit: window)
    fps: dict[str, str]  # their fingerprints
    rebuild: bool  # no manifest yet, or refit: full
    run: int
    old_parts: dict[str, Any]  # the manifest's partitions the run starts from ({} when it rebuilds)
    added: list[str]  # new or changed: read
    removed: list[str]  # changed, disappeared or out of the window: subtracted

    @property
    def nothing_new(self) -> bool:
        return not self.rebuild and not self.added and not self.removed


def plan_run(spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, parts: Partitions,
             held: dict[str, str] | None = None) -> RunPlan:
    """Compare the partitions with the manifest; refuse a spec whose models (but for solve-only params:
    :func:`~tgpflow.pipeline.spec.statistics_params`) or preprocessing changed. ``held``: partitions not ready to
    read (:mod:`tgpflow.pipeline.arrivals`): a new one is left out, a committed one keeps its committed
    statistics (it is being rewritten: the new content is read once it is ready); the window is taken over every
    listed partition first, so a held newest partition does not pull an older one back in."""
    files = list(parts.keys)
    if not files:
        raise TgpflowError(f"{spec.source.path}: no partitions match")
    policy = spec.refit.policy
    if policy == "window":
        files = files[-spec.refit.partitions:]
    held = held or {}
    rebuild = manifest is None or policy == "full"
    committed = {} if manifest is None else manifest["partitions"]
    fps = {f: committed[f]["fingerprint"] if f in held else parts.fingerprint(f, spec.source.fingerprint)
           for f in files if f not in held or (f in committed and not rebuild)}
    files = [f for f in files if f in fps]
    # what the statistics depend on: a solve-only parameter (a kernel model's ridge, rank_tol) may change, and a
    # store written before a rename (eps → ridge) compares under today's names (spec.statistics_params)
    params = {m.name: {"estimator": m.estimator, "params": m.statistics_params()} for m in spec.models}
    if manifest is not None and not rebuild:
        old = {k: {"estimator": v["estimator"], "params": statistics_params(v["estimator"], v["params"])}
               for k, v in manifest["models"].items()}
        if old != params:
            raise TgpflowError(f"{store.root}: the spec's models differ from those the store was built with "
                               f"({model_changes(old, params)}); run once with --set refit.policy=full to rebuild "
                               f"the store")
        if spec.source.columns is not None and list(spec.source.columns) != manifest["columns"]:
            raise TgpflowError(f"{store.root}: source.columns {list(spec.source.columns)} differ from the columns the "
                               f"store was built with {manifest['columns']}; run once with --set refit.policy=full "
                               f"to rebuild the store")
        if manifest["preprocess_spec"] != spec.preprocess.model_dump():
            raise TgpflowError(f"{store.root}: preprocessing changed since the store was built; rebuild with "
                               f"--set refit.policy=full")
        bounded = [m.name for m in spec.models if m.params.get("bounds")]
        if manifest.get("bounds_in") != "data" and manifest["preprocess"] and bounded:
            raise TgpflowError(f"{store.root}: built by a release that applied the models' bounds after the "
                               f"preprocessing (in standardized units); {bounded} declare bounds, which now are in "
                               f"the data's units, so the stored statistics cannot be extended: rebuild once with "
                               f"--set refit.policy=full")
    old_parts = {} if rebuild else manifest["partitions"]
    return RunPlan(files=files, fps=fps, rebuild=rebuild, run=1 if manifest is None else manifest["run"] + 1,
                 old_parts=old_parts,
                 added=[f for f in files if f not in old_parts or old_parts[f]["fingerprint"] != fps[f]],
                 removed=[f for f in old_parts if f not in fps or old_parts[f]["fingerprint"] != fps[f]])


def model_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between the store's models and the spec's, in words (models, estimators, parameters)."""
    if sorted(old) != sorted(new):
        return f"models {sorted(old)} in the store, {sorted(new)} in the spec"
    out = []
    for name in sorted(old):
        if old[name]["estimator"] != new[name]["estimator"]:
            out.append(f"{name}: estimator {old[name]['estimator']} → {new[name]['estimator']}")
            continue
        a, b = old[name]["params"], new[name]["params"]
        out += [f"{name}: {k} {a.get(k)!r} → {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(out)
