"""Architecture rules: only app/backend imports llama_cpp; storage and the Qt-free
packages never import PySide6."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QT_FREE = ["storage", "app/backend", "app/conversation", "app/bench"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def _python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in (ROOT / folder).rglob("*.py")]


def test_only_the_backend_imports_llama_cpp():
    offenders = [
        str(p.relative_to(ROOT))
        for p in _python_files("app", "storage")
        if "llama_cpp" in _imports(p) and "app/backend" not in p.as_posix()
    ]
    assert offenders == []


def test_qt_free_layers_do_not_import_qt():
    offenders = [
        str(p.relative_to(ROOT))
        for p in _python_files(*QT_FREE)
        if "PySide6" in _imports(p)
    ]
    assert offenders == []


def test_storage_does_not_import_the_app():
    offenders = [
        str(p.relative_to(ROOT))
        for p in _python_files("storage")
        if "app" in _imports(p)
    ]
    assert offenders == []


def test_rules_see_the_files():
    # Guard against the checks above passing because they found nothing.
    assert len(_python_files("app/backend")) >= 5
    assert len(_python_files("storage")) >= 4
