"""How a node's part in tool use reads in the window, in words (Qt-free).

The transcript shows calls and results as cards of their own
(``app/qt/views/transcript/tool_cards.py``), from a node's stored text and
``tool_use``: its text is no longer rewritten for it. What those cards say is
decided here: a call's arguments laid out, a result's size, where a long
result folds, whether edited arguments can be sent. The tree and the graph
label a node with one short line: ``label_text``.
"""

from __future__ import annotations

import json
from typing import Any

from storage import tool_use
from storage.values import Role

# A result longer than either is shown folded: its first lines, and a toggle.
FOLD_LINES = 12
FOLD_CHARS = 1500
# A label takes no more of a result than this (the rest is never read).
LABEL_RESULT_CHARS = 400
# An error result's first word, as the tool runner writes it.
ERROR_PREFIX = "Error:"


def label_text(role: str, text: str, use: dict[str, Any] | None) -> str:
    """A node's words for a one-line label (Markdown, short): a reply's text
    with its calls ("Let me look. Calls `get_weather`"), a result with what
    it answers ("Result of `get_weather`: snow")."""
    if role == Role.TOOL:
        _call_id, name = tool_use.answered_call(use)
        return f"Result of `{name or 'a tool'}`: {text[:LABEL_RESULT_CHARS]}"
    calls = tool_use.calls_of(use)
    if not calls:
        return text
    names = ", ".join(f"`{call['name']}`" for call in calls)
    return f"{text.strip()} Calls {names}".strip()


def card_text(role: str, text: str, use: dict[str, Any] | None) -> str:
    """About what a node's card shows, as text: what its height is estimated
    from before the card is made (a long result folded, a call's arguments)."""
    if role == Role.TOOL:
        return f"Result\n\n{fold(text)[0]}"
    calls = tool_use.calls_of(use)
    shown_calls = [
        f"{call['name']}\n\n```\n{pretty_arguments(call['arguments'])}\n```"
        for call in calls
    ]
    return "\n\n".join([text, *shown_calls]) if shown_calls else text


def pretty_arguments(arguments: str) -> str:
    """A call's ``arguments`` laid out on lines, every character of every
    name and value as sent (only spaces and line breaks between them change);
    text that is not JSON as it is.

    Not ``json.dumps(json.loads(...))``: that would show ``1e5`` as
    ``100000.0`` and keep one of two keys of the same name, and what a person
    approves must be what the tool gets.
    """
    try:
        json.loads(arguments)
    except ValueError:
        return arguments
    out: list[str] = []
    depth = 0
    in_string = escaped = False
    for at, char in enumerate(arguments):
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            out.append(char)
            in_string = True
        elif char in " \t\r\n":
            continue
        elif char in "{[":
            depth += 1
            out.append(char)
            if _next_token(arguments, at + 1) not in "}]":
                out.append("\n" + "  " * depth)
        elif char in "}]":
            depth -= 1
            if out and out[-1] not in "{[":
                out.append("\n" + "  " * depth)
            out.append(char)
        elif char == ",":
            out.append(",\n" + "  " * depth)
        elif char == ":":
            out.append(": ")
        else:
            out.append(char)
    return "".join(out)


def _next_token(text: str, start: int) -> str:
    """The first character from ``start`` that is not a space ("" at the end)."""
    rest = text[start:].lstrip()
    return rest[:1]


def arguments_error(text: str) -> str | None:
    """Why ``text`` cannot be sent as a call's arguments (None: it can)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"Not JSON: {error.msg} (line {error.lineno}, column {error.colno})."
    except ValueError as error:  # e.g. a number of too many digits
        return f"Not JSON: {error}."
    if not isinstance(value, dict):
        return "The arguments must be a JSON object: { … }."
    return None


def is_error_result(text: str) -> bool:
    """Whether a tool's result says the call failed."""
    return text.lstrip().startswith(ERROR_PREFIX)


def result_size(text: str, n_tokens: int) -> str:
    """A result's size for people: its tokens once counted, else characters."""
    if n_tokens > 0:
        return f"{n_tokens:,} token{'' if n_tokens == 1 else 's'}"
    return f"{len(text):,} character{'' if len(text) == 1 else 's'}"


def fold(text: str) -> tuple[str, int]:
    """A result as shown folded and its number of lines: the text itself
    when it is short, else its first ``FOLD_LINES`` lines (no more than
    ``FOLD_CHARS`` characters)."""
    # A last line break ends the last line; it begins no other.
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return text, lines
    head = text[:FOLD_CHARS]
    head = "\n".join(head.split("\n")[:FOLD_LINES])
    return head.rstrip(), lines
