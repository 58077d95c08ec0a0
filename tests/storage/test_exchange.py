"""Export and import: JSON round trips, Markdown reads well, bad files change nothing.

An imported conversation has no tokens and no checkpoints; the tiny model
renders and checkpoints its nodes when they are first visited, and it can be
continued like any other. The CLI commands run in real processes.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage import checkpoint_rows, conversation_rows, exchange, node_rows
from storage.db import open_database
from storage.exchange import ExchangeError
from tests.conftest import run_cli

GREEDY = SamplingParams(temperature=0, max_tokens=12)


def _branching(db) -> int:
    """A conversation with a fork, reasoning, generation settings; its id."""
    conv, root = conversation_rows.create_conversation(db, "Birds", "Answer briefly.")
    question = node_rows.add_node(db, root.id, "user", "Why do *geese* fly in a V?")
    node_rows.add_node(
        db,
        question.id,
        "assistant",
        "To save energy.",
        thinking="Drafting: aerodynamics.",
        generation={"params": {"temperature": 0.7, "seed": 5}, "model": "tiny"},
    )
    second = node_rows.add_node(
        db,
        question.id,
        "assistant",
        "Each bird rides the **upwash** of the one ahead.",
        status="stopped",
        generation={"params": {"temperature": 0.2}, "model": "tiny"},
    )
    follow = node_rows.add_node(db, second.id, "user", "And ducks?\n\nTell me.")
    node_rows.add_node(db, root.id, "user", "A different question")
    conversation_rows.set_active_node(db, follow.id)
    return conv.id


def _shape(db, conversation_id: int) -> list[tuple[Any, ...]]:
    """The tree as (role, text, thinking, status, generation, parent's index)."""
    _conv, nodes = conversation_rows.read_conversation(db, conversation_id)
    index = {node.id: i for i, node in enumerate(nodes)}
    return [
        (
            n.role,
            n.text,
            n.thinking,
            n.status,
            n.generation,
            None if n.parent_id is None else index[n.parent_id],
        )
        for n in nodes
    ]


def _counts(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return {
            table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("conversation", "node", "checkpoint")
        }


# --- round trip ------------------------------------------------------------------


def test_a_conversation_with_two_system_prompts_round_trips(db):
    """A changed system prompt is a second root: both come back, each with
    its branch, and the copy's system prompt is the newest one."""
    original = _branching(db)
    second = conversation_rows.add_root(db, original, "Answer at length.")
    node_rows.add_node(db, second.id, "user", "Why do geese fly south?")
    data = exchange.export_json(db, original)
    result = exchange.import_json(db, json.loads(exchange.dumps_json(data)))
    assert _shape(db, result.conversation_id) == _shape(db, original)
    roots = [s for s in _shape(db, result.conversation_id) if s[0] == "root"]
    assert [r[1] for r in roots] == ["Answer briefly.", "Answer at length."]
    copy_ = conversation_rows.get_conversation(db, result.conversation_id)
    assert copy_.system_prompt == "Answer at length."


def test_json_round_trip_is_equal_in_structure_and_text(db):
    original = _branching(db)
    data = exchange.export_json(db, original)
    # Through text, as a file would carry it.
    result = exchange.import_json(db, json.loads(exchange.dumps_json(data)))
    assert result.conversation_id != original and result.node_count == 6
    assert _shape(db, result.conversation_id) == _shape(db, original)
    source = conversation_rows.get_conversation(db, original)
    copy_ = conversation_rows.get_conversation(db, result.conversation_id)
    # The copy's title says it is one (once: see test_import_messages.py).
    assert (copy_.title, copy_.system_prompt) == ("Birds (imported)", "Answer briefly.")
    assert copy_.created_at == source.created_at
    # It reopens where the original was left: the same place in the tree.
    _c, old_nodes = conversation_rows.read_conversation(db, original)
    _c, new_nodes = conversation_rows.read_conversation(db, result.conversation_id)
    old_index = [n.id for n in old_nodes].index(source.active_node_id)
    assert new_nodes[old_index].id == copy_.active_node_id
    # And exporting the copy gives the same file, but for the ids and title.
    again = exchange.export_json(db, result.conversation_id)
    assert again["title"] == "Birds (imported)"
    assert _without_ids(again) == _without_ids({**data, "title": again["title"]})


def _without_ids(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data.pop("active")
    for node in data["nodes"]:
        node.pop("id")
        node.pop("parent")
    return data


def test_imported_nodes_have_no_tokens_and_no_checkpoints(db):
    data = exchange.export_json(db, _branching(db))
    result = exchange.import_json(db, data)
    _conv, nodes = conversation_rows.read_conversation(db, result.conversation_id)
    assert all(n.tokens == () and n.vocab_id is None for n in nodes)
    assert all(n.span_text is None for n in nodes)
    assert checkpoint_rows.checkpointed_nodes(db, [n.id for n in nodes], 1) == {}


def test_json_holds_what_the_format_promises(db):
    data = exchange.export_json(db, _branching(db))
    assert (data["format"], data["version"]) == ("arbor-conversation", 1)
    assert data["title"] == "Birds" and data["system_prompt"] == "Answer briefly."
    reply = data["nodes"][2]
    assert reply["role"] == "assistant" and reply["thinking"].startswith("Drafting")
    assert reply["generation"]["params"]["temperature"] == 0.7
    assert reply["generation"]["model"] == "tiny"
    assert reply["created_at"].endswith("+00:00")
    assert not any("tokens" in node for node in data["nodes"])


def test_interrupted_replies_come_in_as_stopped(db):
    data = exchange.export_json(db, _branching(db))
    data["nodes"][2]["status"] = "interrupted"
    data["nodes"][3]["status"] = "generating"
    result = exchange.import_json(db, data)
    statuses = [row[3] for row in _shape(db, result.conversation_id)]
    assert statuses[2:4] == ["stopped", "stopped"]


def test_string_ids_and_a_missing_active_node_are_fine(db):
    data = {
        "format": "arbor-conversation",
        "version": 1,
        "nodes": [
            {"id": "r", "parent": None, "role": "root", "text": ""},
            {"id": "q", "parent": "r", "role": "user", "text": "Hi"},
            {"id": "a", "parent": "q", "role": "assistant", "text": "Hello"},
        ],
    }
    result = exchange.import_json(db, data)
    conversation = conversation_rows.get_conversation(db, result.conversation_id)
    assert conversation.title == "New conversation (imported)"
    assert conversation.system_prompt is None
    _conv, nodes = conversation_rows.read_conversation(db, result.conversation_id)
    assert conversation.active_node_id == nodes[0].id
    assert [n.text for n in nodes] == ["", "Hi", "Hello"]


# --- Markdown -----------------------------------------------------------------


def test_markdown_is_the_active_path(db):
    conversation = _branching(db)
    text = exchange.export_markdown(db, conversation)
    assert text == (
        "# Birds\n\n"
        "## System\n\nAnswer briefly.\n\n"
        "## You\n\nWhy do *geese* fly in a V?\n\n"
        "## Assistant (tiny)\n\nEach bird rides the **upwash** of the one ahead.\n\n"
        "## You\n\nAnd ducks?\n\nTell me.\n"
    )
    assert "different question" not in text and "To save energy" not in text


def test_markdown_of_another_node_folds_the_reasoning(db):
    conversation = _branching(db)
    _conv, nodes = conversation_rows.read_conversation(db, conversation)
    first_reply = nodes[2]
    text = exchange.export_markdown(db, conversation, first_reply.id)
    assert text.endswith(
        "## Assistant (tiny)\n\n<details>\n<summary>Thinking</summary>\n\n"
        "Drafting: aerodynamics.\n\n</details>\n\nTo save energy.\n"
    )
    other, _root = conversation_rows.create_conversation(db, "Other", None)
    with pytest.raises(ExchangeError, match="not part of conversation"):
        exchange.export_markdown(db, other.id, first_reply.id)


# --- bad files ------------------------------------------------------------------


def _valid() -> dict[str, Any]:
    return {
        "format": "arbor-conversation",
        "version": 1,
        "title": "T",
        "nodes": [
            {"id": 1, "parent": None, "role": "root", "text": ""},
            {"id": 2, "parent": 1, "role": "user", "text": "Hi"},
            {"id": 3, "parent": 2, "role": "assistant", "text": "Hello"},
        ],
    }


def _spoiled(change) -> Any:
    data = _valid()
    result = change(data)
    return data if result is None else result


BAD_DATA = {
    "a list": (lambda d: [d], "not in Arbor's format"),
    "a string": (lambda d: "hello", "not in Arbor's format"),
    "another format": (
        lambda d: d.update(format="chat-export"),
        "not in Arbor's format",
    ),
    "no format": (lambda d: d.pop("format") and None, "not in Arbor's format"),
    "a newer version": (lambda d: d.update(version=2), "version 2"),
    "version true": (lambda d: d.update(version=True), "version is true"),
    "no nodes": (lambda d: d.update(nodes=[]), '"nodes"'),
    "nodes not a list": (lambda d: d.update(nodes={"1": {}}), '"nodes"'),
    "a node not an object": (lambda d: d["nodes"].append("x"), "node #4"),
    "a node without id": (lambda d: d["nodes"][1].pop("id") and None, '"id"'),
    "a float id": (lambda d: d["nodes"][1].update(id=2.5), '"id"'),
    "a missing parent": (lambda d: d["nodes"][2].update(parent=9), "parent 9"),
    "a root below a message": (
        lambda d: d["nodes"].append({"id": 4, "parent": 2, "role": "root", "text": ""}),
        "cannot follow",
    ),
    "a message without a parent": (
        lambda d: d["nodes"].append(
            {"id": 4, "parent": None, "role": "user", "text": "hi"}
        ),
        'must have the role "root"',
    ),
    "no root": (lambda d: d["nodes"][0].update(parent=3), "has none"),
    "a cycle": (
        lambda d: d["nodes"].extend(
            [
                {"id": 4, "parent": 5, "role": "user", "text": "a"},
                {"id": 5, "parent": 4, "role": "assistant", "text": "b"},
            ]
        ),
        "cycle",
    ),
    "a duplicate id": (
        lambda d: d["nodes"].append(
            {"id": 2, "parent": 1, "role": "user", "text": "again"}
        ),
        "Two nodes",
    ),
    "an unknown role": (lambda d: d["nodes"][1].update(role="system"), '"system"'),
    "a root with a parent role": (lambda d: d["nodes"][0].update(role="user"), "root"),
    "two user turns in a row": (
        lambda d: d["nodes"][2].update(role="user"),
        "alternate",
    ),
    "a reply to the root": (
        lambda d: d["nodes"][1].update(role="assistant"),
        "alternate",
    ),
    "text not a string": (lambda d: d["nodes"][1].update(text=["Hi"]), "not text"),
    "no text": (lambda d: d["nodes"][1].pop("text") and None, "not text"),
    "thinking not a string": (lambda d: d["nodes"][2].update(thinking=3), "not text"),
    "a lone surrogate": (lambda d: d["nodes"][1].update(text="\ud800"), "surrogate"),
    "a title not a string": (lambda d: d.update(title=5), '"title"'),
    "an unknown status": (lambda d: d["nodes"][2].update(status="lost"), '"lost"'),
    "generation not an object": (
        lambda d: d["nodes"][2].update(generation=[1]),
        '"generation"',
    ),
    "a bad date": (lambda d: d["nodes"][1].update(created_at="yesterday"), "ISO"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_is_refused_and_changes_nothing(db, case: str):
    _branching(db)
    before = _counts(db.path)
    change, message = BAD_DATA[case]
    with pytest.raises(ExchangeError, match=re.escape(message)) as info:
        exchange.import_json(db, _spoiled(change))
    assert "\n" not in str(info.value)
    assert _counts(db.path) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe{not utf-8", "not UTF-8"),
        (b'{"format": "arbor-conversation", ', "damaged: it ends too early"),
        (b"", "it is empty"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_unreadable_files_are_refused(db, tmp_path: Path, content: bytes, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    before = _counts(db.path)
    with pytest.raises(ExchangeError, match=message):
        exchange.import_json(db, exchange.read_json_file(path))
    assert _counts(db.path) == before


def test_a_missing_file_is_refused_with_its_path(db, tmp_path: Path):
    path = tmp_path / "gone.json"
    with pytest.raises(ExchangeError, match=r"Could not read .*gone\.json: No such"):
        exchange.import_json(db, exchange.read_json_file(path))


def test_an_export_the_disk_refuses_names_the_path_and_leaves_nothing(tmp_path: Path):
    # A folder in the way of the file: the system refuses the final rename.
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("x")
    with pytest.raises(ExchangeError, match=r"Could not write .*taken: "):
        exchange.write_text_file(target, "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_files_over_the_limit_are_refused_unread(db, tmp_path: Path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_bytes(json.dumps(_valid()).encode())
    monkeypatch.setattr(exchange, "MAX_IMPORT_BYTES", 64)
    with pytest.raises(ExchangeError, match="at most 0 MB"):
        exchange.import_json(db, exchange.read_json_file(path))


def test_a_failing_write_leaves_nothing_half_imported(db, monkeypatch):
    # The whole tree is one transaction: a failure on the last node rolls
    # back the conversation and the nodes before it.
    data = exchange.export_json(db, _branching(db))
    before = _counts(db.path)
    original = conversation_rows.Node
    calls = {"n": 0}

    def node(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == len(data["nodes"]):
            raise OSError(28, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(conversation_rows, "Node", node)
    with pytest.raises(OSError):
        exchange.import_json(db, data)
    monkeypatch.undo()
    assert _counts(db.path) == before


# --- continuing an imported conversation on the tiny model -----------------------


def test_imported_conversation_restores_and_continues(tmp_path: Path, tiny_model):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        data = exchange.export_json(db, _branching(db))
        result = exchange.import_json(db, data)
        with LlamaEngine(tiny_model, BackendSettings(n_ctx=2048)) as engine:
            service = ConversationService(db, engine)
            _conv, nodes = conversation_rows.read_conversation(
                db, result.conversation_id
            )
            stopped_reply = nodes[3]
            stats = service.restore(stopped_reply.id)
            assert stats.reprocessed_tokens > 0  # no checkpoint yet: rendered
            path = service.path(stopped_reply.id)
            assert all(n.tokens and n.vocab_id == engine.vocab_id for n in path)
            sizes = checkpoint_rows.checkpointed_nodes(
                db, [n.id for n in path], service.profile_id
            )
            assert set(sizes) == {n.id for n in path}
            # A second visit restores from those checkpoints.
            service.restore(nodes[0].id)
            again = service.restore(stopped_reply.id)
            assert again.reprocessed_tokens == 0 and again.restored_tokens > 0
            # And the conversation goes on under an imported reply.
            reply = service.send(stopped_reply.id, "Go on", GREEDY)
            tail = service.path(reply.assistant_node)
            assert [n.role for n in tail][-2:] == ["user", "assistant"]
            assert [n.text for n in tail][:4] == [
                "Answer briefly.",
                "Why do *geese* fly in a V?",
                "Each bird rides the **upwash** of the one ahead.",
                "Go on",
            ]
            # Spans follow one another with no gap: one context.
            for above, below in itertools.pairwise(tail):
                assert below.start_pos <= above.end_pos
    finally:
        db.close()


# --- the CLI ------------------------------------------------------------------------


def test_cli_export_import_round_trip(arbor, data_dir: Path, tmp_path: Path):
    root = arbor("new", "--system", "Be short.", "--title", "Cli")["node"]
    reply = arbor("send", root, "Hello there", "--max-tokens", "6", "--seed", "1")
    out = tmp_path / "conv.json"
    written = arbor("export", 1, "--format", "json", "--out", out)
    assert written["format"] == "json" and written["bytes"] == out.stat().st_size
    imported = arbor("import", out)
    assert imported["conversation"] == 2 and imported["nodes"] == 3
    tree = arbor("tree", 2)["nodes"]
    assert [(n["role"], n["text"]) for n in tree] == [
        ("root", "Be short."),
        ("user", "Hello there"),
        ("assistant", reply["text"]),
    ]
    assert all(n["tokens"] == 0 for n in tree)
    # Markdown to stdout, of the active path.
    shown = run_cli("--data-dir", data_dir, "export", "2", "--format", "markdown")
    assert shown.returncode == 0
    assert shown.stdout.startswith(
        "# Cli (imported)\n\n## System\n\nBe short.\n\n## You\n\n"
    )
    # The imported copy continues like any other conversation.
    again = arbor("send", imported["active_node"], "More", "--max-tokens", "4")
    assert again["assistant_node"] > imported["active_node"]
    hits = arbor("search", "hello")["hits"]
    assert {h["conversation"] for h in hits} == {1, 2}
    assert all("[Hello]" in h["snippet"] for h in hits)


def test_cli_import_errors_are_one_line(data_dir: Path, tmp_path: Path):
    run_cli("--data-dir", data_dir, "new").json  # noqa: B018 - creates the db
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    for path, needle in [
        (bad, "bad.json is not a conversation exported by Arbor"),
        (tmp_path / "missing.json", "No such file"),
    ]:
        result = run_cli("--data-dir", data_dir, "import", path)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1 and needle in result.stderr
        assert "Traceback" not in result.stderr
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert len(listed) == 1
    usage = run_cli("--data-dir", data_dir, "export", "1", "--node", "1")
    assert usage.returncode == 2 and "--node is for --format markdown" in usage.stderr


def test_tool_turns_round_trip_and_read_in_markdown(db):
    from storage import tool_use

    call = {"id": "call_1", "name": "get_time", "arguments": "{}"}
    tools = [{"type": "function", "function": {"name": "get_time"}}]
    data = {
        "format": exchange.FORMAT,
        "version": exchange.VERSION,
        "title": "Clock",
        "client": "openai-python",
        "origin": "local server",
        "nodes": [
            {"id": 1, "parent": None, "role": "root", "text": "",
             "tool_use": tool_use.offering(tools)},
            {"id": 2, "parent": 1, "role": "user", "text": "Time?"},
            {"id": 3, "parent": 2, "role": "assistant", "text": "",
             "tool_use": tool_use.calling([call])},
            {"id": 4, "parent": 3, "role": "tool", "text": "12:00",
             "tool_use": tool_use.answering("call_1", "get_time")},
            {"id": 5, "parent": 4, "role": "assistant", "text": "Noon."},
        ],
    }  # fmt: skip
    imported = exchange.import_json(db, data)
    exported = exchange.export_json(db, imported.conversation_id)
    assert exported["client"] == "openai-python"
    assert [(n["role"], n["tool_use"]) for n in exported["nodes"]] == [
        (n["role"], n.get("tool_use")) for n in data["nodes"]
    ]
    again = exchange.import_json(db, exported)
    assert exchange.export_json(db, again.conversation_id)["nodes"][2]["tool_use"] == (
        tool_use.calling([call])
    )
    markdown = exchange.export_markdown(
        db, imported.conversation_id, exported["nodes"][-1]["id"]
    )
    assert "Calls `get_time` with `{}`" in markdown
    assert "## Tool (get_time)\n\n12:00" in markdown
    # A tool's result follows a reply that called, never a user's message.
    broken = copy.deepcopy(data)
    broken["nodes"][3]["parent"] = 2
    with pytest.raises(ExchangeError, match="tool"):
        exchange.import_json(db, broken)
