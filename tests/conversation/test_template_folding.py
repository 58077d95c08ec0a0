"""Node-by-node rendering of real chat templates equals their whole rendering.

The invariant (DESIGN.md, invariant 6): when Arbor generates a reply, the
context is the model's own template rendering the whole path with the
generation prompt. Here conversations are built node by node with the same
code the service uses (``ChatFormat`` + ``folding``) on every reference
template of llama.cpp's sdist, at the text level (one "token" per character,
so positions and texts line up); the real-stack version on a tiny model is in
``test_real_formats.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.backend.chat_format import ChatFormat, Message, TemplateError, load
from app.conversation import folding
from app.conversation.spans import system_of, turns_of
from storage.records import NodeRecord
from tests.helpers import template_corpus

ROUNDS = [
    ("Hello, who are you?", "The user greets me.", "I am Arbor's test model."),
    ("Grüße aus Köln — 世界 🌳?", "Non-ASCII input.\nTwo lines.", "  Gut, danke!  "),
    ("And a third question", "", "Third answer."),
]


class Conversation:
    """A tree path built like the service builds it, one node at a time."""

    def __init__(self, fmt: ChatFormat, system: str | None, variables=None) -> None:
        self.fmt = fmt
        self.variables = variables or {}
        root_text = fmt.root_text(system, self.variables)
        self.path: list[NodeRecord] = [self._node("root", system or "", 0, root_text)]
        self.redecoded: list[int] = []  # characters decoded again, per turn

    def _node(
        self, role: str, text: str, start: int, span: str, thinking: str = ""
    ) -> NodeRecord:
        return NodeRecord(
            id=len(getattr(self, "path", [])) + 1,
            conversation_id=1,
            parent_id=None,
            role=role,
            text=text,
            tokens=tuple(range(len(span))),
            start_pos=start,
            chunks=(),
            vocab_id="v",
            status="complete",
            generation=None,
            created_at=datetime.now(UTC),
            thinking=thinking,
            span_text=span,
        )

    def context(self) -> str:
        """The text the context holds after the path."""
        return "".join(n.span_text or "" for n in folding.effective(self.path))

    def ask(self, text: str) -> str:
        """Add a user node; return the generation prompt, checking the invariant."""
        through, with_prompt = self.fmt.prompt(
            system_of(self.path),
            [*turns_of(self.path), Message("user", text)],
            self.variables,
        )
        nodes = folding.effective(self.path)
        k, span = folding.fold(nodes, through)
        start = nodes[k].end_pos if k >= 0 else 0
        parent_end = self.path[-1].end_pos
        self.redecoded.append(parent_end - start)
        self.path.append(self._node("user", text, start, span))
        assert folding.is_consistent(self.path)
        assert self.context() + with_prompt[len(through) :] == with_prompt
        return with_prompt[len(through) :]

    def answer(self, header: str, answer: str, thinking: str) -> None:
        """Add the reply a model following its template would write."""
        before = self.context() + header
        reply = Message("assistant", answer, thinking)
        history = self.fmt.history(
            system_of(self.path), [*turns_of(self.path), reply], self.variables
        )
        if history.startswith(before):
            written = history[len(before) :]
        else:  # the template renders the last reply unlike its prompt
            written = answer + self.fmt.footer
        start = self.path[-1].end_pos
        self.path.append(
            self._node("assistant", answer, start, header + written, thinking)
        )


def _run(fmt: ChatFormat, system: str | None, with_thinking: bool) -> Conversation:
    conversation = Conversation(fmt, system)
    for user, thinking, answer in ROUNDS:
        header = conversation.ask(user)
        conversation.answer(header, answer, thinking if with_thinking else "")
    return conversation


def test_every_reference_template_renders_node_by_node():
    templates = template_corpus.reference_templates()
    assert len(templates) >= 60, "the sdist should hold llama.cpp's ~70 templates"
    failures: dict[str, str] = {}
    for name, source in sorted(templates.items()):
        fmt = load(source, "<s>", "</s>")
        if fmt.kind != "gguf":
            failures[name] = fmt.note
            continue
        try:
            for system in (None, "You are terse."):
                for with_thinking in (False, True):
                    _run(fmt, system, with_thinking)
        except (TemplateError, AssertionError) as exc:
            failures[name] = f"{type(exc).__name__}: {exc}"
    supported = len(templates) - len(failures)
    print(f"\n{supported}/{len(templates)} templates render node by node")
    for name, reason in failures.items():
        print(f"  {name}: {reason}")
    assert supported / len(templates) >= 0.95, failures


def test_llama_cpp_expectations_node_by_node():
    # Arbor's tree holds system, user and assistant messages; the cases with
    # tool calls and tool results do not apply.
    chat_roles = {"system", "user", "assistant"}
    cases = [
        c
        for c in template_corpus.reference_cases()
        if c.supported_with_jinja and {r for r, _ in c.conversation} <= chat_roles
    ]
    assert len(cases) >= 20
    mismatches = []
    for case in cases:
        messages = case.messages()
        system = messages[0]["content"] if messages[0]["role"] == "system" else None
        turns = messages[1:] if system is not None else messages
        try:
            fmt = ChatFormat(case.template_str, case.bos_token, case.eos_token)
            conversation = Conversation(fmt, system)
            for message in turns:
                if message["role"] == "user":
                    header = conversation.ask(message["content"])
                else:
                    conversation.answer(header, message["content"], "")
            got = conversation.context() + header
        except (TemplateError, AssertionError) as exc:
            got = f"<{type(exc).__name__}: {exc}>"
        if got != case.expected:
            mismatches.append((case.name, got, case.expected))
    identical = len(cases) - len(mismatches)
    print(f"\n{identical}/{len(cases)} of llama.cpp's expectations identical")
    for name, got, expected in mismatches:
        print(f"  {name}:\n    got      {got!r}\n    expected {expected!r}")
    assert identical / len(cases) >= 0.90, [m[0] for m in mismatches]


def _template(name: str) -> ChatFormat:
    source = template_corpus.reference_templates()[name]
    return ChatFormat(source, "<s>", "</s>")


@pytest.mark.parametrize(
    "name",
    ["meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen2.5-7B-Instruct"],
)
def test_appending_templates_never_decode_again(name):
    conversation = _run(_template(name), "Be brief.", with_thinking=False)
    assert conversation.redecoded == [0, 0, 0]


@pytest.mark.parametrize(
    "name",
    [
        "Qwen-Qwen3-0.6B",
        "openai-gpt-oss-120b",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    ],
)
def test_reasoning_templates_decode_only_the_previous_reply_again(name):
    conversation = _run(_template(name), None, with_thinking=True)
    replies = [n for n in conversation.path if n.role == "assistant"]
    # The first turn follows the root; each later one re-renders at most the
    # reply before it (its reasoning dropped), never anything above it.
    assert conversation.redecoded[0] == 0
    for redecoded, reply in zip(conversation.redecoded[1:], replies, strict=False):
        assert 0 < redecoded <= len(reply.tokens)
    print(f"\n{name}: characters decoded again per turn {conversation.redecoded}")
