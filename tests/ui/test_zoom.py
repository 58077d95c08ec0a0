"""Zoom (Ctrl++, Ctrl+-, Ctrl+0) and the Text size setting, on the real window.

Sizes are measured where they show: the height of a rendered line of a
message body and the point size of its code block's header, not only the
fonts asked for.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import QLabel, QWidget

from app.preferences import TEXT_SCALES, load_preferences, step_text_scale
from app.qt.views.dialogs.settings import SettingsDialog
from app.qt.views.transcript.markdown import render_markdown
from app.qt.views.transcript.message_body import MessageBody, scale_html
from storage import setting_rows
from tests.ui.conftest import send, wait_idle

CTRL = Qt.KeyboardModifier.ControlModifier
MESSAGE = "A question about this:\n\n```python\nx = 1\n```\n\nThat is all."
LONG = "\n\n".join(f"Paragraph {i} of a long message." for i in range(30))


def _base_size() -> float:
    return QGuiApplication.font().pointSizeF()


def _line_height(body: MessageBody) -> float:
    """The height of the body's first rendered line (its text as drawn)."""
    document = body.document()
    document.documentLayout().documentSize()  # laid out
    return document.firstBlock().layout().lineAt(0).height()


def _drawn_size(body: MessageBody) -> float:
    """The point size the body's first words are drawn at: their own format's,
    else the document's default font (as the layout resolves it). The default
    font alone says nothing: it follows the widget's even where every
    character has a size of its own."""
    document = body.document()
    fragment = document.firstBlock().begin().fragment()
    return fragment.charFormat().font().resolve(document.defaultFont()).pointSizeF()


def _fixed_sizes(body: MessageBody) -> list[float]:
    """The point sizes the body's text has of its own (a code block's header)."""
    sizes = []
    block = body.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            size = it.fragment().charFormat().fontPointSize()
            if size > 0:
                sizes.append(size)
            it += 1
        block = block.next()
    return sizes


def _send_markdown(qtbot, window, text: str) -> None:
    # QTest cannot type a backtick: the text is pasted, then sent.
    window.composer.edit.setPlainText(text)
    window.send_action.trigger()
    wait_idle(qtbot, window)


def _zoom(qtbot, window, key: Qt.Key, times: int = 1) -> None:
    for _ in range(times):
        qtbot.keyClick(window.composer.edit, key, CTRL)
    wait_idle(qtbot, window)  # the preference is stored on the engine thread


def test_ctrl_plus_enlarges_the_text_and_ctrl_0_brings_it_back(qtbot, make_window):
    window = make_window()
    _send_markdown(qtbot, window, MESSAGE)
    body = window.transcript.cards[0].body
    line, header = _line_height(body), _fixed_sizes(body)
    assert header == [8.0, 8.0]  # "python" and "Copy", at 100 %
    composer = window.composer.edit.font().pointSizeF()

    _zoom(qtbot, window, Qt.Key.Key_Plus)
    assert window.prefs.text_scale == 110
    assert window.statusBar().currentMessage() == "Text size 110 %"
    assert _drawn_size(body) == pytest.approx(_base_size() * 1.1)
    assert _line_height(body) > line  # drawn larger, not only asked to be
    assert _fixed_sizes(body) == pytest.approx([8.8, 8.8])  # the header too
    assert window.composer.edit.font().pointSizeF() == pytest.approx(composer * 1.1)
    assert body.code_blocks == ("x = 1",)  # still copyable

    _zoom(qtbot, window, Qt.Key.Key_Equal)  # Ctrl+= too, without Shift
    assert window.prefs.text_scale == 125
    _zoom(qtbot, window, Qt.Key.Key_Minus)
    assert window.prefs.text_scale == 110

    _zoom(qtbot, window, Qt.Key.Key_0)
    assert window.prefs.text_scale == 100
    assert window.statusBar().currentMessage() == "Text size 100 %"
    assert _line_height(body) == line and _fixed_sizes(body) == header
    assert window.composer.edit.font().pointSizeF() == composer


def test_the_scale_stops_at_its_ends(qtbot, make_window):
    window = make_window()
    _zoom(qtbot, window, Qt.Key.Key_Minus, times=len(TEXT_SCALES) + 2)
    assert window.prefs.text_scale == TEXT_SCALES[0] == 80
    assert window.statusBar().currentMessage() == "Text size 80 % (the smallest)"
    _zoom(qtbot, window, Qt.Key.Key_Plus, times=len(TEXT_SCALES) + 2)
    assert window.prefs.text_scale == TEXT_SCALES[-1] == 200
    assert window.statusBar().currentMessage() == "Text size 200 % (the largest)"
    assert window.composer.edit.font().pointSizeF() == pytest.approx(_base_size() * 2)


def test_at_the_largest_size_the_messages_still_fit_the_view(qtbot, make_window):
    window = make_window()
    # A usual window (the offscreen screen's default one is narrower than a
    # code header at 200 % in some fonts): the page must not widen in it.
    # Wide enough for the panels to stay at 200 % (they give way to the
    # transcript in a narrower one, test_narrow_window): its width stays.
    window.resize(1700, 800)
    qtbot.wait(50)
    _send_markdown(qtbot, window, MESSAGE)
    transcript = window.transcript
    title = transcript.cards[0].findChild(QLabel, "MessageRole")
    title_size = title.font().pointSizeF()
    widths = [transcript.widget().width(), *(c.width() for c in transcript.cards)]
    for _ in TEXT_SCALES:
        window.zoom_in_action.trigger()
    wait_idle(qtbot, window)
    assert window.prefs.text_scale == 200
    # Only the text grows: a header as large would not fit a narrow column,
    # and would push the card, and the text in it, past the view's edge.
    assert title.font().pointSizeF() == title_size
    qtbot.wait(50)  # the layouts' turn
    assert [transcript.widget().width(), *(c.width() for c in transcript.cards)] == (
        widths
    )


def test_cards_made_later_and_a_streaming_reply_use_the_scale(qtbot, make_window):
    window = make_window()
    window.zoom_in_action.trigger()
    window.zoom_in_action.trigger()  # 125 %
    wait_idle(qtbot, window)
    send(qtbot, window, "hello")
    wanted = pytest.approx(_base_size() * 1.25)
    for card in window.transcript.cards:
        assert _drawn_size(card.body) == wanted

    # A long reply streams in parts, each a body of its own.
    window.transcript.begin_stream(None)
    card = window.transcript.streaming_card
    card.stream_text(LONG + "\n\n```python\nx = 1\n```\n\n" + LONG)
    parts = card.streaming_parts.parts
    assert len(parts) > 1
    # New parts take the size when Qt first shows them (it polishes them then).
    qtbot.waitUntil(lambda: all(part.isVisible() for part in parts))
    for part in parts:
        assert _drawn_size(part) == wanted
    assert any(_fixed_sizes(part) == pytest.approx([10.0, 10.0]) for part in parts)


def test_the_text_size_lasts_to_the_next_start(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "hello")
    _zoom(qtbot, window, Qt.Key.Key_Plus, times=3)  # 110, 125, 150 %
    assert load_preferences(window.db).text_scale == 150
    window.close()

    again = make_window()
    assert again.prefs.text_scale == 150
    body = again.transcript.cards[0].body
    assert _drawn_size(body) == pytest.approx(_base_size() * 1.5)
    assert again.composer.edit.font().pointSizeF() == pytest.approx(_base_size() * 1.5)


def test_the_settings_field_sets_the_size_without_a_reload(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "hello")
    window.zoom_in_action.trigger()
    wait_idle(qtbot, window)
    # A GPU build: without one the dialog reads "auto" GPU layers back as 0,
    # a backend change that reloads the model whatever the text size.
    dialog = SettingsDialog(window.prefs, gpu_supported=True, parent=window)
    qtbot.addWidget(dialog)
    assert dialog.text_scale.currentText() == "110 %"  # as zoomed

    dialog.text_scale.setCurrentIndex(dialog.text_scale.findData(175))
    dialog._on_buttons_accepted()
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    model = window.model_info
    window.apply_preferences(dialog.preferences())
    assert window.presenter.loading_model is None  # no model reload for it
    wait_idle(qtbot, window)
    assert window.model_info is model
    assert window.zoom.scale == 175
    body = window.transcript.cards[0].body
    assert _drawn_size(body) == pytest.approx(_base_size() * 1.75)
    assert load_preferences(window.db).text_scale == 175
    window.zoom_out_action.trigger()  # the zoom goes on from the setting
    assert window.prefs.text_scale == 150


def test_a_reader_higher_up_keeps_their_place(qtbot, make_window):
    window = make_window()
    for n in range(3):
        _send_markdown(qtbot, window, f"Message {n}.\n\n{LONG}")
    transcript = window.transcript
    qtbot.waitUntil(lambda: transcript.verticalScrollBar().maximum() > 0)
    page = transcript.widget()
    card = transcript.cards[2]  # the second question
    bar = transcript.verticalScrollBar()
    bar.setValue(card.mapTo(page, QPoint(0, 0)).y() + card.height() // 2)
    assert not transcript.following

    window.zoom_in_action.trigger()
    window.zoom_in_action.trigger()
    wait_idle(qtbot, window)
    # The middle of the same card is at the top of the view, give or take a line.
    top = card.mapTo(page, QPoint(0, 0)).y()
    assert abs(bar.value() - (top + card.height() // 2)) < 30
    assert not transcript.following


def test_stored_sizes_and_steps(qtbot, make_window):
    assert step_text_scale(100, 1) == 110 and step_text_scale(100, -1) == 90
    assert step_text_scale(200, 1) == 200 and step_text_scale(80, -3) == 80
    assert step_text_scale(130, 1) == 150  # between steps: from the nearest
    db = make_window.open_db()
    for stored in (130, "big", True, None):
        setting_rows.set_setting(db, "text_scale", stored)
        assert load_preferences(db).text_scale == 100
    setting_rows.set_setting(db, "text_scale", 175)
    assert load_preferences(db).text_scale == 175
    db.close()


def test_rendered_html_follows_the_font(qapp):
    html = render_markdown(MESSAGE, QColor("white")).html
    made_with = _base_size()
    scaled, sized = scale_html(html, made_with * 2)
    assert sized and f"font-size:{made_with:g}pt" not in scaled
    assert "font-size:16pt;" in scaled  # the code header's 8 pt, doubled
    plain, sized = scale_html(
        render_markdown("Just *words*.", QColor("white")).html, 30
    )
    assert not sized and "font-size" not in plain

    # A body made outside the window takes the window's font when put in it.
    holder = QWidget()
    font = holder.font()
    font.setPointSizeF(made_with * 1.5)
    holder.setFont(font)
    body = MessageBody()
    body.set_markdown(MESSAGE, QColor("white"))
    body.setParent(holder)
    assert _fixed_sizes(body) == pytest.approx([12.0, 12.0])
    body.setHtml("<i>…</i>")  # its own HTML: nothing kept to scale again
    font.setPointSizeF(made_with * 2)
    holder.setFont(font)
    assert body.toPlainText() == "…"
