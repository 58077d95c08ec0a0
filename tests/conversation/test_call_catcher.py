"""Keeping tool calls out of a streamed reply's text, token by token."""

from __future__ import annotations

import pytest

from app.conversation.call_catcher import CallCatcher


def _split(trigger: str, pieces: list[str], calling: bool = False):
    catcher = CallCatcher(trigger, calling)
    shown: list[int] = []
    for token, piece in enumerate(pieces):
        shown += catcher.take(token, piece)
    shown += catcher.release()
    return (
        "".join(pieces[t] for t in shown),
        "".join(pieces[t] for t in catcher.call_tokens),
    )


@pytest.mark.parametrize(
    ("pieces", "text", "call"),
    [
        # A marker split over tokens, one of which begins with text.
        (["Hi", " <", "tool", "_call", ">", '{"a"'], "Hi", ' <tool_call>{"a"'),
        # Something that looked like the marker's start, and was not.
        (["Hi", " <", "b", ">"], "Hi <b>", ""),
        (["<tool_call>", "{}"], "", "<tool_call>{}"),
        (["No call here."], "No call here.", ""),
    ],
)
def test_a_marker_opens_the_call_wherever_it_comes(pieces, text, call) -> None:
    assert _split("<tool_call>", pieces) == (text, call)


def test_a_bare_json_call_opens_only_the_reply() -> None:
    assert _split("{", [" ", '{"tool', '_call"', ": {}}"]) == (
        " ",
        '{"tool_call": {}}',
    )
    # Later braces are code or examples, not calls.
    code = ["Use", " a", " dict", ":", " {", "}"]
    assert _split("{", code) == ("".join(code), "")


def test_a_required_call_is_all_call() -> None:
    assert _split("<tool_call>", ["<tool_call>", "{}"], calling=True) == (
        "",
        "<tool_call>{}",
    )
