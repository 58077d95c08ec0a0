"""One conversation per client chat (``app/server/client_chats.py`` and the
choice of a conversation in ``app/server/completion.py``).

Through a real ``arbor serve`` on 127.0.0.1 and a real SQLite file on the
tiny model: the ``openai`` client with its defaults (no ``user``, no header),
raw aiohttp requests with Open WebUI's and Arbor's headers, a restart; the
window's list model over what they made.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.platform import paths
from app.server.client_chats import ClientChat, client_name, from_headers
from storage import conversation_listing, conversation_rows
from storage.db import open_database
from storage.values import Origin
from tests.server.test_server import (
    SYSTEM,
    Server,
    _arbor,
    _ask,
    _conversation,
    serving,
)


def _listed(data_dir: Path) -> dict[int, conversation_listing.ConversationRecord]:
    """The conversations a list shows, by id (read as ``arbor list`` does)."""
    records = conversation_listing.read_listing(paths.database_path(data_dir))
    assert records is not None
    return {record.id: record for record in records}


def _post(
    server: Server, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """A chat completion through aiohttp with ``headers``; its JSON body."""

    async def call() -> dict[str, Any]:
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.post(f"{server.base_url}/chat/completions", json=body) as response,
        ):
            assert response.status == 200, await response.text()
            answer: dict[str, Any] = await response.json()
            return answer

    return asyncio.run(call())


def _body(messages: list[dict[str, str]], **options: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": messages,
        "max_tokens": 8,
        "temperature": 0,
        **options,
    }


def _then(
    messages: list[dict[str, str]], answer: dict[str, Any], text: str
) -> list[dict[str, str]]:
    reply = answer["choices"][0]["message"]["content"]
    return [
        *messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": text},
    ]


@pytest.mark.parametrize(
    ("agent", "name"),
    [
        ("OpenAI/Python 1.52.0", "openai-python"),
        ("OpenAI/JS 4.67.3", "openai-node"),
        ("python-httpx/0.27.2", "python-httpx"),
        ("python-requests/2.32.3", "python-requests"),
        ("Python-urllib/3.11", "python-urllib"),
        ("Python/3.11 aiohttp/3.11.18", "python-aiohttp"),
        ("curl/8.5.0", "curl"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36", "web browser"),
        ("llm/0.19 (+https://llm.datasette.io)", "llm"),
        ("", None),
        ("   ", None),
    ],
)
def test_a_user_agent_is_cut_to_the_program_s_name(
    agent: str, name: str | None
) -> None:
    assert client_name(agent) == name


def test_headers_say_the_program_the_chat_and_a_task() -> None:
    owui = from_headers(
        {
            "User-Agent": "Python/3.11 aiohttp/3.11.18",
            "X-OpenWebUI-User-Id": "u-1",
            "X-OpenWebUI-Chat-Id": "c-42",
        }
    )
    assert owui == ClientChat(client="Open WebUI", chat_id="open-webui:c-42")
    named = from_headers(
        {
            "User-Agent": "OpenAI/Python 1.52.0",
            "X-Arbor-Client": " my\x00 tool\n",
            "X-Arbor-Task": "summary",
        }
    )
    assert named == ClientChat(client="my tool", task="summary")
    assert from_headers({}) == ClientChat()
    long = from_headers({"X-Arbor-Client": "x" * 500})
    assert long.client is not None and len(long.client) == 40


def test_each_chat_of_a_client_is_its_own_conversation(
    data_dir: Path, tiny_model: Path
) -> None:
    rivers = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Name three rivers."},
    ]
    owls = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Tell me about owls."},
    ]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = _ask(client, rivers)
        other = _ask(client, owls)  # same system prompt, nothing else shared
        rivers = _conversation(rivers, first, "And three lakes?")
        more = _ask(client, rivers)  # the first chat goes on
        owls = _conversation(owls, other, "Where do they live?")
        then = _ask(client, owls)  # so does the second
        # A client's regenerate: the same messages again.
        again = _ask(client, rivers)
    one, two = _arbor(first)["conversation"], _arbor(other)["conversation"]
    assert one != two
    assert _arbor(more)["conversation"] == _arbor(again)["conversation"] == one
    assert _arbor(then)["conversation"] == two
    # Found in the tree: nothing decoded again but the new turn.
    assert _arbor(more)["matched_turns"] == 2
    assert _arbor(more)["stats"]["reprocessed_tokens"] == 0
    assert _arbor(again)["user_node"] == _arbor(more)["user_node"]
    listed = _listed(data_dir)
    assert set(listed) == {one, two}
    assert listed[one].title == "Name three rivers."
    assert listed[two].title == "Tell me about owls."
    assert {r.client for r in listed.values()} == {"openai-python"}
    assert {r.origin for r in listed.values()} == {Origin.LOCAL_SERVER}


def test_open_webui_chats_are_told_apart_by_their_chat_id(
    data_dir: Path, tiny_model: Path
) -> None:
    # Two chats that open with the same words: the chat id keeps them apart,
    # and each goes on in its own conversation.
    hello = [{"role": "user", "content": "Hello!"}]
    headers = {
        "User-Agent": "Python/3.11 aiohttp/3.11.18",
        "X-OpenWebUI-User-Id": "u-1",
    }
    with serving(data_dir, tiny_model) as server:
        a = _post(server, _body(hello), {**headers, "X-OpenWebUI-Chat-Id": "a"})
        b = _post(server, _body(hello), {**headers, "X-OpenWebUI-Chat-Id": "b"})
        a2 = _post(
            server,
            _body(_then(hello, a, "What can you do?")),
            {**headers, "X-OpenWebUI-Chat-Id": "a"},
        )
    assert a["arbor"]["conversation"] != b["arbor"]["conversation"]
    assert a2["arbor"]["conversation"] == a["arbor"]["conversation"]
    assert a2["arbor"]["matched_turns"] == 2
    listed = _listed(data_dir)
    assert {r.client for r in listed.values()} == {"Open WebUI"}
    assert len(listed) == 2


def test_the_program_is_its_user_agent_or_the_name_it_gives(
    data_dir: Path, tiny_model: Path
) -> None:
    same = [{"role": "user", "content": "What is a B-tree?"}]
    with serving(data_dir, tiny_model) as server:
        curl = _post(server, _body(same), {"User-Agent": "curl/8.5.0"})
        named = _post(
            server,
            _body(same),
            {"User-Agent": "curl/8.5.0", "X-Arbor-Client": "notes-app"},
        )
        # The same chat goes on from the same program only.
        curl2 = _post(
            server, _body(_then(same, curl, "Why?")), {"User-Agent": "curl/8.5.0"}
        )
    listed = _listed(data_dir)
    assert listed[curl["arbor"]["conversation"]].client == "curl"
    assert listed[named["arbor"]["conversation"]].client == "notes-app"
    assert curl["arbor"]["conversation"] != named["arbor"]["conversation"]
    assert curl2["arbor"]["conversation"] == curl["arbor"]["conversation"]


def test_a_chat_whose_system_prompt_changed_stays_in_its_conversation(
    data_dir: Path, tiny_model: Path
) -> None:
    # Open WebUI puts the date in a system prompt that asks for it: the same
    # chat comes with another system prompt the next day. Its first message
    # and reply found under another start: the same conversation, a new start.
    monday = [
        {"role": "system", "content": "Today is Monday."},
        {"role": "user", "content": "Plan my week."},
    ]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = _ask(client, monday)
        tuesday = _conversation(monday, first, "And tomorrow?")
        tuesday[0] = {"role": "system", "content": "Today is Tuesday."}
        later = _ask(client, tuesday)
        # Only the first message shared under another start: a new chat.
        other = _ask(
            client,
            [
                {"role": "system", "content": "You write haiku."},
                {"role": "user", "content": "Plan my week."},
            ],
        )
    conversation = _arbor(first)["conversation"]
    assert _arbor(later)["conversation"] == conversation
    assert _arbor(other)["conversation"] != conversation
    starts = [
        n
        for n in open_conversation_tree(data_dir, conversation)
        if n["parent_id"] is None
    ]
    assert len(starts) == 2


def test_after_a_restart_a_chat_finds_its_conversation(
    data_dir: Path, tiny_model: Path
) -> None:
    messages = [{"role": "user", "content": "Count the moons of Mars."}]
    with serving(data_dir, tiny_model) as server:
        first = _ask(server.client(), messages)
    with serving(data_dir, tiny_model) as server:
        then = _ask(server.client(), _conversation(messages, first, "And Jupiter?"))
    assert _arbor(then)["conversation"] == _arbor(first)["conversation"]
    assert _arbor(then)["stats"]["reprocessed_tokens"] == 0


def test_the_user_field_keeps_one_conversation_per_user(
    data_dir: Path, tiny_model: Path
) -> None:
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        one = _ask(client, [{"role": "user", "content": "First."}], user="ada")
        two = _ask(client, [{"role": "user", "content": "Second."}], user="ada")
        other = _ask(client, [{"role": "user", "content": "First."}], user="bob")
    assert _arbor(one)["conversation"] == _arbor(two)["conversation"]
    assert _arbor(other)["conversation"] != _arbor(one)["conversation"]


def test_the_list_names_the_program_and_hides_scratch(
    data_dir: Path, qapp: Any
) -> None:
    from PySide6.QtCore import Qt

    from app.qt.models.conversation_list import BadgeRole, ConversationListModel

    db = open_database(paths.database_path(data_dir))
    try:
        made, _root = conversation_rows.create_conversation(
            db, "Owls", None, origin=Origin.LOCAL_SERVER, client="openai-python"
        )
        unnamed, _root = conversation_rows.create_conversation(
            db, "Someone", None, origin=Origin.LOCAL_SERVER
        )
        conversation_rows.create_conversation(
            db, "Background task", None, origin=Origin.LOCAL_SERVER_TASK
        )
        typed, _root = conversation_rows.create_conversation(db, "Typed here", None)
        model = ConversationListModel(db)
        model.refresh()
        rows = {
            model.index(row).data(): model.index(row) for row in range(model.rowCount())
        }
        assert set(rows) == {"Owls", "Someone", "Typed here"}
        tip = rows["Owls"].data(Qt.ItemDataRole.ToolTipRole)
        assert tip.startswith("Made through the local server\nBy openai-python\n")
        assert rows["Owls"].data(BadgeRole) == "API"
        assert "\nBy " not in rows["Someone"].data(Qt.ItemDataRole.ToolTipRole)
        assert rows["Typed here"].data(BadgeRole) is None
        # Searching does not find scratch either.
        model.refresh("task")
        assert model.rowCount() == 0
        assert {c.id for c in conversation_rows.list_conversations(db)} == {
            made.id,
            unnamed.id,
            typed.id,
        }
    finally:
        db.close()


def open_conversation_tree(data_dir: Path, conversation: int) -> list[dict[str, Any]]:
    """A conversation's nodes (id, parent, role, text), read with sqlite3."""
    database = paths.database_path(data_dir)
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT id, parent_id, role, text FROM node WHERE conversation_id = ?",
            (conversation,),
        )
        return [dict(row) for row in rows]
