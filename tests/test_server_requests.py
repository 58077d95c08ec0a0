"""The server's request checks and stop strings, without a server."""

from __future__ import annotations

import pytest

from app.server.requests import DEFAULT_MAX_TOKENS, BadRequest, parse_chat_request
from app.server.stop_strings import StopScanner


def _body(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_request_in_arbor_terms() -> None:
    chat = parse_chat_request(
        _body(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": "Use French."},
                {"role": "user", "content": [{"type": "text", "text": "Salut"}]},
                {"role": "user", "content": "ça va ?"},
                {"role": "assistant", "content": "Oui."},
                {"role": "user", "content": "Bien."},
            ],
            temperature=0,
            seed=7,
            max_tokens=5,
            stop="\n",
            user="editor",
        )
    )
    assert chat.system == "Be brief.\n\nUse French."
    # Consecutive user messages join: the tree alternates turns.
    assert [(t.role, t.text) for t in chat.turns] == [
        ("user", "Salut\n\nça va ?"),
        ("assistant", "Oui."),
        ("user", "Bien."),
    ]
    assert (chat.sampling.temperature, chat.sampling.seed) == (0.0, 7)
    assert chat.sampling.max_tokens == 5 and chat.stop == ("\n",)
    assert chat.user == "editor" and not chat.stream
    assert parse_chat_request(_body()).sampling.max_tokens == DEFAULT_MAX_TOKENS


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        (_body(messages=[]), "messages"),
        (_body(messages=[{"role": "assistant", "content": "x"}]), "messages"),
        (_body(messages=[{"role": "tool", "content": "x"}]), "messages[0]"),
        (
            _body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
            "messages[0]",
        ),
        (_body(messages=[{"role": "user", "content": "a\x00b"}]), "messages[0]"),
        (_body(messages=[{"role": "user", "content": "   "}]), "messages"),
        (_body(temperature="hot"), "temperature"),
        (_body(temperature=-1), "temperature"),
        (_body(max_tokens=0), "max_tokens"),
        (_body(top_k=1.5), "top_k"),
        (_body(stream="yes"), "stream"),
        (_body(n=3), "n"),
        (_body(tools=[{"type": "function"}]), "tools"),
        (_body(response_format={"type": "json_object"}), "response_format"),
        (_body(stop=["a"] * 5), "stop"),
    ],
)
def test_what_is_refused_names_its_parameter(body: object, param: str | None) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_chat_request(body)
    assert refused.value.param == param
    assert str(refused.value)


def test_a_stop_string_split_across_pieces_is_caught() -> None:
    scanner = StopScanner(("END",))
    shown = [scanner.feed(p) for p in ("Hello E", "N", "D and more")]
    assert "".join(shown) == "Hello "
    assert scanner.stopped and scanner.finish() == ""


def test_text_held_back_is_sent_when_it_was_no_stop() -> None:
    scanner = StopScanner(("END",))
    assert scanner.feed("Hello EN") == "Hello "
    assert scanner.feed("ough") == "ENough"
    assert scanner.feed("E") == ""
    assert scanner.finish() == "E"
    assert not scanner.stopped
