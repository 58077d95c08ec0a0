"""Every reference template through the real stack, compared in tokens.

``test_template_folding`` checks node-by-node rendering against the whole
rendering in text; this runs each of llama.cpp's reference templates (the
llama-cpp-python sdist's ``models/templates``) on a tiny model through the
real backend and conversation service, three rounds with and without a
system prompt, non-ASCII text included, and asserts that the context held
when each reply starts is, token for token, llama.cpp's tokenization of the
template's render of the whole path. In this byte-level vocabulary most
templates' markers are plain text, so the seams between spans are where
tokenizing apart and tokenizing the whole can differ.
"""

from __future__ import annotations

import hashlib

import pytest

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage.db import open_database
from tests.helpers import template_corpus
from tests.helpers.scripted import ScriptedEngine, held_context, rendered_context
from tests.helpers.tiny_model import write_tiny_model

PARAMS = SamplingParams(temperature=0, max_tokens=60)
ROUNDS = [
    ("Hello, who are you?", "I am a test model."),
    ("Grüße aus Köln — 世界?", "Gut, danke!"),
    ("Third question", "Third answer."),
]
# Some templates' default system prompts and tool instructions run to a few
# thousand byte-level tokens.
N_CTX = 16384


@pytest.mark.parametrize("name", sorted(template_corpus.reference_templates()))
def test_context_tokens_are_llama_cpps_tokens_of_the_render(tmp_path, name):
    source = template_corpus.reference_templates()[name]
    key = hashlib.sha256(name.encode()).hexdigest()[:12]
    model = write_tiny_model(tmp_path / f"{key}.gguf", chat_template=source)
    db = open_database(tmp_path / "arbor.sqlite3")
    engine = ScriptedEngine(model, BackendSettings(n_ctx=N_CTX, n_threads=1))
    try:
        assert engine.info.chat_format == "gguf", engine.info.chat_format_note
        service = ConversationService(db, engine)
        (eos,) = engine.tokenize("</s>")
        for system in (None, "Be brief."):
            _conversation, node = service.new_conversation(system)
            for question, answer in ROUNDS:
                engine.script = [*engine.tokenize(answer), eos]
                reply = service.send(node, question, PARAMS)
                path = service.path(reply.assistant_node)
                assert held_context(path) == rendered_context(engine, system, path), (
                    system,
                    question,
                )
                node = reply.assistant_node
    finally:
        engine.close()
        db.close()
