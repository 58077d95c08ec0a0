"""The layout of tests/ (issue 42): each test module sits in the folder of
the source package it tests, and every source module is named by a test.

A test of ``app/<package>/…`` lives in ``tests/<package>/``, one of
``storage/``, ``tools/`` or ``packaging/`` in the folder of that name, one of
``app/preferences.py`` in ``tests/preferences/``; the Qt layer's (``app/qt``)
in ``tests/ui/``; suites that cross every layer (exactness, faults, real
models, the import rules) in ``tests/system/``. Modules that are not tests
live in ``tests/helpers/``. A module is named when a test module imports it
or spells its dotted name or its path; the modules named by none are listed
below, each with the way it is tested all the same.
"""

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# Folders a test module may live in, beyond app's packages (but qt).
OTHER_FOLDERS = {"storage", "tools", "packaging", "preferences", "ui", "system"}

# Modules no test module names, each with where it is exercised instead.
INDIRECT = {
    "app.backend.devices": (
        "inside LlamaEngine (app.backend.engine), which tests/backend/ drives"
    ),
    "app.backend.integer_ranges": (
        "inside app.backend.grammars (tests/backend/test_grammar_sampling.py)"
    ),
    "app.backend.model_file": (
        "inside LlamaEngine (app.backend.engine), which tests/backend/ drives"
    ),
    "app.backend.model_meta": (
        "inside LlamaEngine (app.backend.engine), which tests/backend/ drives"
    ),
    "app.backend.native_log": (
        "inside LlamaEngine (app.backend.engine), which tests/backend/ drives"
    ),
    "app.backend.offload_plan": (
        "inside LlamaEngine (app.backend.engine), which tests/backend/ drives;"
        " its arithmetic through tests/backend/test_placement.py"
    ),
    "app.backend.worker_survey": (
        "`arbor workers`, run by tests/cli/test_worker_survey.py"
    ),
    "app.bench.alternatives": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.command": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.errors": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.machine": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.markdown": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.measure": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.move_breakdown": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.overhead": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.report_json": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.results": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.runner": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.sibling_switch": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.storage_cost": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.bench.targets": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.cli.arguments": (
        "the `arbor` command line, run as a process (run_cli) by tests/cli/ and others"
    ),
    "app.cli.bench_command": "`arbor bench`, run by tests/bench/test_bench.py",
    "app.cli.chat_command": "`arbor chat`, run by tests/system/test_edges.py only",
    "app.cli.chat_repl": "`arbor chat`, run by tests/system/test_edges.py only",
    "app.cli.conversation_commands": (
        "the `arbor` command line, run as a process (run_cli) by tests/cli/ and others"
    ),
    "app.cli.interrupt": (
        "Ctrl+C under `arbor serve` and `arbor worker`"
        " (tests/server/test_server.py, tests/backend/test_worker.py)"
    ),
    "app.cli.library_commands": "`arbor models`, run by tests/library/test_library.py",
    "app.cli.output": (
        "the `arbor` command line, run as a process (run_cli) by tests/cli/ and others"
    ),
    "app.cli.parser": (
        "the `arbor` command line, run as a process (run_cli) by tests/cli/ and others"
    ),
    "app.cli.serve_command": "`arbor serve`, run by tests/server/",
    "app.cli.session": (
        "the `arbor` command line, run as a process (run_cli) by tests/cli/ and others"
    ),
    "app.cli.tool_commands": "`arbor tools`, run by tests/mcp/test_mcp_cli.py",
    "app.cli.worker": "`arbor worker`, run by tests/backend/test_worker.py",
    "app.conversation.generation": (
        "inside ConversationService (app.conversation.service)"
    ),
    "app.conversation.logprobs": (
        "the server's logprobs, through app.server.requests (tests/server/)"
    ),
    "app.conversation.profile_difference": (
        "inside app.conversation.context_sync, itself named only by"
        " tests/system/test_layering.py"
    ),
    "app.conversation.prompt_completion": (
        "`/v1/completions`, run by tests/server/test_server_completions.py"
    ),
    "app.library.errors": (
        "the library's failures, as `arbor models` says them (tests/library/)"
    ),
    "app.library.file_hashes": (
        "inside app.library.download (tests/library/test_catalog_pins.py)"
    ),
    "app.platform.launch": (
        "how the CLI and the window start a worker (tests/cli/test_cli_worker_lost.py)"
    ),
    "app.platform.ports": (
        "the server's port, through app.preferences and `arbor serve` (tests/server/)"
    ),
    "app.qt.local_server": (
        "part of the window, built whole by tests/ui/ (make_window)"
        " (tests/ui/test_local_server.py)"
    ),
    "app.qt.runtime": (
        "app.qt's own start-up, imported by app/qt/__init__.py for tests/ui/"
    ),
    "app.qt.views.chrome.about": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.chrome.download_status": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.chrome.window_actions": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.dialogs.engine_lost": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.dialogs.local_server": (
        "part of the window, built whole by tests/ui/ (make_window)"
        " (tests/ui/test_local_server.py)"
    ),
    "app.qt.views.dialogs.sampling_form": (
        "inside the conversation settings (tests/ui/test_conversation_settings.py)"
    ),
    "app.qt.views.dialogs.search": (
        "part of the window, built whole by tests/ui/ (make_window)"
        " (tests/ui/test_search.py)"
    ),
    "app.qt.views.elided_label": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.library.button_row": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.library.starter_offer": (
        "part of the window, built whole by tests/ui/ (make_window)"
        " (tests/ui/test_starter_offer.py)"
    ),
    "app.qt.views.theme": "part of the window, built whole by tests/ui/ (make_window)",
    "app.qt.views.transcript.composer": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.transcript.transcript_layout": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.tree.conversation_delegate": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.views.tree.sidebar": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.workers.engine_thread": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.workers.threads": (
        "part of the window, built whole by tests/ui/ (make_window)"
    ),
    "app.qt.workers.worker_check": (
        "part of the window, built whole by tests/ui/ (make_window)"
        " (tests/ui/test_settings_workers.py)"
    ),
    "app.runner.tool_sessions": "inside JobRunner (tests/runner/test_runner_tools.py)",
    "app.server.text_completions": (
        "`/v1/completions`, run by tests/server/test_server_completions.py"
    ),
    "app.server.tool_requests": (
        "tools in requests, run by tests/server/test_server_tools.py"
    ),
    "app.window.model_session": (
        "the presenter's parts (app.window.presenter), driven by tests/window/"
        " and tests/ui/"
    ),
    "app.window.navigation": (
        "the presenter's parts (app.window.presenter), driven by tests/window/"
        " and tests/ui/"
    ),
    "app.window.reply_in_flight": (
        "the presenter's parts (app.window.presenter), driven by tests/window/"
        " and tests/ui/"
    ),
    "app.window.reply_requests": (
        "the presenter's parts (app.window.presenter), driven by tests/window/"
        " and tests/ui/"
    ),
    "app.window.shown_conversation": (
        "the presenter's parts (app.window.presenter), driven by tests/window/"
        " and tests/ui/"
    ),
    "app.window.view": "the presenter's view protocol, which tests/window/ record",
    "storage.checkpoint_refs": (
        "inside app.conversation's checkpoint reads"
        " (tests/backend/test_restore_path.py)"
    ),
    "storage.counters": (
        "through conversation_rows' counts (tests/storage/test_counters.py)"
    ),
    "storage.lookup": "inside the row modules (storage.node_rows, checkpoint_rows, …)",
}


def _source_modules() -> set[str]:
    """Every module of app/ and storage/ by dotted name, packages' faces
    (``__init__``) and ``__main__`` left out."""
    found: set[str] = set()
    for top in ("app", "storage"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name in ("__init__.py", "__main__.py"):
                continue
            found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def _test_modules() -> list[Path]:
    """Every test module under tests/."""
    return sorted(TESTS.rglob("test_*.py"))


def _names_in(path: Path) -> set[str]:
    """The dotted names a test module imports, a ``from`` import's names
    included (``from app.backend import engine`` names the module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@cache
def _named() -> frozenset[str]:
    """The source modules some test module names."""
    modules = _source_modules()
    named: set[str] = set()
    for path in _test_modules():
        if path == Path(__file__).resolve():
            continue  # its list names what no test names
        text = path.read_text("utf-8")
        imported = _names_in(path)
        for module in modules - named:
            spelled = re.compile(
                rf"(?<![\w.]){re.escape(module)}(?![\w])"
                rf"|{re.escape(module.replace('.', '/'))}\.py"
            )
            if module in imported or spelled.search(text):
                named.add(module)
    return frozenset(named)


def test_every_module_is_named_by_a_test_or_listed() -> None:
    """A new module gets a test that names it, or a line here saying why not."""
    missing = _source_modules() - _named() - set(INDIRECT)
    assert not missing, f"modules no test names: {sorted(missing)}"


def test_the_list_of_indirect_modules_holds_no_stale_line() -> None:
    """A listed module that is gone, or that a test now names, leaves the list."""
    stale = set(INDIRECT) - (_source_modules() - _named())
    assert not stale, f"listed but gone or named by a test: {sorted(stale)}"


def test_every_test_module_lives_in_its_package_folder() -> None:
    """No test module lies flat in tests/ or in a folder no package matches."""
    app_packages = {
        p.name
        for p in (ROOT / "app").iterdir()
        if (p / "__init__.py").exists() and p.name != "qt"
    }
    allowed = app_packages | OTHER_FOLDERS
    misplaced = [
        str(path.relative_to(ROOT))
        for path in _test_modules()
        if path.parent.parent != TESTS or path.parent.name not in allowed
    ]
    assert not misplaced, f"test modules outside a package's folder: {misplaced}"


def test_every_test_folder_is_a_package() -> None:
    """Each folder has an ``__init__.py``: tests import each other as
    ``tests.<folder>.<module>``, and two folders may hold the same name."""
    lacking = [
        str(folder.relative_to(ROOT))
        for folder in TESTS.iterdir()
        if folder.is_dir()
        and folder.name not in ("data", "__pycache__")
        and not (folder / "__init__.py").exists()
    ]
    assert not lacking, f"test folders without __init__.py: {lacking}"
