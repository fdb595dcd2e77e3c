"""The decorator of an estimator's public entry points: its parameters are checked once on the way in."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

__all__ = ["entry"]

F = TypeVar("F")


def entry(fn: F) -> F:
    """A public entry point (``fit``, ``accumulate``, ``fit_from_stats``, ``partial_fit``, ``prepare``): the
    parameters are checked on the way in, once, not again by the entries it calls itself."""
    @functools.wraps(fn)  # type: ignore[arg-type]
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:  # an Estimator (check_params)
        if self.__dict__.get("_params_checked"):
            return fn(self, *args, **kwargs)  # type: ignore[operator]
        self.check_params()
        self._params_checked = True
        try:
            return fn(self, *args, **kwargs)  # type: ignore[operator]
        finally:
            self.__dict__.pop("_params_checked", None)

    return checked  # type: ignore[return-value]
