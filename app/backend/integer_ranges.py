"""GBNF for an integer between bounds: JSON schema's ``minimum`` and
``maximum`` (and their exclusive forms) on an ``integer``.

llama-cpp-python's schema converter leaves these out (its ``TODO`` says so),
so a schema of ``{"type": "integer", "minimum": 0, "maximum": 100}`` let a
model write ``-293``, which pydantic, langchain and instructor then refuse.
llama.cpp's own converter has the rule; this is a port of its
``build_min_max_int`` (``common/json-schema-to-grammar.cpp``, MIT): a range
is written digit by digit as alternatives of character classes, so the
grammar accepts exactly the integers in it, written without leading zeros.

Pure Python, no llama_cpp.
"""

from __future__ import annotations

import math
from typing import Any

# How many digits an unbounded side allows (an int64's).
_DECIMALS = 16


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The least and greatest integers ``schema`` allows (None: no bound),
    from ``minimum``/``exclusiveMinimum`` and ``maximum``/``exclusiveMaximum``
    (bounds may be fractional: 0.5 as a minimum allows 1)."""
    low = high = None
    if isinstance(schema.get("minimum"), int | float):
        low = math.ceil(schema["minimum"])
    elif isinstance(schema.get("exclusiveMinimum"), int | float):
        low = math.floor(schema["exclusiveMinimum"]) + 1
    if isinstance(schema.get("maximum"), int | float):
        high = math.floor(schema["maximum"])
    elif isinstance(schema.get("exclusiveMaximum"), int | float):
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    return low, high


def integer_rule(low: int | None, high: int | None) -> str:
    """A GBNF expression of the integers from ``low`` to ``high`` (each may
    be None: unbounded on that side; not both)."""
    out: list[str] = []
    _min_max(low, high, out, _DECIMALS, top_level=True)
    return "(" + "".join(out) + ")"


def _digit_range(out: list[str], first: str, last: str) -> None:
    out.append(f"[{first}]" if first == last else f"[{first}-{last}]")


def _more_digits(out: list[str], least: int, most: int | None) -> None:
    out.append("[0-9]")
    if least == most == 1:
        return
    if most == least:
        out.append(f"{{{least}}}")
    else:
        out.append(f"{{{least},{'' if most is None else most}}}")


def _uniform_range(out: list[str], start: str, end: str) -> None:
    """The numbers from ``start`` to ``end``, both of one length."""
    i = 0
    while i < len(start) and i < len(end) and start[i] == end[i]:
        i += 1
    if i > 0:
        out.append(f'"{start[:i]}"')
    if i < len(start) and i < len(end):
        if i > 0:
            out.append(" ")
        rest = len(start) - i - 1
        if rest > 0:
            start_rest, end_rest = start[i + 1 :], end[i + 1 :]
            zeros, nines = "0" * rest, "9" * rest
            end_reached = False
            out.append("(")
            if start_rest == zeros:
                _digit_range(out, start[i], chr(ord(end[i]) - 1))
                out.append(" ")
                _more_digits(out, rest, rest)
            else:
                out.append(f"[{start[i]}] (")
                _uniform_range(out, start_rest, nines)
                out.append(")")
                if ord(start[i]) < ord(end[i]) - 1:
                    out.append(" | ")
                    if end_rest == nines:
                        _digit_range(out, chr(ord(start[i]) + 1), end[i])
                        end_reached = True
                    else:
                        _digit_range(out, chr(ord(start[i]) + 1), chr(ord(end[i]) - 1))
                    out.append(" ")
                    _more_digits(out, rest, rest)
            if not end_reached:
                out.append(" | ")
                _digit_range(out, end[i], end[i])
                out.append(" ")
                _uniform_range(out, zeros, end_rest)
            out.append(")")
        else:
            out.append(f"[{start[i]}-{end[i]}]")


def _min_max(
    low: int | None, high: int | None, out: list[str], decimals: int, top_level: bool
) -> None:
    if low is not None and high is not None:
        if low < 0 and high < 0:
            out.append('"-" (')
            _min_max(-high, -low, out, decimals, top_level=True)
            out.append(")")
            return
        if low < 0:
            out.append('"-" (')
            _min_max(0, -low, out, decimals, top_level=True)
            out.append(") | ")
            low = 0
        low_text, high_text = str(low), str(high)
        for digits in range(len(low_text), len(high_text)):
            _uniform_range(out, low_text, "9" * digits)
            low_text = "1" + "0" * digits
            out.append(" | ")
        _uniform_range(out, low_text, high_text)
        return
    fewer = max(decimals - 1, 1)
    if low is not None:
        if low < 0:
            out.append('"-" (')
            _min_max(None, -low, out, decimals, top_level=False)
            out.append(") | [0] | [1-9] ")
            _more_digits(out, 0, decimals - 1)
        elif low == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                _more_digits(out, 0, fewer)
            else:
                _more_digits(out, 1, decimals)
        elif low <= 9:
            digit = str(low)
            first = "1" if top_level else "0"
            if digit > first:
                _digit_range(out, first, chr(ord(digit) - 1))
                out.append(" ")
                _more_digits(out, 1, fewer)
                out.append(" | ")
            _digit_range(out, digit, "9")
            out.append(" ")
            _more_digits(out, 0, fewer)
        else:
            text = str(low)
            length, lead = len(text), text[0]
            if lead > "1":
                _digit_range(out, "1" if top_level else "0", chr(ord(lead) - 1))
                out.append(" ")
                _more_digits(out, length, fewer)
                out.append(" | ")
            _digit_range(out, lead, lead)
            out.append(" (")
            _min_max(int(text[1:]), None, out, fewer, top_level=False)
            out.append(")")
            if lead < "9":
                out.append(" | ")
                _digit_range(out, chr(ord(lead) + 1), "9")
                out.append(" ")
                _more_digits(out, length - 1, fewer)
        return
    if high is not None:
        if high >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                _more_digits(out, 0, fewer)
                out.append(" | ")
            _min_max(0, high, out, decimals, top_level=True)
        else:
            out.append('"-" (')
            _min_max(-high, None, out, decimals, top_level=False)
            out.append(")")
        return
    raise ValueError("an integer range needs a minimum or a maximum")
