"""Strict values: how a function's inputs and outputs cross the sandbox boundary, and how cases files spell them.

Only plain values exist here: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``,
``decimal.Decimal``, ``fractions.Fraction``, ``list``, ``tuple``, ``set``, ``frozenset`` and ``dict`` — each of
exactly that type, and each exactly: a value decoded compares under every Python operator as the value encoded did
(an ``int`` stays an ``int`` of any size, a ``bool`` a ``bool``, a ``Decimal`` keeps its digits and exponent). A
subclass of one of them (a ``Counter``, an ``int`` subclass) is copied into its base type by the base type's own
method, so whatever it overrides, ``__eq__`` included, is left behind; any other object cannot be encoded, so it
can never be compared. JSON carries the rest with one-key tags: ``{"$tuple": [...]}``, ``{"$set": [...]}``,
``{"$frozenset": [...]}``, ``{"$dict": [[k, v], ...]}`` (keys that are not all strings), ``{"$float": "nan"}``,
``{"$bytes": "base64"}``, ``{"$complex": [re, im]}``, ``{"$decimal": "1.10"}``, ``{"$fraction": [num, den]}``, and
``{"$int": "hex"}`` for an integer too long for JSON's decimal digits (Python reads at most 4,300).

:func:`plain` is how a value of another library (numpy's, an integer or a rational type of its own) becomes the
plain value it stands for, for callers that accept such values (the judge's pytest plugin).

It is part of the task format (cases files spell values this way), and the judge copies it into grading
sandboxes, next to its drivers: it imports only the standard library.
"""

from __future__ import annotations

import base64
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["decode", "encode", "plain"]

_MAX_DEPTH = 100
#: Integers longer than this travel as hexadecimal: Python refuses to read or write more than 4,300 decimal digits.
_DECIMAL_DIGITS_BITS = 12_000
#: The longest text a ``$decimal`` or ``$int`` tag may carry (a plain value, not a computation).
_MAX_NUMBER_TEXT = 100_000


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
    complex: lambda v: complex(complex.real.__get__(v), complex.imag.__get__(v)),
}
_BUILTIN_TYPES = frozenset({type(None), bool, int, float, str, bytes, complex, list, tuple, dict, set, frozenset})


def plain(value: Any) -> Any:
    """The plain value another library's value stands for, or ``value`` itself when it stands for none.

    numpy's scalars and arrays through ``tolist`` (exact: numpy's integers, booleans and floats become Python's);
    other libraries' integers through ``__index__``; their rationals (``numbers.Rational``) as the exact
    ``Fraction``; any other real number through ``float``, the one conversion that may round (Python's own
    comparison would call that library's code, whose meaning no plain value can carry).
    """
    import numbers
    from decimal import Decimal
    from fractions import Fraction

    kind = type(value)
    if kind in _BUILTIN_TYPES or isinstance(value, Decimal | Fraction):
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and kind.__module__.partition(".")[0] == "numpy":
        return tolist()
    if hasattr(kind, "__index__"):
        return operator.index(value)
    if isinstance(value, numbers.Rational):
        return Fraction(operator.index(value.numerator), operator.index(value.denominator))
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _exact_number(value: Any, depth: int) -> Any:
    """The tag of a ``Decimal`` or a ``Fraction`` (of a subclass: of its base's own value), or None for neither.

    Imported only here: the modules cost a candidate's process about 2 ms, and a value of either type exists only
    where its module was imported already.
    """
    from decimal import Decimal
    from fractions import Fraction

    if isinstance(value, Decimal):
        return {"$decimal": Decimal.__str__(value)}
    if isinstance(value, Fraction):
        parts = [vars(Fraction)[name].fget(value) for name in ("numerator", "denominator")]
        if not all(type(part) is int for part in parts):  # a subclass's own state
            raise TypeError(f"a value of type {type(value).__qualname__} holds no plain fraction")
        return {"$fraction": [encode(part, depth + 1) for part in parts]}
    return None


def encode(value: Any, _depth: int = 0, *, convert: Callable[[Any], Any] | None = None) -> Any:
    """The JSON-ready form of ``value``.

    ``convert`` (:func:`plain`, say) is given each part of ``value`` that is of no plain type, once; what it
    returns is encoded in its place.

    Raises:
        TypeError: ``value`` holds something that is not exactly a plain value.
        ValueError: it is nested deeper than 100 levels.
    """
    if _depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, str):
        return value
    if kind is int:
        return value if value.bit_length() <= _DECIMAL_DIGITS_BITS else {"$int": format(value, "x")}
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [encode(v, _depth + 1, convert=convert) for v in value]
    if kind in (tuple, set, frozenset):
        items = [encode(v, _depth + 1, convert=convert) for v in value]
        if kind is not tuple:
            items.sort(key=repr)
        return {f"${kind.__name__}": items}
    if kind is dict:
        if all(type(k) is str for k in value) and not (len(value) == 1 and next(iter(value)).startswith("$")):
            return {k: encode(v, _depth + 1, convert=convert) for k, v in value.items()}
        pairs = [
            [encode(k, _depth + 1, convert=convert), encode(v, _depth + 1, convert=convert)] for k, v in value.items()
        ]
        return {"$dict": pairs}
    if kind is bytes:
        return {"$bytes": base64.b64encode(value).decode()}
    if kind is complex:
        return {"$complex": [encode(value.real), encode(value.imag)]}
    for base, copy in _BASE_COPIES.items():
        if isinstance(value, base) and kind is not bool:
            return encode(copy(value), _depth + 1, convert=convert)
    number = _exact_number(value, _depth)
    if number is not None:
        return number
    if convert is not None:
        converted = convert(value)
        if converted is not value:  # converted again if need be: the depth bounds a conversion that never ends
            return encode(converted, _depth + 1, convert=convert)
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
    elif tag == "$int" and isinstance(inner, str) and len(inner) <= _MAX_NUMBER_TEXT:
        try:
            return int(inner, 16)
        except ValueError:
            pass
    elif tag == "$decimal" and isinstance(inner, str) and len(inner) <= _MAX_NUMBER_TEXT:
        from decimal import Decimal, InvalidOperation

        try:
            return Decimal(inner)
        except InvalidOperation:
            pass
    elif tag == "$fraction" and isinstance(inner, list) and len(inner) == 2:
        from fractions import Fraction

        parts = [decode(v, depth + 1) for v in inner]
        if all(type(part) is int for part in parts) and parts[1] > 0:
            return Fraction(*parts)
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
