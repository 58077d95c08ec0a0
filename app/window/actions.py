"""The window's actions in one table: text, shortcuts, when enabled, handler.

Qt-free, so the presenter can say which actions are enabled and a test can
read the table without a window. ``app/qt/views/chrome/window_actions.py`` turns each
row into a ``QAction`` named ``<name>_action`` on the window, whose
``triggered`` signal calls what ``handler`` finds on the window: one of the
presenter's steps (``w.presenter.new_conversation``) or a method of the
window itself when the action first asks the user something. The window is
seen as an ``ActionTarget``, so mypy checks every handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

# How many replies "Regenerate last reply N times" generates together (a reply's
# own regenerate menu offers 2 to 4).
DEFAULT_ALTERNATIVES = 3
# The sign of "Regenerate last reply x3", here and in a reply card's own menu.
TIMES = "\N{MULTIPLICATION SIGN}"


class When(Enum):
    """When an action is enabled."""

    ALWAYS = "always"  # also while a reply is generated: reading, browsing
    WRITABLE = "writable"  # idle, and the database can be written


class Zoom(Protocol):
    """The window's text size steps."""

    def zoom_in(self) -> None:
        """One step larger."""

    def zoom_out(self) -> None:
        """One step smaller."""

    def actual_size(self) -> None:
        """Back to the system's size."""


class SidePanels(Protocol):
    """The window's side panels, which the user shows or hides."""

    def show_list(self, shown: bool) -> None:
        """Show or hide the conversation list."""

    def show_tree(self, shown: bool) -> None:
        """Show or hide the conversation tree."""


class PresenterSteps(Protocol):
    """The presenter's steps an action takes as it is (``WindowPresenter``
    has them): named here so that the actions, which the presenter reads,
    do not import the presenter back."""

    def new_conversation(self) -> None:
        """Start a conversation."""

    def regenerate_last(self) -> None:
        """Regenerate the last reply on the active path."""

    def alternatives_last(self) -> None:
        """Regenerate it several times, side by side."""

    def reply_to_active(self) -> None:
        """A reply to the active message of the user's."""

    def previous_branch(self) -> None:
        """Go to the previous sibling."""

    def next_branch(self) -> None:
        """Go to the next sibling."""

    def parent_message(self) -> None:
        """Go to the message above."""

    def child_message(self) -> None:
        """Go to the newest message below."""


class ActionTarget(Protocol):
    """What the handlers find on the window: its presenter, its zoom, and
    the steps that ask the user something (or move the focus) first."""

    @property
    def presenter(self) -> PresenterSteps:
        """The window's Qt-free logic."""

    @property
    def zoom(self) -> Zoom:
        """The text size."""

    @property
    def splitter(self) -> SidePanels:
        """The side panels beside the conversation."""

    def ask_new_conversation(self) -> None:
        """Ask for a system prompt and a title, then start a conversation."""

    def ask_import(self) -> None:
        """Ask for a conversation file and import it."""

    def ask_export(self) -> None:
        """Ask for a file and export the shown conversation to it."""

    def ask_model_file(self) -> None:
        """Ask for a model file and load it."""

    def open_models(self) -> None:
        """Show the Models dialog: recommended, the Hub, installed, downloads."""

    def close(self) -> bool:
        """Close the window (quit)."""

    def send(self) -> None:
        """Send the composer's text and files (or the edit)."""

    def stop(self) -> None:
        """Stop the reply being generated; else leave editing."""

    def ask_rename_current(self) -> None:
        """Ask for a new title of the shown conversation."""

    def ask_conversation_settings(self) -> None:
        """Edit the system prompt and the sampling of the shown conversation."""

    def ask_delete_current(self) -> None:
        """Ask whether to delete the shown conversation."""

    def focus_filter(self) -> None:
        """Put the keyboard in the conversation filter."""

    def open_search(self) -> None:
        """Open the search in all conversations."""

    def edit_last_message(self) -> None:
        """Edit the last user message on the active path."""

    def open_settings(self) -> None:
        """Edit the preferences."""

    def open_storage(self) -> None:
        """Show what checkpoints cost; evict or clear them, set the budget."""

    def open_local_server(self) -> None:
        """Show the local server's switch, URL and request log."""

    def focus_tree(self) -> None:
        """Show the tree and give it the keyboard."""

    def show_shortcuts(self) -> None:
        """List the keyboard shortcuts."""

    def show_about(self) -> None:
        """Say what Arbor is."""


# What an action calls, found on the window: it takes no arguments, or the
# new state for a ``checkable`` one.
Handler = Callable[[ActionTarget], Callable[..., object]]


@dataclass(frozen=True)
class ActionSpec:
    """One action of the window.

    ``shortcuts`` are key sequences in Qt's portable text form; a name
    starting with ``"Standard:"`` is one of Qt's standard keys (the platform's
    own binding, e.g. ``"Standard:Quit"``). A ``checkable`` action is a
    toggle, on at first; its handler gets the new state.
    """

    name: str
    text: str
    handler: Handler
    shortcuts: tuple[str, ...] = ()
    icon: str | None = None
    when: When = When.ALWAYS
    checkable: bool = False


ACTIONS: tuple[ActionSpec, ...] = (
    # File
    ActionSpec(
        "new",
        "&New conversation",
        lambda w: w.presenter.new_conversation,
        ("Ctrl+N",),
        "plus",
        When.WRITABLE,
    ),
    ActionSpec(
        "new_with_prompt",
        "New conversation with system &prompt…",
        lambda w: w.ask_new_conversation,
        ("Ctrl+Shift+N",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "import",
        "&Import conversation…",
        lambda w: w.ask_import,
        when=When.WRITABLE,
    ),
    ActionSpec("export", "&Export conversation…", lambda w: w.ask_export),
    ActionSpec(
        "open_model",
        "&Open model file…",
        lambda w: w.ask_model_file,
        ("Ctrl+O",),
        "folder",
        When.WRITABLE,
    ),
    ActionSpec(
        "models", "&Models…", lambda w: w.open_models, ("Ctrl+Shift+M",), "model"
    ),
    ActionSpec("quit", "&Quit", lambda w: w.close, ("Standard:Quit",)),
    # Conversation
    ActionSpec(
        "send", "&Send", lambda w: w.send, ("Ctrl+Return", "Ctrl+Enter"), "send"
    ),
    ActionSpec("stop", "S&top generating", lambda w: w.stop, ("Esc",), "stop"),
    ActionSpec(
        "rename",
        "Re&name conversation…",
        lambda w: w.ask_rename_current,
        ("F2",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "conversation_settings",
        "System &prompt and sampling…",
        lambda w: w.ask_conversation_settings,
        ("Ctrl+Shift+P",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "delete_conversation",
        "&Delete conversation…",
        lambda w: w.ask_delete_current,
        icon="delete",
        when=When.WRITABLE,
    ),
    ActionSpec(
        "filter", "&Filter conversations", lambda w: w.focus_filter, ("Ctrl+F",)
    ),
    ActionSpec(
        "find",
        "F&ind in all conversations…",
        lambda w: w.open_search,
        ("Ctrl+Shift+F",),
    ),
    ActionSpec(
        "regenerate",
        "&Regenerate last reply",
        lambda w: w.presenter.regenerate_last,
        ("Ctrl+R",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "alternatives",
        f"Regenerate last reply {TIMES}{DEFAULT_ALTERNATIVES} (side &by side)",
        lambda w: w.presenter.alternatives_last,
        ("Ctrl+Shift+R",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "reply",
        "Generate a reply to the selected &message",
        lambda w: w.presenter.reply_to_active,
        ("Ctrl+Shift+Return", "Ctrl+Shift+Enter"),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "edit_last",
        "&Edit last message",
        lambda w: w.edit_last_message,
        ("Ctrl+E",),
        when=When.WRITABLE,
    ),
    # Tools
    ActionSpec(
        "settings",
        "&Settings…",
        lambda w: w.open_settings,
        ("Ctrl+,",),
        "settings",
        When.WRITABLE,
    ),
    ActionSpec(
        "storage",
        "S&torage…",
        lambda w: w.open_storage,
        icon="storage",
        when=When.WRITABLE,
    ),
    ActionSpec("local_server", "&Local server…", lambda w: w.open_local_server),
    # View. The panels also give way by themselves in a narrow window (and
    # come back in a wider one): these say what is shown.
    ActionSpec(
        "list",
        "Show conversation &list",
        lambda w: w.splitter.show_list,
        ("Ctrl+Shift+L",),
        checkable=True,
    ),
    ActionSpec(
        "tree",
        "Show conversation &tree",
        lambda w: w.splitter.show_tree,
        ("Ctrl+T",),
        checkable=True,
    ),
    ActionSpec(
        "focus_tree",
        "&Focus conversation tree",
        lambda w: w.focus_tree,
        ("Ctrl+Shift+T",),
    ),
    # Ctrl+= as well: "+" is Shift+= on many keyboards, and zooming in should
    # not need Shift (browsers take both).
    ActionSpec("zoom_in", "Zoom &in", lambda w: w.zoom.zoom_in, ("Ctrl++", "Ctrl+=")),
    ActionSpec("zoom_out", "Zoom &out", lambda w: w.zoom.zoom_out, ("Ctrl+-",)),
    ActionSpec(
        "actual_size", "&Actual size", lambda w: w.zoom.actual_size, ("Ctrl+0",)
    ),
    # Go: a keyboard walk through the tree from the active node.
    ActionSpec(
        "previous_branch",
        "&Previous branch",
        lambda w: w.presenter.previous_branch,
        ("Alt+Left",),
    ),
    ActionSpec(
        "next_branch",
        "&Next branch",
        lambda w: w.presenter.next_branch,
        ("Alt+Right",),
    ),
    ActionSpec(
        "parent_message",
        "P&arent message",
        lambda w: w.presenter.parent_message,
        ("Alt+Up",),
    ),
    ActionSpec(
        "child_message",
        "Newest &child message",
        lambda w: w.presenter.child_message,
        ("Alt+Down",),
    ),
    # Help
    ActionSpec("shortcuts", "&Keyboard shortcuts", lambda w: w.show_shortcuts),
    ActionSpec("about", "&About Arbor", lambda w: w.show_about),
)

# The menu bar: (title, entries); an entry is an action's name, None for a
# separator, or RECENT_MODELS for the submenu of recently opened models.
RECENT_MODELS = "recent models"
MENUS: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (
        "&File",
        (
            "new",
            "new_with_prompt",
            None,
            "import",
            "export",
            None,
            "open_model",
            RECENT_MODELS,
            "models",
            None,
            "quit",
        ),
    ),
    (
        "&Conversation",
        (
            "send",
            "stop",
            None,
            "rename",
            "conversation_settings",
            "delete_conversation",
            "filter",
            "find",
            None,
            "regenerate",
            "alternatives",
            "reply",
            "edit_last",
        ),
    ),
    ("&Tools", ("settings", "storage", "local_server")),
    (
        "&View",
        ("list", "tree", "focus_tree", None, "zoom_in", "zoom_out", "actual_size"),
    ),
    ("&Go", ("previous_branch", "next_branch", "parent_message", "child_message")),
    ("&Help", ("shortcuts", None, "about")),
)

SHORTCUTS_HELP = (
    "Ctrl+Enter\tsend (Enter inserts a new line)\n"
    "Ctrl+Shift+Enter\ta reply to the selected message of yours, as it is\n"
    "Esc\tstop generating / cancel editing\n"
    "Ctrl+N\tnew conversation\n"
    "Ctrl+Shift+N\tnew conversation with a system prompt\n"
    "Ctrl+O\topen a model file\n"
    "Ctrl+Shift+M\tmodels: recommended, the Hub, installed, downloads\n"
    "Ctrl+,\tsettings\n"
    "Ctrl+F\tfilter conversations\n"
    "Ctrl+Shift+F\tfind in all conversations\n"
    "F2\trename the conversation\n"
    "Ctrl+Shift+P\tits system prompt (a new branch) and sampling, presets\n"
    "Alt+Left / Alt+Right\tprevious / next branch at the nearest fork\n"
    "Alt+Up / Alt+Down\tparent / newest child message\n"
    "Ctrl+R\tregenerate the last reply (a new sibling)\n"
    "Ctrl+Shift+R\tregenerate it 3 times, side by side (three new siblings)\n"
    "Ctrl+E\tedit your last message\n"
    "Ctrl+Shift+T\tfocus the conversation tree\n"
    "Ctrl+T\tshow or hide the conversation tree\n"
    "Ctrl+Shift+L\tshow or hide the conversation list\n"
    "Ctrl++ (or Ctrl+=) / Ctrl+-\tlarger / smaller text\n"
    "Ctrl+0\ttext at its actual size\n"
    "Del\t(in the tree) delete a branch"
)
