"""The tool loop on the real Gemma 3 270M against the real ``mcp-server-time``
(PyPI), over stdio.

Gemma's template has no tool support: its calls use the generic JSON format,
which the grammar holds to the server's schemas. The turn asks first (the
call waits, stored and not run), is approved, runs, and the model answers
the real result. Then, in a fresh engine as after a restart, going back to
the result restores it with nothing reprocessed, and the reply generated
from there has the logits a fresh decode of the stored path gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation import tool_loop
from app.conversation.streams import Streams
from app.conversation.tool_loop import CallStatus, Ending
from app.mcp import config
from app.mcp.client import McpClients
from app.mcp.toolbox import McpToolRunner, build_toolbox
from storage import node_rows, tool_use
from storage.values import Role
from tests.helpers.mcp_servers import TIME_SERVER
from tests.helpers.real_service import opened_service
from tests.helpers.replay import replayed_digest

pytestmark = pytest.mark.gemma3

SETTINGS = BackendSettings(n_ctx=2048, n_threads=2)
CALLING = SamplingParams(max_tokens=96, seed=7, temperature=0.7)
ANSWERING = SamplingParams(max_tokens=12, seed=7, temperature=0.0)


def test_gemma_calls_the_time_server_waits_for_approval_and_resumes_exactly(
    tmp_path: Path, gemma3_models: Any
) -> None:
    model, database = gemma3_models.chat, tmp_path / "arbor.sqlite3"
    server = config.ServerConfig("time", TIME_SERVER)
    with (
        opened_service(database, model, SETTINGS) as service,
        McpClients([server], 30) as clients,
    ):
        assert service.engine is not None
        assert service.engine.chat_format.tool_syntax.kind == "generic"
        toolbox = build_toolbox([server], clients.list_all())
        runner = McpToolRunner(
            clients, toolbox, 30, 2000, lambda text: len(service.count_tokens(text))
        )
        _conversation, start = service.new_conversation(
            None, "time", tools=toolbox.openai_tools()
        )
        turn = tool_loop.send(
            service,
            start,
            "What time is it in Tokyo?",
            CALLING,
            Streams(),
            runner,
            choice="get_current_time",
        )
        # The call asks first: stored with its reply, not run.
        assert turn.ending == Ending.NEEDS_APPROVAL
        (waiting,) = turn.pending
        calling = waiting.reply_node
        (call,) = tool_use.calls_of(node_rows.get_node(service.db, calling).tool_use)
        assert call["name"] == "get_current_time"
        assert "timezone" in json.loads(call["arguments"])
        assert node_rows.child_texts(service.db, calling) == []

        # Approved: the real server answers (or refuses a zone it does not
        # know: the model reads that as the result), and the model goes on.
        approved = tool_loop.answer_calls(
            service,
            calling,
            ANSWERING,
            Streams(),
            runner,
            decide=tool_loop.approve_all,
            step_limit=1,
        )
        record = approved.calls[0]
        assert record.status in (CallStatus.RAN, CallStatus.FAILED)
        result = record.result_node
        assert result is not None
        stored = node_rows.get_node(service.db, result)
        assert stored.role == Role.TOOL and stored.parent_id == calling
        if record.status == CallStatus.RAN:
            assert (
                json.loads(stored.text)["timezone"]
                == json.loads(call["arguments"])["timezone"]
            )
        assert approved.replies, "the model answers the result"
        service.flush_checkpoints()

    # As after a restart: a fresh engine goes back to the result.
    with opened_service(database, model, SETTINGS) as cold:
        restored = cold.restore(result)
        assert restored.reprocessed_tokens == 0 and restored.restored_tokens > 0
        again = cold.reply(result, ANSWERING, Streams())
        assert again.stats.logits_digest == replayed_digest(
            model, cold.path(again.assistant_node), SETTINGS
        )
