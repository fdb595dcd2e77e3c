"""Options of the filesystems behind URLs (``s3://``, ``gs://``, ``abfs://`` …): endpoints, credentials, ``anon``
(docs/data.md, "Object storage").

tgpflow reads and writes every URL through fsspec, so the options go where fsspec looks for them: explicit
``storage_options`` where a call takes them (:func:`tgpflow.load`, ``save``, :func:`~tgpflow.io.sources.as_source`),
and for everything else one run touches — sources, stores, models, scores, reports — fsspec's own configuration,
``fsspec.config.conf[protocol]``, which fills in the keyword arguments of every filesystem of that protocol created
while it is set. :func:`storage_config` sets it for the duration of a command or a pipeline run and restores it
after; a filesystem made then keeps its options wherever it goes (Dask workers receive it pickled with them).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["parse_options", "storage_config"]


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a filesystem's options: a dotted key nests (``client_kwargs.endpoint_url=…``), a
    value that reads as JSON is that value (``true``, ``3``, ``{"a": 1}``), any other value is the string."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE; got {pair!r}")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        node = options
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{pair!r}: {part!r} is given a value and options below it")
        if isinstance(node.get(leaf), dict):
            raise ValueError(f"{pair!r}: {key!r} is given options below it and a value")
        node[leaf] = value
    return options


@contextlib.contextmanager
def storage_config(per_protocol: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """Give every filesystem of each protocol created inside the ``with`` these options (over fsspec's configured
    ones; a call's own ``storage_options`` still win), e.g. ``{"s3": {"endpoint_url": "http://…", "anon": True}}``;
    fsspec's configuration is restored on exit."""
    from fsspec.config import conf

    saved = {protocol: copy.deepcopy(conf[protocol]) if protocol in conf else None for protocol in per_protocol}
    try:
        for protocol, options in per_protocol.items():
            conf[protocol] = _merged(conf.get(protocol, {}), options)
        yield
    finally:
        for protocol, before in saved.items():
            if before is None:
                conf.pop(protocol, None)
            else:
                conf[protocol] = before


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, nested mappings merged key by key (``client_kwargs`` keeps what it had)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) \
            else copy.deepcopy(value)
    return out
