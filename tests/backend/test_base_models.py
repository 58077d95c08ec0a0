"""Models without a chat template: the format is guessed, said to be a guess,
and a turn marker the model writes ends its reply — even as plain text.

Through the real backend and conversation service: the real Gemma 3 270M
*base* file (gemma3 architecture → Gemma turns, whose markers are control
tokens of its vocabulary), and tiny models whose vocabulary does or does not
hold ChatML's markers, with the sampler scripted so that the model writes
``<|im_end|>`` and then invents the user's next turn.
"""

from __future__ import annotations

import pytest

from app.backend.chat_format import load
from app.backend.engine import LlamaEngine
from app.backend.values import SamplingParams
from app.conversation.streams import Streams
from tests.helpers.scripted import held_context, rendered_context
from tests.helpers.tiny_model import write_tiny_model

PARAMS = SamplingParams(temperature=0, max_tokens=40)
INVENTED = "Hi there.<|im_end|>\n<|im_start|>user\nAnd now me, the user!"


@pytest.mark.gemma3
def test_gemma_base_model_gets_gemma_turns_and_says_it_is_a_guess(
    gemma3_models, open_service
):
    service = open_service(gemma3_models.base, LlamaEngine)
    info = service.engine.info
    assert info.chat_format == "gemma"
    assert info.chat_format_note == (
        "base model — no chat template; using Gemma turns "
        "(a guess from its architecture, gemma3)"
    )
    engine = service.engine
    (start,) = engine.tokenize("<start_of_turn>")
    (end,) = engine.tokenize("<end_of_turn>")
    assert engine.is_special(start) and engine.is_end_of_generation(end)

    _conv, root = service.new_conversation("Be brief.")
    reply = service.send(root, "What is a tree?", SamplingParams(0, max_tokens=8))
    path = service.path(reply.assistant_node)
    user, opening = path[-2], path[-1]
    # The markers are the vocabulary's control tokens, not text.
    assert start in user.tokens and end in user.tokens
    assert opening.span_text.startswith("<start_of_turn>model\n")
    assert opening.tokens[0] == start
    # The system prompt goes in the first user turn, as Gemma's templates do.
    assert "Be brief.\n\nWhat is a tree?" in user.span_text + path[0].span_text
    assert held_context(path) == rendered_context(engine, "Be brief.", path)


def test_chatml_written_as_text_ends_the_reply_and_invented_turns_go(
    tmp_path, open_service
):
    model = write_tiny_model(
        tmp_path / "plain.gguf", chat_template=None, chatml=False, eot_token="</s>"
    )
    service = open_service(model)
    engine = service.engine
    assert engine.info.chat_format == "chatml"
    assert engine.info.chat_format_note == (
        "base model — no chat template; using ChatML turns "
        "(a guess: nothing in the model names its format)"
    )
    assert len(engine.tokenize("<|im_end|>")) > 1  # plain text here
    eos = engine.tokenize("</s>")[0]

    _conv, node = service.new_conversation(None)
    shown: list[str] = []
    engine.script = [*engine.tokenize(INVENTED), eos]
    reply = service.send(node, "Hello", PARAMS, Streams(on_token=shown.append))
    assert reply.text == "Hi there." == "".join(shown)
    assert reply.stats.stop_reason == "end_of_turn"
    path = service.path(reply.assistant_node)
    opening = path[-1]
    # The reply's span: the opening, what the model wrote before the marker,
    # and the format's own footer; nothing of the invented turn.
    assert opening.span_text == "<|im_start|>assistant\nHi there.<|im_end|>\n"
    assert "And now me" not in "".join(n.span_text for n in path)

    # The next turn starts on a clean context: the template's render.
    engine.script = [*engine.tokenize("Fine.<|im_end|>"), eos]
    again = service.send(reply.assistant_node, "How are you?", PARAMS)
    assert again.text == "Fine."
    path = service.path(again.assistant_node)
    assert held_context(path) == rendered_context(engine, None, path)


def test_a_marker_split_across_a_merged_token_is_cut_at_it(tmp_path, open_service):
    # The token that holds the marker's first byte goes with it, so the
    # context never holds half a marker; the text it held before the marker
    # stays, as tokens of its own. What was shown is what is kept.
    model = write_tiny_model(
        tmp_path / "plain.gguf",
        chat_template=None,
        chatml=False,
        eot_token="</s>",
        extra_tokens={".<": 1},  # a NORMAL token that merges across the cut
    )
    service = open_service(model)
    engine = service.engine
    merged = engine.tokenize(".<")
    assert len(merged) == 1
    _conv, node = service.new_conversation(None)
    shown: list[str] = []
    engine.script = [
        *engine.tokenize("Yes"),
        *merged,
        *engine.tokenize("|im_end|>\nmore"),
    ]
    reply = service.send(node, "Hello", PARAMS, Streams(on_token=shown.append))
    assert reply.text == "Yes." == "".join(shown)
    last = service.path(reply.assistant_node)[-1]
    assert last.span_text.endswith("Yes.<|im_end|>\n")
    assert merged[0] not in last.tokens  # "." decoded alone, not ".<"


def test_alternatives_together_stop_at_a_written_marker(tmp_path, open_service):
    model = write_tiny_model(
        tmp_path / "plain.gguf", chat_template=None, chatml=False, eot_token="</s>"
    )
    service = open_service(model)
    engine = service.engine
    _conv, node = service.new_conversation(None)
    eos = engine.tokenize("</s>")[0]
    engine.script = [*engine.tokenize("Hi."), eos]
    first = service.send(node, "Hello", PARAMS)
    # Two alternatives sampled in turn: the script interleaves their tokens.
    a = engine.tokenize("A<|im_end|>")
    b = engine.tokenize("B!<|im_start|>user")
    script = []
    for i in range(max(len(a), len(b))):
        script += [t[i] for t in (a, b) if i < len(t)]
    engine.script = [*script, *([eos] * 4)]
    # Sampled, not greedy: greedy alternatives would take ranked tokens.
    sampled = SamplingParams(temperature=0.8, max_tokens=40, seed=1)
    replies = service.regenerate_parallel(first.assistant_node, sampled, 2)
    assert sorted(r.text for r in replies) == ["A", "B!"]
    for reply in replies:
        span = service.path(reply.assistant_node)[-1].span_text
        assert span.endswith(reply.text + "<|im_end|>\n")


@pytest.mark.parametrize(
    ("architecture", "tokens", "kind", "reason"),
    [
        ("gemma3", {"<start_of_turn>", "<end_of_turn>"}, "gemma", "architecture"),
        # An architecture whose markers are not in the vocabulary is no guide.
        ("gemma3", set(), "chatml", "nothing"),
        ("llama", {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
         "llama3", "vocabulary"),
        ("phi3", {"<|user|>", "<|assistant|>", "<|end|>"}, "phi3", "architecture"),
        ("qwen2", {"<|im_start|>", "<|im_end|>"}, "chatml", "vocabulary"),
    ],
)  # fmt: skip
def test_the_guess_names_its_reason(architecture, tokens, kind, reason):
    fmt = load(None, "<s>", "</s>", architecture, tokens.__contains__)
    assert fmt.kind == kind
    assert fmt.note.startswith("base model — no chat template; using ")
    assert reason in fmt.note
    assert fmt.markers  # every fallback ends a turn at its markers


@pytest.mark.parametrize("how", ["max_tokens", "stopped"])
def test_a_reply_cut_inside_a_character_ends_before_it(tmp_path, open_service, how):
    # "é" is two byte tokens in this vocabulary; the reply is cut between
    # them. Nothing of the half character is shown, stored or kept in the
    # context: the next turn's context is the render of the stored text.
    model = write_tiny_model(tmp_path / "bytes.gguf")
    service = open_service(model)
    engine = service.engine
    lead, tail = engine.tokenize("é")
    _conv, node = service.new_conversation(None)
    shown: list[str] = []
    written: list[int] = []

    def stop() -> bool:
        return how == "stopped" and lead in written

    class Watching(list):
        def pop(self, index=-1):
            token = super().pop(index)
            written.append(token)
            return token

    engine.script = Watching(
        [*engine.tokenize("Caf"), lead, tail, *engine.tokenize("!")]
    )
    params = SamplingParams(temperature=0, max_tokens=4 if how == "max_tokens" else 40)
    reply = service.send(
        node, "Hello", params, Streams(on_token=shown.append, should_stop=stop)
    )
    assert reply.text == "Caf" == "".join(shown)
    assert "\ufffd" not in reply.text
    opening = service.path(reply.assistant_node)[-1]
    assert lead not in opening.tokens
    assert opening.span_text.endswith("Caf<|im_end|>\n")

    eos = engine.tokenize("<|im_end|>")[0]
    engine.script = [*engine.tokenize("Yes"), eos]
    again = service.send(reply.assistant_node, "More?", PARAMS)
    path = service.path(again.assistant_node)
    assert held_context(path) == rendered_context(engine, None, path)
