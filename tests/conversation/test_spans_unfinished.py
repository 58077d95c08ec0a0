"""An unfinished reply from another tokenizer is closed once, when re-rendered."""

from __future__ import annotations

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage import node_rows
from storage.db import open_database


def test_a_rerendered_interrupted_reply_is_closed_once(tmp_path, tiny_model):
    db = open_database(tmp_path / "db.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings(n_threads=1)) as engine:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation()
        user = node_rows.add_node(db, root, "user", "Hello?", vocab_id="another")
        reply = node_rows.add_node(
            db,
            user.id,
            "assistant",
            "Half an ans",
            vocab_id="another",
            status="interrupted",
        )
        for _visit in range(2):
            service.restore(reply.id)
            node = node_rows.get_node(db, reply.id)
            assert node.status == "stopped"
            footer = engine.chat_format.footer
            assert node.span_text.endswith(footer)
            assert not node.span_text.endswith(footer + footer)
    db.close()
