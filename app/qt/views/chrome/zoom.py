"""``TextZoom``: the conversation's text size, larger or smaller in steps.

Zoom in, Zoom out and Actual size (View menu, Ctrl++, Ctrl+-, Ctrl+0) step
through ``TEXT_SCALES`` and store the result as the ``text_scale``
preference, which the Settings dialog sets too. The window calls
``set_scale`` with it whenever its preferences change, so the two ways agree,
and the size lasts from one start to the next.

What it scales is what is read and written: the text of the transcript's
messages (their Markdown, code blocks, reasoning, a streaming reply's parts)
and the composer's editor. The message bodies take their font from a style
sheet on the transcript, which Qt applies to every body in it, those of cards
made later included, with no list of them kept here; a body then lays its
text out again (``MessageBody``: no Markdown is read again). The rest keeps
the system's size: the cards' headers, the conversation list, the tree and
the status bar. Scaled too (a font on the whole window, or on the whole
transcript), they grew wider with their text and squeezed the messages,
which were to grow: at 150 % in a 720-pixel-wide window a card's header no
longer fitted its column, and the text below it was cut off at the right.
The side panels give way instead, when the transcript would keep fewer than
``READING_CHARS`` characters of the larger text a line (``PanelSplitter``).

The transcript's text grows or shrinks above what is read, so the reader's
place is kept: the card at the top of the view and how far into it, as a
share of its height; a transcript that follows the newest text goes on
following it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPoint
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QStatusBar, QWidget

from app.preferences import TEXT_SCALES, Preferences, step_text_scale
from app.qt.views.chrome.window_layout import PanelSplitter
from app.qt.views.transcript.composer import Composer
from app.qt.views.transcript.transcript import TranscriptView

# How long the status bar says the new size.
MESSAGE_MS = 2000


class PreferenceSaver(Protocol):
    """The presenter's step the zoom takes (``WindowPresenter`` has it)."""

    def save_preferences(self, prefs: Preferences) -> None:
        """Use ``prefs`` now, and store them."""


class ZoomedWindow(Protocol):
    """What the zoom reads and scales on its window (``MainWindow`` has it):
    named here so that the zoom, which the window makes, does not import the
    window back."""

    @property
    def prefs(self) -> Preferences:
        """The preferences in use; ``text_scale`` is the size asked for."""

    @property
    def presenter(self) -> PreferenceSaver:
        """Where a chosen size is stored."""

    @property
    def transcript(self) -> TranscriptView:
        """The messages whose text is scaled."""

    @property
    def composer(self) -> Composer:
        """Its editor's text is scaled too."""

    @property
    def splitter(self) -> PanelSplitter:
        """The panels that give way to larger text."""

    def statusBar(self) -> QStatusBar:  # Qt's name: QMainWindow has it
        """Where the new size is said."""


def scaled_font(base: QFont, scale: int) -> QFont:
    """``base`` at ``scale`` percent of its size (points, or pixels if so set)."""
    font = QFont(base)
    if base.pointSizeF() > 0:
        font.setPointSizeF(base.pointSizeF() * scale / 100)
    else:
        font.setPixelSize(max(1, round(base.pixelSize() * scale / 100)))
    return font


def body_style(font: QFont) -> str:
    """A style sheet that gives message bodies ``font``'s size (see the top)."""
    size = (
        f"{font.pointSizeF():.4g}pt"
        if font.pointSizeF() > 0
        else f"{font.pixelSize()}px"
    )
    return f"#MessageBody, #ThinkingBody {{ font-size: {size}; }}"


def text_size_message(scale: int) -> str:
    """What the status bar says of ``scale``, and of an end of the range."""
    if scale == TEXT_SCALES[-1]:
        return f"Text size {scale} % (the largest)"
    if scale == TEXT_SCALES[0]:
        return f"Text size {scale} % (the smallest)"
    return f"Text size {scale} %"


class TextZoom(QObject):
    """The size of the window's conversation text (the ``text_scale`` preference).

    Parameters
    ----------
    window
        The window to scale.
    parent
        The Qt parent (the window itself).
    """

    def __init__(self, window: ZoomedWindow, parent: QObject) -> None:
        super().__init__(parent)
        self._window = window
        self.scale = 100  # what the window shows

    def zoom_in(self) -> None:
        """One step larger (up to the largest)."""
        self._choose(step_text_scale(self._window.prefs.text_scale, 1))

    def zoom_out(self) -> None:
        """One step smaller (down to the smallest)."""
        self._choose(step_text_scale(self._window.prefs.text_scale, -1))

    def actual_size(self) -> None:
        """The system's text size."""
        self._choose(100)

    def set_scale(self, scale: int) -> None:
        """Show the conversation's text at ``scale`` percent, keeping the reading place.

        Called whenever the preferences change: nothing happens unless the
        scale did.
        """
        if scale == self.scale:
            return
        place = self._reading_place()
        self.scale = scale
        # At 100 % they take the system's font again (no rule, an empty font),
        # so a system change of font reaches them as before.
        font = QFont() if scale == 100 else scaled_font(QGuiApplication.font(), scale)
        self._window.transcript.setStyleSheet(body_style(font) if scale != 100 else "")
        self._window.composer.edit.setFont(font)
        # Larger text needs a wider transcript: the side panels give way
        # sooner (``PanelSplitter``).
        self._window.splitter.set_reading_font(font)
        if place is not None:
            self._restore(*place)

    def _choose(self, scale: int) -> None:
        window = self._window
        if scale != window.prefs.text_scale:
            # Stored like any preference that needs no model reload; the
            # presenter tells the window, which calls ``set_scale``.
            window.presenter.save_preferences(replace(window.prefs, text_scale=scale))
        # Said at the ends too: a key that did nothing says why.
        window.statusBar().showMessage(text_size_message(scale), MESSAGE_MS)

    def _reading_place(self) -> tuple[QWidget, float] | None:
        """The card at the top of the transcript's view and how far down it
        the view begins (a share of its height); None when following."""
        transcript = self._window.transcript
        if transcript.following:
            return None
        view = transcript.viewport()
        for card in transcript.cards:
            if not card.isVisible():
                continue
            y = card.mapTo(view, QPoint(0, 0)).y()  # above the view: negative
            if y + card.height() > 0:
                return card, -y / max(1, card.height())
        return None

    def _restore(self, card: QWidget, share: float) -> None:
        transcript = self._window.transcript
        # The bodies' new heights are set at once; the layouts that place the
        # cards by them wait for the event loop: run them now, to measure.
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        y = card.mapTo(transcript.viewport(), QPoint(0, 0)).y()
        bar = transcript.verticalScrollBar()
        bar.setValue(bar.value() + y + round(share * card.height()))
