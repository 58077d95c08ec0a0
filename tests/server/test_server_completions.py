"""``/v1/completions`` (a raw prompt continued) through the ``openai``
client against ``arbor serve`` on 127.0.0.1, on the tiny model."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.conftest import run_cli
from tests.server.test_server import serving


def test_a_prompt_is_continued_whole_and_streamed(
    data_dir: Path, tiny_model: Path
) -> None:
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        whole = client.completions.create(
            model="text-davinci-003",
            prompt="Once upon a time",
            max_tokens=6,
            temperature=0,
            extra_body={"repeat_penalty": 1.0},
        )
        pieces = list(
            client.completions.create(
                model="m",
                prompt="Once upon a time",
                max_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"repeat_penalty": 1.0},
            )
        )
        default = client.completions.create(model="m", prompt="Hello", temperature=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="m", prompt="a", suffix="b")
    assert whole.object == "text_completion" and whole.model == "tiny"
    (choice,) = whole.choices
    assert choice.finish_reason in ("stop", "length") and choice.text
    assert whole.usage.completion_tokens <= 6 and whole.usage.prompt_tokens > 4
    # Greedy: the stream is the same continuation, piece by piece.
    assert "".join(p.choices[0].text for p in pieces if p.choices) == choice.text
    assert pieces[-1].usage.completion_tokens == whole.usage.completion_tokens
    # Without max_tokens a completion is a few words (OpenAI's 16).
    assert default.usage.completion_tokens <= 16
    assert refused.value.body["param"] == "suffix"
    # A raw prompt is no conversation: nothing was stored.
    assert run_cli("--data-dir", data_dir, "list").json["conversations"] == []


def test_a_chat_goes_on_from_its_checkpoints_after_a_completion(
    data_dir: Path, tiny_model: Path
) -> None:
    messages = [{"role": "user", "content": "Name a river."}]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = client.chat.completions.create(
            model="m", messages=messages, max_tokens=5, temperature=0
        )
        client.completions.create(model="m", prompt="Unrelated text", max_tokens=5)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And a lake?"},
        ]
        second = client.chat.completions.create(
            model="m", messages=messages, max_tokens=5, temperature=0
        )
    stats = second.model_extra["arbor"]["stats"]
    # The completion emptied the context: the chat's came back restored.
    assert stats["reprocessed_tokens"] == 0
    assert (
        stats["restored_tokens"]
        == first.model_extra["arbor"]["stats"]["context_tokens"]
    )
