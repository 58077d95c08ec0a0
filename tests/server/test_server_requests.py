"""The server's request checks, and stop strings as a reply's text meets
them, without a server or a model."""

from __future__ import annotations

import pytest

from app.backend.reasoning import NO_REASONING, ReasoningSplitter
from app.conversation.turn_markers import ReplyText
from app.server.requests import DEFAULT_MAX_TOKENS, BadRequest, parse_chat_request


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
    assert chat.sampling.max_tokens == 5 and chat.sampling.stop == ("\n",)
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
        (_body(n=9), "n"),
        (_body(n=0), "n"),
        (_body(tools=[{"type": "function"}]), "tools[0]"),
        (_body(tools={"type": "function"}), "tools"),
        (_body(tool_choice="required"), "tool_choice"),
        (_body(functions=[{"name": "f"}]), "functions"),
        (_body(response_format={"type": "xml"}), "response_format"),
        (_body(response_format={"type": "json_schema"}), "response_format"),
        (_body(top_logprobs=2), "top_logprobs"),
        (_body(logprobs=True, top_logprobs=21), "top_logprobs"),
        (
            _body(messages=[{"role": "user", "content": "a"}, {"role": "tool"}]),
            "messages[1]",
        ),
        (
            _body(
                messages=[
                    {"role": "user", "content": "a"},
                    {"role": "tool", "tool_call_id": "x", "content": "r"},
                ]
            ),
            "messages[1]",
        ),
        (_body(stop=["a"] * 5), "stop"),
    ],
)
def test_what_is_refused_names_its_parameter(body: object, param: str | None) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_chat_request(body)
    assert refused.value.param == param
    assert str(refused.value)


def _reply_text(stops: tuple[str, ...]) -> tuple[ReplyText, list[str]]:
    shown: list[str] = []
    text = ReplyText(
        ("<|im_end|>",),
        stops,
        ReasoningSplitter(NO_REASONING),
        lambda pieces: shown.extend(piece for _channel, piece in pieces),
    )
    return text, shown


def test_a_stop_string_split_across_tokens_is_caught() -> None:
    text, shown = _reply_text(("END",))
    cuts = [text.push(token, special=False) for token in (b"Hello E", b"N", b"D x")]
    # The token where it begins goes; what it held before the stop is kept.
    assert cuts == [None, None, 0]
    assert text.kept == "Hello " and text.stopped_by_string
    text.finish()  # the reply ends there (the splitter holds a trailing space)
    assert "".join(shown) == "Hello " == text.splitter.answer


def test_a_stop_string_inside_a_token_keeps_the_text_before_it() -> None:
    text, shown = _reply_text(("\n",))
    assert text.push(b"One", special=False) is None
    assert text.push(b" two.\nThree", special=False) == 1
    assert text.kept == " two." and "".join(shown) == "One two."


def test_text_held_back_is_shown_when_it_was_no_stop() -> None:
    text, shown = _reply_text(("END",))
    for token in (b"Hello EN", b"ough", b"E"):
        assert text.push(token, special=False) is None
    assert "".join(shown) == "Hello ENough"  # "E" may still begin "END"
    assert text.finish() is None
    assert "".join(shown) == "Hello ENoughE" and not text.stopped_by_string


def test_a_turn_marker_is_no_stop_string() -> None:
    text, shown = _reply_text(("END",))
    assert text.push(b"Done.<|im_", special=False) is None
    assert text.push(b"end|>", special=False) == 0
    assert text.kept == "Done." and not text.stopped_by_string
    assert "".join(shown) == "Done."


def test_a_character_split_before_the_stop_is_kept_whole() -> None:
    # "é" is two bytes in two tokens, the second also holding the stop: the
    # text kept starts with the token of the character's first byte, so that
    # it stands alone as tokens of its own.
    text, shown = _reply_text(("\n",))
    assert text.push(b"caf\xc3", special=False) is None
    assert text.push(b"\xa9\n", special=False) == 0
    assert text.kept == "café"
    assert text.finish() is None
    assert "".join(shown) == "café"


def test_tool_turns_and_options_in_arbor_terms() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,  # a client's extra key: not part of the start
        },
    }
    chat = parse_chat_request(
        _body(
            messages=[
                {"role": "user", "content": "Time?"},
                {"role": "assistant", "content": "Checking."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            # Some clients send the arguments as an object.
                            "function": {"name": "get_time", "arguments": {}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
            ],
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            parallel_tool_calls=False,
            n=2,
            logprobs=True,
        )
    )
    # Text and calls of one reply are one turn; each result its own.
    assert [(t.role, t.text, t.calls) for t in chat.turns] == [
        ("user", "Time?", ()),
        (
            "assistant",
            "Checking.",
            ({"id": "call_1", "name": "get_time", "arguments": "{}"},),
        ),
        ("tool", "12:00", ()),
    ]
    assert (chat.turns[-1].call_id, chat.turns[-1].name) == ("call_1", "get_time")
    assert chat.tools.tools == (
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    )
    assert (chat.tools.choice, chat.tools.parallel) == ("get_time", False)
    assert (chat.n, chat.logprobs) == (2, 0)


def test_a_last_assistant_turn_is_a_prefill() -> None:
    chat = parse_chat_request(
        _body(
            messages=[
                {"role": "user", "content": "Story?"},
                {"role": "assistant", "content": "Once"},
            ],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "object"}},
            },
        )
    )
    assert [t.role for t in chat.turns] == ["user"] and chat.prefill == "Once"
    assert chat.output.json and chat.output.schema == {"type": "object"}
