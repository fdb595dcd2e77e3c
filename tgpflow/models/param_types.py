"""The types of the estimators' parameter tables (:mod:`tgpflow.models.params`), each with how it reads.

A type is an ``Annotated`` pydantic type whose :class:`Allowed` metadata says how its values read in an error
message ("a positive integer") and whose :class:`CliText` says how the command line writes one; :func:`describe`
reads a whole union off them, and :func:`parse_list` parses a comma list of values the way ``-p NAME=VALUE``
gives it. Only light modules here: ``tgpflow fit --help`` builds its options from the tables.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

import numpy as np
from annotated_types import Ge, Gt, Len, Lt, MinLen
from pydantic import AllowInfNan, Field, PlainValidator, TypeAdapter, ValidationError

__all__ = ["Allowed", "CliText", "parse_bounds", "parse_discrete", "at_least", "param", "plain", "describe",
           "describe_parts", "union_members", "bare", "parse_list", "type_metadata", "not_allowed", "PositiveInt",
           "NonNegativeInt", "PositiveNumber", "NonNegativeNumber", "Fraction", "PositiveGrid", "Seed", "OnBadRows",
           "Device", "Bounds", "Discrete", "HalfStep", "TGPMethodName"]


class Allowed:
    """Annotated metadata: how a type reads in an error message ("a positive integer")."""

    def __init__(self, text: str):
        self.text = text


class CliText:
    """Annotated metadata: how the command line writes a value of this type (``parse`` and a ``metavar``)."""

    def __init__(self, parse: Callable[[str], Any], metavar: str):
        self.parse, self.metavar = parse, metavar


def parse_bounds(text: str) -> dict[str, list[float | None]]:
    """``COL:LO:HI,...`` → ``{col: [lo, hi]}`` (an empty side is open), ``auto`` or ``none``: the command line's
    ``bounds``."""
    if text.strip() in ("auto", "none"):
        return None if text.strip() == "none" else "auto"  # type: ignore[return-value]
    out: dict[str, list[float | None]] = {}
    for item in text.split(","):
        parts = item.strip().rsplit(":", 2)
        if len(parts) != 3 or not parts[0]:
            raise ValueError(f"expected COL:LO:HI (an empty side is open); got {item!r}")
        try:
            out[parts[0]] = [float(v) if v.strip() else None for v in parts[1:]]
        except ValueError:
            raise ValueError(f"bounds must be numbers; got {item!r}") from None
    return out


def parse_discrete(text: str) -> str | list[str] | None:
    """``auto``, ``none`` or ``COL,COL,...``: the command line's ``discrete``."""
    if text.strip() in ("auto", "none"):
        return None if text.strip() == "none" else "auto"
    names = [c.strip() for c in text.split(",")]
    if not all(names):
        raise ValueError(f"expected auto, none or COL,COL,...; got {text!r}")
    return names


# -- the types, each with how it reads ------------------------------------------------------------
Finite = AllowInfNan(False)
PositiveInt = Annotated[int, Ge(1), Allowed("a positive integer")]
NonNegativeInt = Annotated[int, Ge(0), Allowed("an integer >= 0")]
PositiveNumber = Annotated[float, Gt(0), Finite, Allowed("a positive number")]
NonNegativeNumber = Annotated[float, Ge(0), Finite, Allowed("a number >= 0")]
Fraction = Annotated[float, Gt(0), Lt(1), Allowed("a number in (0, 1)")]
PositiveGrid = Annotated[list[PositiveNumber], MinLen(1), Allowed("a non-empty list of positive numbers")]
Seed = Union[NonNegativeInt, None]
OnBadRows = Literal["raise", "drop"]
Device = Literal["auto", "cpu", "gpu"]
_Side = Union[Annotated[float, Finite], None]
_Pair = Annotated[list[_Side], Len(2, 2)]
Bounds = Annotated[Union[None, Literal["auto"], dict[Union[str, int], _Pair], list[_Pair]],
                   Allowed("None, 'auto', a dict {column: (lower, upper)} or a list of (lower, upper) pairs (None: an "
                           "open side)"), CliText(parse_bounds, "auto|none|COL:LO:HI,...")]
HalfStep = Annotated[float, Gt(0), Lt(0.5), Allowed("a number in (0, 1/2)")]
Discrete = Annotated[Union[None, Literal["auto", "none"], Annotated[list[Union[str, int]], MinLen(1)]],
                     Allowed("'auto', None ('none') or a non-empty list of columns"),
                     CliText(parse_discrete, "auto|none|COL,...")]


def at_least(n: int) -> Any:
    """An integer >= n."""
    return Annotated[int, Ge(n), Allowed(f"an integer >= {n}")]


def _known_method(name: Any) -> str:
    """A GP-tilted method of the registry (its error lists the known ones)."""
    from tgpflow.models.tgp_methods import get_method

    get_method(name)
    return name


TGPMethodName = Annotated[str, PlainValidator(_known_method, json_schema_input_type=str)]


def param(default: Any, help: str, *, applies: str | None = None) -> Any:
    """A table entry's default and one-line help; ``applies``: the TGPMethod capability it needs."""
    return Field(default, description=help, json_schema_extra=None if applies is None else {"applies": applies})


def plain(value: Any) -> Any:
    """NumPy scalars and arrays and tuples as the Python numbers and lists they hold (as JSON holds them)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (np.ndarray, tuple, list)):
        return [plain(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def describe(tp: Any) -> str:
    """How the values of type ``tp`` read: ``"'auto', 'scott', a positive number or …"``."""
    parts = describe_parts(tp)
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


def describe_parts(tp: Any) -> list[str]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        said = [m.text for m in tp.__metadata__ if isinstance(m, Allowed)]
        return said or describe_parts(args[0])
    if origin is Literal:
        return [repr(a) for a in args]
    if origin is Union:
        return [p for a in args for p in describe_parts(a)]
    names = {type(None): "None", bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    return [names.get(tp, getattr(tp, "__name__", str(tp)))]


def union_members(tp: Any) -> list[Any]:
    """The alternatives of a (possibly annotated) union type."""
    if typing.get_origin(tp) is Annotated and not any(isinstance(m, Allowed) for m in tp.__metadata__):
        return union_members(typing.get_args(tp)[0])
    if typing.get_origin(tp) is Union:
        return [m for a in typing.get_args(tp) for m in union_members(a)]
    return [tp]


def bare(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def parse_list(tp: Any, text: str) -> list[Any]:
    """A comma list of values of the list type ``tp``; ValueError naming the first item that is not one."""
    item_type = typing.get_args(bare(tp))[0]
    values = []
    for item in (v.strip() for v in text.split(",") if v.strip()):
        try:
            values.append(TypeAdapter(item_type).validate_strings(item))
        except ValidationError as exc:
            raise ValueError(not_allowed(item, describe(item_type), exc.errors())) from None
    try:
        return TypeAdapter(tp).validate_python(values)
    except ValidationError as exc:
        raise ValueError(not_allowed(text, describe(tp), exc.errors())) from None


def type_metadata(tp: Any) -> tuple[Any, ...]:
    return tp.__metadata__ if typing.get_origin(tp) is Annotated else ()


def not_allowed(text: str, allowed: str, errors: list[Any]) -> str:
    if any(e["type"] == "finite_number" for e in errors):
        return f"{text!r} is not finite; expected {allowed}"
    return f"{text!r} is not {allowed}"
