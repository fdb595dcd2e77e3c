"""The small core every other layer stands on (docs/architecture.md, "Inside the estimators").

* :mod:`~tgpflow.core.engine` — the pass: chunk statistics, a bounded fan-in tree, one compute, with a
  progress callback parameter;
* :mod:`~tgpflow.core.memory` — the memory planner (rows per block from a byte budget);
* :mod:`~tgpflow.core.gaussian_base` — the Gaussian base measure N(μ, Σ) and drawing from it (docs/mathematics.md,
  "Features and the pilot pass" and "MAP, baselines and sampling"), and :mod:`~tgpflow.core.proposal` — the defensive
  importance-sampling proposal around it;
* :mod:`~tgpflow.core.moments` and :mod:`~tgpflow.core.summable` — first and second moments as a
  mergeable value, and what every additive statistic shares (``AdditiveStats``: the field-by-field algebra of
  every statistics class);
* :mod:`~tgpflow.core.backend` (array namespaces), :mod:`~tgpflow.core.logs` (phase logging) and
  :mod:`~tgpflow.core.version`.

The layers above it, bottom to top: io < features < stats < solve < models < sample | metrics < pipeline
< cluster_files < cluster < cli | demo. ``[tool.importlinter]`` in pyproject.toml states that order and
``tests/test_layers.py`` enforces it. Nothing here imports from a layer above (only
:mod:`tgpflow.errors`, below everything). This package imports nothing on its own: ``import tgpflow``
stays cheap.
"""
