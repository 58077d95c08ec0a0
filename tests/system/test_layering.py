"""Architecture rules, one table: who may import what. Qt lives under app/qt
only, libllama under app/backend only, storage knows nothing of the app, and the
window side (widgets, Qt models, the Qt-free window logic) names only the
backend's values, drives no engine and writes nothing itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The window side: it reads snapshots and submits jobs; the engine worker,
# through the conversation service, does every write.
WINDOW_SIDE = ["app/qt/views", "app/qt/models", "app/window"]
# What drives the engine or writes: only the workers (app/qt/workers) and the
# CLI may use it; the window side reaches it through a job.
ENGINE_MODULES = (
    "app.conversation.service",
    "app.conversation.context_sync",
    "app.conversation.checkpoint_writer",
    "app.qt.workers.engine_worker",
    "app.runner",
)
# (where, what it may not import, why). "Where" is a list of folders and
# files; a name is forbidden with everything below it ("app.backend" forbids
# "app.backend.engine"). Type-only imports count too: the rule is about names.
CONTRACTS: list[tuple[list[str], tuple[str, ...], str]] = [
    (["app", "storage"], ("PySide6",), "Qt is imported under app/qt only"),
    (["app", "storage"], ("llama_cpp",), "only app/backend loads libllama"),
    (["storage"], ("app",), "storage knows nothing of the app"),
    (WINDOW_SIDE, ("app.backend",), "the window names the backend's values only"),
    # The GUI thread never loads libllama, so the window is on screen first
    # (tests/system/test_import_weight.py runs it).
    (["app/qt/gui.py"], ("app.backend",), "the engine thread loads the backend"),
    (WINDOW_SIDE, ENGINE_MODULES, "the window drives the engine through jobs"),
    (["app", "storage"], ("aiohttp",), "only app/server speaks HTTP"),
    # MCP servers (processes, HTTP) are reached through the SDK in one place;
    # the conversation's tool loop talks to a runner protocol instead.
    (["app", "storage"], ("mcp",), "only app/mcp speaks to tool servers"),
    # The jobs run in a child process too, which must start without Qt.
    (["app/runner"], ("app.qt",), "the runner runs without Qt"),
    # The jobs are the contract between the window and the runner, below
    # both: the runner takes them from app/jobs, never from the window.
    (["app/runner"], ("app.window",), "the runner stands below the window"),
    (
        ["app/jobs"],
        ("app.window", "app.qt", "app.runner"),
        "the jobs name neither who asks nor who runs them",
    ),
]
# Where a contract does not reach, by the forbidden name.
EXEMPT = {
    "PySide6": ("app/qt/",),
    "llama_cpp": ("app/backend/",),
    "aiohttp": ("app/server/",),
    "mcp": ("app/mcp/",),
}
# The backend's plain values, which the window names: their one home is beside
# the backend that consumes them; they load no native code
# (tests/system/test_import_weight.py). Nothing else of app.backend.
BACKEND_VALUES = (
    "app.backend.values",
    "app.backend.settings",
    "app.backend.offload",
    "app.backend.errors",
)

# The storage modules of rows (one concern each) and, of their functions,
# those that write (checked against the files below, so that a new writing
# function must be listed here).
ROW_MODULES = (
    "storage.conversation_rows",
    "storage.node_rows",
    "storage.tree_reads",
    "storage.checkpoint_rows",
    "storage.text_search",
    "storage.setting_rows",
    "storage.space",
)
STORAGE_WRITES = frozenset(
    {
        "release_space",
        "create_conversation",
        "add_root",
        "update_nodes",
        "save_checkpoints",
        "set_conversation_sampling",
        "rename_conversation",
        "delete_conversation",
        "set_reasoning",
        "set_context_size",
        "set_conversation_model",
        "set_active_node",
        "add_node",
        "update_node",
        "delete_subtree",
        "mark_interrupted_generations",
        "ensure_profile",
        "save_checkpoint",
        "touch_checkpoints",
        "load_checkpoint",  # marks the checkpoint as recently used
        "delete_checkpoints",
        "evict_checkpoints",
        "insert_conversation",
        "set_setting",
        "set_settings",
    }
)
# storage/exchange.py: importing a conversation writes it. (And
# app.preferences.save_preferences writes the settings.)
EXCHANGE_WRITES = frozenset({"import_json"})


def _modules(path: Path) -> set[str]:
    """Full names of the modules ``path`` imports (``from a import b``: ``a.b``
    as well as ``a``, since ``b`` may be a module)."""
    names: set[str] = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _storage_names(path: Path) -> set[str]:
    """The names of the storage row modules that ``path`` uses."""
    return set().union(*(_names_used(path, module) for module in ROW_MODULES))


def _row_functions() -> dict[str, ast.FunctionDef]:
    """The top-level functions of the storage row modules, by name."""
    return {
        node.name: node
        for module in ROW_MODULES
        for node in _parse(ROOT / (module.replace(".", "/") + ".py")).body
        if isinstance(node, ast.FunctionDef)
    }


def _names_used(path: Path, module: str) -> set[str]:
    """The names of ``module`` that ``path`` uses: imported from it, or read as
    attributes of the module under whatever name it was bound."""
    tree = _parse(path)
    package, _dot, name = module.rpartition(".")
    used: set[str] = set()
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == package:
            aliases.update(
                alias.asname or alias.name for alias in node.names if alias.name == name
            )
        elif isinstance(node, ast.Import):
            aliases.update(
                alias.asname or alias.name
                for alias in node.names
                if alias.name == module
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
            used.add(node.attr)
    return used


def _storage_writes_found() -> set[str]:
    """Functions of the storage row modules that open a write transaction,
    free space, or call one that does (found in the source)."""
    functions = _row_functions()

    def calls(function: ast.FunctionDef) -> set[str]:
        names = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                func = node.func
                names.add(func.attr if isinstance(func, ast.Attribute) else "")
                names.add(func.id if isinstance(func, ast.Name) else "")
        return names

    writes = {
        name
        for name, function in functions.items()
        if "write" in calls(function)
        or any(ast.unparse(d) == "releases_space" for d in function.decorator_list)
    }
    while True:  # callers of writers write too
        more = {n for n, f in functions.items() if calls(f) & writes} - writes
        if not more:
            return {name for name in writes if not name.startswith("_")}
        writes |= more


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _python_files(*places: str) -> list[Path]:
    files = []
    for place in places:
        path = ROOT / place
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def _breaks(module: str, forbidden: tuple[str, ...]) -> str | None:
    """The forbidden name ``module`` is or lies under, if any. The backend's
    value modules are allowed where only ``app.backend`` is forbidden."""
    for name in forbidden:
        allowed = name == "app.backend" and _under(module, BACKEND_VALUES)
        if _under(module, (name,)) and not allowed:
            return name
    return None


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


@pytest.mark.parametrize(
    ("places", "forbidden", "why"), CONTRACTS, ids=[c[2] for c in CONTRACTS]
)
def test_contract(places, forbidden, why):
    offenders = {}
    for path in _python_files(*places):
        where = path.relative_to(ROOT).as_posix()
        broken = {
            name
            for module in _modules(path)
            if (name := _breaks(module, forbidden))
            and not where.startswith(EXEMPT.get(name, ()))
        }
        if broken:
            offenders[where] = sorted(broken)
    assert offenders == {}, why


def test_the_window_side_writes_nothing_itself():
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            (_storage_names(p) & STORAGE_WRITES)
            | (_names_used(p, "storage.exchange") & EXCHANGE_WRITES)
            | (_names_used(p, "app.preferences") & {"save_preferences"})
        )
        for p in _python_files(*WINDOW_SIDE)
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_list_of_storage_writes_is_complete():
    found = _storage_writes_found()
    assert found - STORAGE_WRITES == set(), "list these in STORAGE_WRITES"
    defined = set(_row_functions())
    assert STORAGE_WRITES - defined == set(), "no longer in storage's row modules"


def test_rules_see_the_files():
    # Guard against the checks above passing because they found nothing.
    assert len(_python_files("app/backend")) >= 5
    assert len(_python_files("storage")) >= 4
    assert len(_python_files(*WINDOW_SIDE)) >= 30
    assert len(_python_files("app/jobs")) >= 2
    assert len(_python_files("app/runner")) >= 4
    # The write check finds writes where they are (the dialogs read).
    assert _storage_names(ROOT / "app/conversation/service.py") & STORAGE_WRITES
    assert {"list_conversations", "total_checkpoint_bytes"} <= _storage_names(
        ROOT / "app/qt/views/dialogs/storage.py"
    )
    assert "import_json" in _names_used(
        ROOT / "app/conversation/service.py", "storage.exchange"
    )
    assert len(_storage_writes_found()) >= 15
    # The contracts see imports where they are, and only the exempt escape.
    assert "PySide6.QtWidgets" in _modules(ROOT / "app/qt/views/chrome/main_window.py")
    assert "app.window.presenter.WindowPresenter" in _modules(
        ROOT / "app/qt/views/chrome/main_window.py"
    )
    assert "app.jobs" in _modules(ROOT / "app/runner/job_runner.py")
    assert _breaks("app.window.presenter", ("app.window",)) == "app.window"
    assert _breaks("app.backend.engine", ("app.backend",)) == "app.backend"
    assert _breaks("app.backendish", ("app.backend",)) is None
    assert _breaks("app.backend.values.ModelInfo", ("app.backend",)) is None
    # ...and only there: storage may not import them.
    assert _breaks("app.backend.values", ("app",)) == "app"
