"""Where a user turn ends and the generation prompt begins, in text and tokens.

A user span holds the turn through its closing markup, and the reply's span
starts with the generation prompt. Phi-3's templates end a render without the
generation prompt with ``eos_token`` (``<|endoftext|>``) while the prompt is
``<|assistant|>``: the two endings share ``<|``, and that must not make the
user span end inside the ``<|assistant|>`` marker. These tests run Phi-3.5
and Phi-3-small (llama.cpp's reference templates) on a tiny model whose
vocabulary has Phi's markers as control tokens, through the real backend and
the real conversation service; and check that the split falls where the
pieces tokenize as the joined text does. Phi-3.5 also runs on Phi-3's real
vocabulary (``tests/helpers/real_vocab.py``), where llama.cpp's markers swallow the
whitespace after them.
"""

from __future__ import annotations

import gguf
import pytest

from app.backend.chat_format import ChatFormat, Message
from app.backend.values import SamplingParams
from app.conversation.batches import Batches
from storage.values import Role
from tests.helpers import real_vocab, template_corpus
from tests.helpers.scripted import held_context, rendered_context
from tests.helpers.tiny_model import write_tiny_model

PARAMS = SamplingParams(temperature=0, max_tokens=200)
# Phi-3's markers, control tokens in its vocabulary as in the real models.
PHI_MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>")
PHI_TOKENS = dict.fromkeys(PHI_MARKERS, gguf.TokenType.CONTROL)
PHI_TEMPLATES = ["microsoft-Phi-3.5-mini-instruct", "Phi-3-small"]
ROUNDS = [("Hi there", "Hello!"), ("Grüße aus Köln, 世界?", "Schön 🌳")]


def _template(name: str) -> str:
    # Phi-3.5 is one of llama.cpp's template files; Phi-3-small only appears
    # in its C++ test list.
    templates = template_corpus.reference_templates()
    if name in templates:
        return templates[name]
    return next(
        case.template_str
        for case in template_corpus.reference_cases()
        if case.name == name
    )


@pytest.mark.parametrize("system", [None, "Answer briefly."])
@pytest.mark.parametrize("name", PHI_TEMPLATES)
def test_phi_generation_prompt_is_one_control_token(
    tmp_path, open_service, name, system
):
    model = write_tiny_model(
        tmp_path / "phi.gguf",
        chat_template=_template(name),
        extra_tokens=PHI_TOKENS,
        eos_token="<|endoftext|>",
        eot_token="<|end|>",
    )
    service = open_service(model)
    engine = service.engine
    assert engine.info.chat_format == "gguf", engine.info.chat_format_note
    # Guard: the markers are single control tokens in this vocabulary.
    (assistant,) = engine.tokenize("<|assistant|>")
    (end,) = engine.tokenize("<|end|>")
    assert engine.is_special(assistant) and engine.is_end_of_generation(end)

    _conv, node = service.new_conversation(system)
    for question, answer in ROUNDS:
        # A Phi model ends its turn with <|end|>.
        engine.script = [*engine.tokenize(answer), end]
        reply = service.send(node, question, PARAMS)
        path = service.path(reply.assistant_node)
        for span in path[1:]:
            text, tokens = span.span_text, list(span.tokens)
            assert not text.endswith(("<", "<|")), (span.role, text)
            assert not text.startswith("|assistant|>"), (span.role, text)
            # Every <|assistant|> of a span's text is the one control token.
            assert tokens.count(assistant) == text.count("<|assistant|>"), (
                span.role,
                text,
            )
        opening = path[-1]
        assert opening.span_text.startswith("<|assistant|>\n")
        assert opening.tokens[0] == assistant
        assert held_context(path) == rendered_context(engine, system, path)
        node = reply.assistant_node


@pytest.mark.parametrize("eos", ["</s>", "<|endoftext|>"])
@pytest.mark.parametrize("name", PHI_TEMPLATES)
def test_phi_turn_ends_before_the_generation_prompt(name, eos):
    fmt = ChatFormat(_template(name), "<s>", eos)
    turns = [
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "Q"),
    ]
    through, with_prompt = fmt.prompt("Be brief.", turns)
    assert through.endswith("Q<|end|>\n")
    assert with_prompt[len(through) :] == "<|assistant|>\n"


def test_split_is_where_the_pieces_tokenize_as_the_whole(tmp_path, open_service):
    # Phi-3.5's markers as plain text in a vocabulary that merges "\n<": the
    # joined text ">\n<|assistant|>" tokenizes as ">" "\n<" "|" ..., so a user
    # span ending with "\n" and a prompt starting with "<" would hold tokens
    # llama.cpp never makes of the whole render.
    model = write_tiny_model(
        tmp_path / "merges.gguf",
        chat_template=_template("microsoft-Phi-3.5-mini-instruct"),
        extra_tokens={"\n<": gguf.TokenType.NORMAL},
    )
    service = open_service(model)
    engine = service.engine
    assert engine.tokenize(">\n<|") == engine.tokenize(">") + engine.tokenize("\n<|")
    _conv, node = service.new_conversation(None)
    for question, answer in ROUNDS:
        engine.script = [*engine.tokenize(answer), engine.tokenize("</s>")[0]]
        reply = service.send(node, question, PARAMS)
        path = service.path(reply.assistant_node)
        user, opening = path[-2], path[-1]
        # The user span and the generation prompt are the tokens of their
        # joined text, and so the context is that of the whole render.
        header = list(opening.tokens[: Batches.of(opening.chunks).first_own])
        joined = user.span_text + engine.detokenize(header)
        assert list(user.tokens) + header == engine.tokenize(joined)
        assert held_context(path) == rendered_context(engine, None, path)
        node = reply.assistant_node


@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_phi_on_its_real_vocabulary(real_vocabs, tmp_path, open_service, system):
    model = real_vocab.real_vocab_model(
        tmp_path,
        real_vocab.vocab_file(real_vocabs, "phi-3"),
        _template("microsoft-Phi-3.5-mini-instruct"),
    )
    service = open_service(model)
    engine = service.engine
    assert engine.info.chat_format == "gguf", engine.info.chat_format_note
    (assistant,) = engine.tokenize("<|assistant|>")
    (end,) = engine.tokenize("<|end|>")
    (user,) = engine.tokenize("<|user|>")
    assert engine.is_special(assistant) and engine.is_end_of_generation(end)
    # Guard: this is Phi-3's tokenizer, whose markers eat the newline after
    # them (the tiny byte-level vocabulary keeps it as a token).
    assert engine.tokenize("<|end|>\n<|user|>\n") == [end, user]

    _conv, node = service.new_conversation(system)
    redecoded = []
    for question, answer in [*ROUNDS, ("And a third one", "Done.\n")]:
        engine.script = [*engine.tokenize(answer), end]
        parent_end = service.path(node)[-1].end_pos
        reply = service.send(node, question, PARAMS)
        path = service.path(reply.assistant_node)
        if redecoded:  # the first reply decodes the new root once
            assert reply.stats.reprocessed_tokens == 0
        for span in path[1:]:
            assert not span.span_text.endswith(("<", "<|")), (span.role, span.span_text)
        replies = [n for n in path if n.role == Role.ASSISTANT]
        assert [n.tokens[0] for n in replies] == [assistant] * len(replies)
        assert held_context(path) == rendered_context(engine, system, path)
        redecoded.append(parent_end - path[-2].start_pos)
        node = reply.assistant_node
    print(f"\nPhi-3.5, real vocabulary: tokens decoded again per turn {redecoded}")
    # A reply is closed as the next turn reads it (<|end|>\n, not the
    # conversation's final <|endoftext|>), with <|end|> eating the newline as
    # in llama.cpp's tokens of the whole render: no turn decodes one again.
    reply = service.path(node)[-1]
    assert reply.span_text.endswith("Done.\n<|end|>\n")
    assert reply.tokens[-1] == end
    assert redecoded == [0, 0, 0]


def test_a_reply_rendered_again_is_closed_as_the_next_turn_reads_it(
    real_vocabs, tmp_path, open_service
):
    # A conversation goes on with another model (another vocabulary): its
    # spans are rendered again, and a reply's ends as a reply just generated
    # does, without the <|endoftext|> that only ends a whole conversation.
    template = _template("microsoft-Phi-3.5-mini-instruct")
    first = open_service(
        real_vocab.real_vocab_model(
            tmp_path, real_vocab.vocab_file(real_vocabs, "phi-3"), template
        )
    )
    _conv, root = first.new_conversation(None)
    (first_end,) = first.engine.tokenize("<|end|>")
    first.engine.script = [*first.engine.tokenize("Hello!"), first_end]
    answered = first.send(root, "Hi there", PARAMS)

    other = write_tiny_model(
        tmp_path / "phi-tiny.gguf",
        chat_template=template,
        extra_tokens=PHI_TOKENS,
        eos_token="<|endoftext|>",
        eot_token="<|end|>",
    )
    second = open_service(other)
    (end,) = second.engine.tokenize("<|end|>")
    second.engine.script = [*second.engine.tokenize("Bye."), end]
    reply = second.send(answered.assistant_node, "Next", PARAMS)
    path = second.path(reply.assistant_node)
    again, user = path[-3], path[-2]
    assert again.vocab_id == second.engine.vocab_id
    assert again.span_text.startswith("<|assistant|>\n")
    assert again.span_text.endswith("Hello!<|end|>\n")
    assert user.start_pos == again.end_pos  # nothing decoded again
    assert held_context(path) == rendered_context(second.engine, None, path)
