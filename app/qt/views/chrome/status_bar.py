"""``ArborStatusBar``: model, layers, context use, last restore, speed, busy state,
the download under way, and a note when the model has no chat template of its
own.

Its texts never decide the window's width. A plain ``QLabel`` asks for its
whole text as its minimum width, so a long model name or restore figure made
the window wider than a small or scaled screen (1,898 px at 200 %, issue 22)
and widened it whenever a text grew. Each text is a ``ElidedLabel``: it asks
for a few characters at least, paints its text elided to the width it gets,
and then tells the whole text in its tooltip. How many characters each keeps
ranks them: Qt's box layout takes the same number of pixels from every label
until each is down to its minimum, so a label with a higher minimum (the busy
state, the context) keeps its text longest, one with a low minimum (the
restore figures, the template note) gives it up first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QSize
from PySide6.QtWidgets import (
    QProgressBar,
    QStatusBar,
    QWidget,
)

from app.library.catalog import model_name
from app.qt.views.elided_label import ElidedLabel

if TYPE_CHECKING:
    from app.backend.values import ModelInfo


class SyncFigures(Protocol):
    """What moving the context cost (``SyncStats`` and ``ReplyStats`` both fit)."""

    kept_tokens: int
    restored_tokens: int
    reprocessed_tokens: int
    restore_ms: float
    reprocess_ms: float


class ReplyFigures(SyncFigures, Protocol):
    """A reply's figures (``ReplyStats`` fits): the move, the speed, the context."""

    tokens_per_second: float
    context_tokens: int
    n_ctx: int


def summarize_sync(stats: SyncFigures) -> str:
    """How the model got to the message shown, in plain words, e.g.
    "Resumed instantly · 6 ms" (the figures are in ``describe_sync``)."""
    if stats.reprocessed_tokens:
        total = stats.restore_ms + stats.reprocess_ms
        return f"Read {stats.reprocessed_tokens:,} tokens · {total:,.0f} ms"
    if stats.restored_tokens:
        return f"Resumed instantly · {stats.restore_ms:,.0f} ms"
    return "Already in memory"


def describe_sync(stats: SyncFigures) -> str:
    """The figures, e.g. "restored 1,812 tokens from checkpoints in 6 ms"."""
    parts = []
    if stats.restored_tokens:
        parts.append(
            f"restored {stats.restored_tokens:,} tokens from checkpoints "
            f"in {stats.restore_ms:,.0f} ms"
        )
    if stats.reprocessed_tokens:
        parts.append(
            f"reprocessed {stats.reprocessed_tokens:,} tokens "
            f"in {stats.reprocess_ms:,.0f} ms"
        )
    elif stats.restored_tokens:
        parts.append("0 reprocessed")
    if not parts:
        return f"kept {stats.kept_tokens:,} tokens in memory"
    return ", ".join(parts)


CHATML_NOTE = "No usable chat template — using ChatML"
GUESSED_NOTE = "No usable chat template — a guessed format"
CHATML_EXPLANATION = (
    "Arbor writes the conversation in a format guessed from the model's "
    "architecture or vocabulary (ChatML when nothing tells). If the model was "
    "trained on another format its replies may be worse; a base model is not "
    "trained to chat at all. A GGUF of an instruct model with its chat "
    "template built in avoids this."
)


def describe_chat_format(info: ModelInfo) -> str:
    """Which format is used instead of a template, and why, for the tooltip."""
    note = info.chat_format_note or "the model has no usable chat template"
    return f"{note[:1].upper()}{note[1:]}.\n\n{CHATML_EXPLANATION}"


# Context fill levels the meter shows in amber, then red.
CONTEXT_WARN_FRACTION = 0.8
CONTEXT_FULL_FRACTION = 0.95


def context_level(used: int, n_ctx: int) -> str:
    """ "ok", "warn" or "full": how close the conversation is to the context end."""
    fraction = used / n_ctx if n_ctx else 0.0
    if fraction >= CONTEXT_FULL_FRACTION:
        return "full"
    return "warn" if fraction >= CONTEXT_WARN_FRACTION else "ok"


def describe_context(used: int, n_ctx: int) -> str:
    """The context meter's tooltip: what fills it and what to do when it is full."""
    text = f"This branch fills {used:,} of the model's {n_ctx:,} context tokens."
    if context_level(used, n_ctx) != "ok":
        text += (
            "\n\nA reply stops when the context is full. Branch from an earlier "
            "message (click it in the tree), raise the context size in Settings, "
            "or start a new conversation."
        )
    return text


def describe_layers(info: ModelInfo) -> str:
    """Where the model runs, as llama.cpp reported it: "CPU", "GPU: 20/29
    layers" or, on workers, "2 workers: all 31 layers"."""
    if not info.offloaded_layers:
        return "CPU"
    workers = len(info.workers)
    where = f"{workers} worker{'s' * (workers > 1)}" if workers else "GPU"
    if info.offloaded_layers >= info.offloadable_layers:
        return f"{where}: all {info.offloadable_layers} layers"
    return f"{where}: {info.offloaded_layers}/{info.offloadable_layers} layers"


# How many characters (of average width) each status text keeps before it
# gives up space to the others: the higher, the longer it stays whole. With
# every label shown they add up to less than 720 px, the width of a 1440 px
# screen at 200 %: there each label keeps what it is given here.
KEEP_BUSY = 18  # "Loading the model…": what the app is doing now
KEEP_CONTEXT = 22  # "context 3,999 / 4,096…": with the meter, how full it is
KEEP_MODEL = 8
KEEP_DOWNLOAD = 6
# The speed, the layers, the restore figures, the template note keep none:
# "…" at the least, and the whole text in the tooltip.


class ArborStatusBar(QStatusBar):
    """The window's status bar; every figure is a label tests can read.

    The texts on the left say what goes on now (busy state, download); those
    on the right, what is loaded and how the last move and reply went.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)  # indeterminate
        self.busy_bar.setFixedSize(48, 12)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.hide()
        self.busy_label = ElidedLabel("StatusBusy", keep=KEEP_BUSY)
        # A download goes on with the Models dialog closed: it shows here.
        self.download_label = ElidedLabel("StatusDownload", keep=KEEP_DOWNLOAD)
        self.download_label.hide()
        self.model_label = ElidedLabel("StatusModel", "No model loaded", KEEP_MODEL)
        self.layers_label = ElidedLabel("StatusLayers")
        self.context_label = ElidedLabel("StatusContext", keep=KEEP_CONTEXT)
        self.context_meter = QProgressBar()
        self.context_meter.setObjectName("ContextMeter")
        self.context_meter.setFixedSize(64, 8)
        self.context_meter.setTextVisible(False)
        self.context_meter.hide()
        self.restore_label = ElidedLabel("StatusRestore")
        self.speed_label = ElidedLabel("StatusSpeed")
        self.chat_format_label = ElidedLabel("StatusChatFormat", CHATML_NOTE)
        self.chat_format_label.hide()
        self.addWidget(self.busy_bar)
        self.addWidget(self.busy_label)
        self.addWidget(self.download_label)
        for label in (
            self.restore_label,
            self.speed_label,
            self.context_meter,
            self.context_label,
            self.layers_label,
            self.chat_format_label,
        ):
            self.addPermanentWidget(label)
        self.addPermanentWidget(self.model_label)

    def minimumSizeHint(self) -> QSize:
        # The window's width is for its panels to decide: below the labels'
        # minimums the layout squeezes them further (the widest first), so a
        # text that grows, or a label that appears, never widens the window.
        return QSize(0, super().minimumSizeHint().height())

    def set_busy(self, text: str | None) -> None:
        """Show the busy indicator with ``text``, or hide it (None)."""
        self.busy_bar.setVisible(text is not None)
        self.busy_label.setText(text or "")

    def set_download(self, text: str | None) -> None:
        """Show how the download under way goes, or nothing (None)."""
        self.download_label.setVisible(text is not None)
        self.download_label.setText(text or "")

    def set_model(self, info: ModelInfo | None) -> None:
        """Show the loaded model's name and where it runs."""
        fallback = info is not None and info.chat_format != "gguf"
        self.chat_format_label.setVisible(fallback)
        if info is not None and fallback:
            self.chat_format_label.setText(
                CHATML_NOTE if info.chat_format == "chatml" else GUESSED_NOTE
            )
            self.chat_format_label.set_detail(describe_chat_format(info))
        if info is None:
            self.model_label.setText("No model loaded")
            self.model_label.set_detail("")
            self.layers_label.setText("")
            return
        # The name every view gives this model (app.library.naming).
        self.model_label.setText(model_name(info.path, general_name=info.name))
        self.model_label.set_detail(
            f"{info.path}\nstate: {info.state_kind} — {info.state_note}"
        )
        self.layers_label.setText(describe_layers(info))

    def set_context(self, used: int, n_ctx: int) -> None:
        """Show how much of the context window the conversation fills."""
        if not n_ctx:
            return
        level = context_level(used, n_ctx)
        suffix = {"ok": "", "warn": " — nearly full", "full": " — full"}[level]
        self.context_label.setText(f"context {used:,} / {n_ctx:,}{suffix}")
        self.context_meter.setRange(0, n_ctx)
        self.context_meter.setValue(min(used, n_ctx))
        self.context_meter.setProperty("level", level)
        # A dynamic property only restyles once the style is applied again.
        self.context_meter.style().unpolish(self.context_meter)
        self.context_meter.style().polish(self.context_meter)
        self.context_meter.show()
        tooltip = describe_context(used, n_ctx)
        self.context_meter.setToolTip(tooltip)
        self.context_label.set_detail(tooltip)

    def set_restore(self, stats: SyncFigures) -> None:
        """Show how the last move between nodes was done: in plain words, the
        figures on hover."""
        self.restore_label.setText(summarize_sync(stats))
        self.restore_label.set_detail(
            f"{describe_sync(stats)}.\nEvery message is saved with the model's "
            "state after it, so going back to it restores that state instead "
            "of reading the conversation again."
        )

    def clear_restore(self) -> None:
        """Forget the last move's figures: what is shown now was not reached
        by it (a reply since, another model)."""
        self.restore_label.setText("")
        self.restore_label.set_detail("")

    def set_speed(self, tokens_per_second: float) -> None:
        """Show the last reply's generation speed (none: nothing)."""
        self.speed_label.setText(
            f"{tokens_per_second:,.1f} tok/s" if tokens_per_second > 0 else ""
        )

    def clear_figures(self) -> None:
        """Forget the last move's and reply's figures and the context's (another
        conversation is shown: they were about the one before)."""
        self.clear_restore()
        self.speed_label.setText("")
        # The context holds the conversation before until a restore moves it.
        self.context_label.setText("")
        self.context_label.set_detail("")
        self.context_meter.hide()

    def set_progress(self, done: int, total: int) -> None:
        """Fill the busy indicator to ``done`` of ``total`` (0: it only moves)."""
        if total <= 0:
            self.busy_bar.setRange(0, 0)
            return
        self.busy_bar.setRange(0, total)
        self.busy_bar.setValue(min(done, total))

    def set_context_full(self) -> None:
        """The shown branch does not fit the loaded context: say so in place
        of the figures of a branch shown before."""
        self.context_label.setText("context: this branch does not fit")
        self.context_label.set_detail(
            "The messages to this point need more tokens than the loaded "
            "context holds. Branch from an earlier message, raise the context "
            "size in the settings, or continue from a summary."
        )
        self.context_meter.setProperty("level", "full")
        self.context_meter.setValue(self.context_meter.maximum())
        self.context_meter.style().unpolish(self.context_meter)
        self.context_meter.style().polish(self.context_meter)
