"""Code blocks: highlighted with Pygments in light and dark, copied with a click."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QGuiApplication, QTextCursor

from app.qt.views.transcript.markdown import render_markdown
from tests.ui.conftest import wait_idle

CODE = "def area(r):\n    return 3.14 * r * r  # circle"
MESSAGE = f"Why is this slow?\n\n```python\n{CODE}\n```\n\nAlso `inline`."


def test_blocks_are_collected_and_highlighted_for_the_palette(qapp):
    light = render_markdown(MESSAGE, QColor("#eef1f4"))
    dark = render_markdown(MESSAGE, QColor("#2a2d33"))
    assert light.code_blocks == dark.code_blocks == (CODE,)
    assert 'href="copy:0"' in light.html and ">python" in light.html
    # Keywords get the style's colour; the dark style picks other colours.
    assert 'font-weight:700; color:#007020;">def<' in light.html
    assert "#007020" not in dark.html and "def<" in dark.html
    assert "font-style:italic" in light.html  # the comment


def test_unknown_and_unlabelled_languages_are_plain_but_copyable(qapp):
    rendered = render_markdown(
        "```nosuchlang\nx = 1\n```\n\n```\ny\n```", QColor("white")
    )
    assert rendered.code_blocks == ("x = 1", "y")
    assert 'href="copy:1"' in rendered.html


def test_the_copy_link_puts_the_block_on_the_clipboard(qtbot, make_window):
    window = make_window()
    # QTest cannot type a backtick: the text is pasted, then sent.
    window.composer.edit.setPlainText(MESSAGE)
    window.send_action.trigger()
    wait_idle(qtbot, window)
    body = window.transcript.cards[0].body
    assert body.code_blocks == (CODE,)
    QGuiApplication.clipboard().clear()

    found = body.document().find("Copy")
    assert not found.isNull()
    cursor = QTextCursor(found)
    cursor.setPosition(found.selectionStart() + 1)
    point = body.cursorRect(cursor).center()
    qtbot.mouseClick(body.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point))
    assert QGuiApplication.clipboard().text() == CODE


def test_two_blocks_of_one_language_one_after_the_other_stay_two(qapp):
    two = render_markdown(
        "```bash\nls\npwd\n```\n\n```bash\necho hi\n```", QColor("white")
    )
    assert two.code_blocks == ("ls\npwd", "echo hi")
    assert 'href="copy:1"' in two.html
    # A longer fence holds shorter ones as text.
    nested = render_markdown("````md\n```\ninner\n```\n````", QColor("white"))
    assert nested.code_blocks == ("```\ninner\n```",)
    # Fences the source cannot be matched on (here, in a quote) still work.
    quoted = render_markdown("> ```\n> q\n> ```\n\n```py\nx = 1\n```", QColor("white"))
    assert quoted.code_blocks == ("q", "x = 1")
