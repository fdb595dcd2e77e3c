"""The GP-tilted methods: one module per method, named after it, defining and registering its
:class:`~tgpflow.models.tgp_method.TGPMethod` object (``fd``, ``ncfd``, ``fvpd``, ``map``, ``kde_rff``).

This package is the registry. Its module names are the built-in methods, listed without importing
them (``tgpflow --help`` stays cheap); a module is imported when its method is first asked for.
:func:`register_method` adds a method object defined anywhere else (a plug-in, a test).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tgpflow.models.tgp_method import TGPMethod

__all__ = ["register_method", "unregister_method", "get_method", "method_names"]

_REGISTERED: dict[str, TGPMethod] = {}


def register_method(method: TGPMethod) -> TGPMethod:
    """Make ``method`` available as ``GPTiltedDensity(method=method.name)`` (and ``tgpflow fit --model``)."""
    from tgpflow.models.tgp_method import TGPMethod

    if not isinstance(method, TGPMethod):
        raise TypeError(f"a GP-tilted method is a TGPMethod instance; got {type(method).__name__}")
    _REGISTERED[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method added by :func:`register_method` (a built-in one comes back when next asked for)."""
    _REGISTERED.pop(name, None)


def _builtin_names() -> tuple[str, ...]:
    return tuple(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def method_names() -> tuple[str, ...]:
    """Every GP-tilted method's name: the modules of this package (not imported) and the registered ones."""
    return tuple(dict.fromkeys((*_builtin_names(), *_REGISTERED)))


def get_method(name: Any) -> TGPMethod:
    """The method called ``name`` (a ValueError naming the known ones if there is none)."""
    if isinstance(name, str) and name not in _REGISTERED and name in _builtin_names():
        importlib.import_module(f"{__name__}.{name}")  # the module registers its method
    if not isinstance(name, str) or name not in _REGISTERED:
        raise ValueError(f"method must be one of {method_names()}; got {name!r}")
    return _REGISTERED[name]
