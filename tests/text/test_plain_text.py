"""Markdown reduced to plain words for one-line labels."""

from __future__ import annotations

import pytest

from app.qt.models.conversation_tree import snippet
from app.text.plain_text import plain_text


@pytest.mark.parametrize(
    ("markdown", "plain"),
    [
        ("```py\ndef f():\n    pass\n```", "\ndef f():\n    pass\n"),
        (
            "# Title\nSome **bold** and *italic* and _under_",
            "Title\nSome bold and italic and under",
        ),
        ("Use `make test` or [the docs](http://x/y)", "Use make test or the docs"),
        ("- one\n- two\n1. three", "one\ntwo\nthree"),
        ("> quoted ~~gone~~", "quoted gone"),
        ("![logo](a.png) a_b_c 2*3*4", "logo a_b_c 2*3*4"),
    ],
)
def test_markup_goes_words_stay(markdown, plain):
    assert plain_text(markdown) == plain


def test_a_tree_label_shows_the_code_not_the_fence():
    assert snippet("```python\nprint('hi')\n```") == "print('hi')"
