"""Strict values: how a function's inputs and outputs cross the sandbox boundary, and how cases files spell them.

Only plain builtin values exist here: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``,
``list``, ``tuple``, ``set``, ``frozenset`` and ``dict`` — each of exactly that type. A subclass of one of them
(a ``Counter``, an ``int`` subclass) is copied into its base type by the base type's own method, so whatever it
overrides, ``__eq__`` included, is left behind; any other object cannot be encoded, so it can never be compared.
JSON carries the rest with one-key tags: ``{"$tuple": [...]}``, ``{"$set": [...]}``, ``{"$frozenset": [...]}``,
``{"$dict": [[k, v], ...]}`` (keys that are not all strings), ``{"$float": "nan"}``, ``{"$bytes": "base64"}``,
``{"$complex": [re, im]}``.

It is part of the task format (cases files spell values this way), and the judge copies it into grading
sandboxes, next to its drivers: it imports only the standard library.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

__all__ = ["decode", "encode"]

_MAX_DEPTH = 100


#: How a subclass instance becomes its base type: the base's own methods, never the subclass's overrides.
_BASE_COPIES: dict[type, Any] = {
    int: int.__int__,
    float: float.__float__,
    str: str.__str__,
    bytes: lambda v: bytes.__getitem__(v, slice(None)),
    list: list.copy,
    tuple: lambda v: tuple.__getitem__(v, slice(None)),
    dict: dict.copy,
    set: set.copy,
    frozenset: frozenset.copy,
}


def encode(value: Any, _depth: int = 0) -> Any:
    """The JSON-ready form of ``value``.

    Raises:
        TypeError: ``value`` holds something that is not exactly a builtin value.
        ValueError: it is nested deeper than 100 levels.
    """
    if _depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [encode(v, _depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        items = [encode(v, _depth + 1) for v in value]
        if kind is not tuple:
            items.sort(key=repr)
        return {f"${kind.__name__}": items}
    if kind is dict:
        if all(type(k) is str for k in value) and not (len(value) == 1 and next(iter(value)).startswith("$")):
            return {k: encode(v, _depth + 1) for k, v in value.items()}
        return {"$dict": [[encode(k, _depth + 1), encode(v, _depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"$bytes": base64.b64encode(value).decode()}
    if kind is complex:
        return {"$complex": [encode(value.real), encode(value.imag)]}
    for base, copy in _BASE_COPIES.items():
        if isinstance(value, base) and kind is not bool:
            return encode(copy(value), _depth + 1)
    raise TypeError(f"a value of type {kind.__module__}.{kind.__qualname__} is not a plain builtin value")


def decode(data: Any, _depth: int = 0) -> Any:
    """The value that :func:`encode` made ``data`` from (also how cases files are read).

    Raises:
        ValueError: ``data`` uses an unknown tag or a malformed one (a member or key that cannot be hashed
            included), or is nested deeper than 100 levels. Nothing else, whatever JSON ``data`` is: it may come
            from the candidate's process.
    """
    if _depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if isinstance(data, list):
        return [decode(v, _depth + 1) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) == 1:
        ((tag, inner),) = data.items()
        if isinstance(tag, str) and tag.startswith("$"):
            return _decode_tag(tag, inner, _depth)
    return {k: decode(v, _depth + 1) for k, v in data.items()}


def _decode_tag(tag: str, inner: Any, depth: int) -> Any:
    """The value of one tag, each part counted one level deeper, as :func:`encode` counts it."""
    if tag == "$float" and inner in ("nan", "inf", "-inf"):
        return float(inner)
    elif tag == "$bytes" and isinstance(inner, str):
        try:
            return base64.b64decode(inner, validate=True)
        except ValueError:  # not base64 (binascii.Error), or not ASCII
            pass
    elif tag == "$complex" and isinstance(inner, list) and len(inner) == 2:
        parts = [decode(v, depth + 1) for v in inner]  # {"$float": "nan"} for a part that is not finite
        if all(type(part) in (int, float) for part in parts):
            try:
                return complex(*parts)
            except OverflowError:  # an int part too large for a float
                pass
    elif tag in ("$tuple", "$set", "$frozenset") and isinstance(inner, list):
        items = [decode(v, depth + 1) for v in inner]
        return tuple(items) if tag == "$tuple" else _hashed(tag, set if tag == "$set" else frozenset, items)
    elif tag == "$dict" and isinstance(inner, list) and all(isinstance(p, list) and len(p) == 2 for p in inner):
        return _hashed(tag, dict, [(decode(k, depth + 1), decode(v, depth + 1)) for k, v in inner])
    raise ValueError(f"unknown or malformed value tag {tag!r}")


def _hashed(tag: str, kind: Callable[[list[Any]], Any], items: list[Any]) -> Any:
    """``kind(items)``: a set or a dict, whose members or keys must be hashable."""
    try:
        return kind(items)
    except TypeError:  # a list, dict or set (or a tuple holding one) as a member or key
        raise ValueError(f"malformed value tag {tag!r}: a member or key cannot be hashed") from None
