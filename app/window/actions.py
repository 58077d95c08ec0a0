"""The window's actions in one table: text, shortcuts, when enabled, handler.

Qt-free, so the presenter can say which actions are enabled and a test can
read the table without a window. ``app/qt/views/window_actions.py`` turns each
row into a ``QAction`` named ``<name>_action`` on the window, whose
``triggered`` signal calls ``handler``: an attribute path from the window
(``"presenter.new_conversation"`` or a method of the window itself when the
action first asks the user something).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# How many replies "Regenerate last reply N times" generates together (a reply's
# own regenerate menu offers 2 to 4).
DEFAULT_ALTERNATIVES = 3
# The sign of "Regenerate last reply x3", here and in a reply card's own menu.
TIMES = "\N{MULTIPLICATION SIGN}"


class When(Enum):
    """When an action is enabled."""

    ALWAYS = "always"  # also while a reply is generated: reading, browsing
    WRITABLE = "writable"  # idle, and the database can be written


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
    handler: str
    shortcuts: tuple[str, ...] = ()
    icon: str | None = None
    when: When = When.ALWAYS
    checkable: bool = False


ACTIONS: tuple[ActionSpec, ...] = (
    # File
    ActionSpec(
        "new",
        "&New conversation",
        "presenter.new_conversation",
        ("Ctrl+N",),
        "plus",
        When.WRITABLE,
    ),
    ActionSpec(
        "new_with_prompt",
        "New conversation with system &prompt…",
        "ask_new_conversation",
        ("Ctrl+Shift+N",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "import",
        "&Import conversation…",
        "ask_import",
        when=When.WRITABLE,
    ),
    ActionSpec("export", "&Export conversation…", "ask_export"),
    ActionSpec(
        "open_model",
        "&Open model file…",
        "ask_model_file",
        ("Ctrl+O",),
        "folder",
        When.WRITABLE,
    ),
    ActionSpec("models", "&Models…", "open_models", ("Ctrl+Shift+M",), "model"),
    ActionSpec("quit", "&Quit", "close", ("Standard:Quit",)),
    # Conversation
    ActionSpec("send", "&Send", "send", ("Ctrl+Return", "Ctrl+Enter"), "send"),
    ActionSpec("stop", "S&top generating", "stop", ("Esc",), "stop"),
    ActionSpec(
        "rename",
        "&Rename conversation…",
        "ask_rename_current",
        ("F2",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "conversation_settings",
        "System &prompt and sampling…",
        "ask_conversation_settings",
        ("Ctrl+Shift+P",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "delete_conversation",
        "&Delete conversation…",
        "ask_delete_current",
        icon="delete",
        when=When.WRITABLE,
    ),
    ActionSpec("filter", "&Filter conversations", "focus_filter", ("Ctrl+F",)),
    ActionSpec("find", "F&ind in all conversations…", "open_search", ("Ctrl+Shift+F",)),
    ActionSpec(
        "regenerate",
        "&Regenerate last reply",
        "presenter.regenerate_last",
        ("Ctrl+R",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "alternatives",
        f"Regenerate last reply {TIMES}{DEFAULT_ALTERNATIVES} (side by side)",
        "presenter.alternatives_last",
        ("Ctrl+Shift+R",),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "reply",
        "Generate a reply to the selected &message",
        "presenter.reply_to_active",
        ("Ctrl+Shift+Return", "Ctrl+Shift+Enter"),
        when=When.WRITABLE,
    ),
    ActionSpec(
        "edit_last",
        "&Edit last message",
        "edit_last_message",
        ("Ctrl+E",),
        when=When.WRITABLE,
    ),
    # Tools
    ActionSpec(
        "settings",
        "&Settings…",
        "open_settings",
        ("Ctrl+,",),
        "settings",
        When.WRITABLE,
    ),
    ActionSpec(
        "storage", "S&torage…", "open_storage", icon="storage", when=When.WRITABLE
    ),
    ActionSpec("local_server", "&Local server…", "open_local_server"),
    # View
    ActionSpec(
        "tree",
        "Show conversation &tree",
        "show_tree_panel",
        ("Ctrl+T",),
        checkable=True,
    ),
    ActionSpec(
        "focus_tree", "&Focus conversation tree", "focus_tree", ("Ctrl+Shift+T",)
    ),
    # Ctrl+= as well: "+" is Shift+= on many keyboards, and zooming in should
    # not need Shift (browsers take both).
    ActionSpec("zoom_in", "Zoom &in", "zoom.zoom_in", ("Ctrl++", "Ctrl+=")),
    ActionSpec("zoom_out", "Zoom &out", "zoom.zoom_out", ("Ctrl+-",)),
    ActionSpec("actual_size", "&Actual size", "zoom.actual_size", ("Ctrl+0",)),
    # Go: a keyboard walk through the tree from the active node.
    ActionSpec(
        "previous_branch",
        "&Previous branch",
        "presenter.previous_branch",
        ("Alt+Left",),
    ),
    ActionSpec(
        "next_branch",
        "&Next branch",
        "presenter.next_branch",
        ("Alt+Right",),
    ),
    ActionSpec(
        "parent_message",
        "P&arent message",
        "presenter.parent_message",
        ("Alt+Up",),
    ),
    ActionSpec(
        "child_message",
        "Newest &child message",
        "presenter.child_message",
        ("Alt+Down",),
    ),
    # Help
    ActionSpec("shortcuts", "&Keyboard shortcuts", "show_shortcuts"),
    ActionSpec("about", "&About Arbor", "show_about"),
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
        ("tree", "focus_tree", None, "zoom_in", "zoom_out", "actual_size"),
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
    "Ctrl++ (or Ctrl+=) / Ctrl+-\tlarger / smaller text\n"
    "Ctrl+0\ttext at its actual size\n"
    "Del\t(in the tree) delete a branch"
)
