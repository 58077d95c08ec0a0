"""A model's chat format: the texts its template renders for a conversation.

Arbor asks three things of a template: the text of the conversation start
(``root_text``), the text of the whole conversation through its last turn and
with the generation prompt (``prompt``), and the text that closes a reply
(``footer``). How those texts become token spans of tree nodes, including
templates that re-render earlier turns, is ``app.conversation.spans``'s job.

The template is the model's own (GGUF ``tokenizer.chat_template``), rendered
like llama.cpp does, polyfills included (``chat_template``). ChatML is used only
for a model that has no template, or one whose template cannot render a plain
conversation at all; ``kind`` and ``note`` say which, for the UI and the CLI.
ChatML is not the only fallback: a base model gets its family's format where
the architecture or the vocabulary tells it (``fallback_formats``), and the
markers that end a turn in that format (``markers``), so that a model writing
them as text still ends its reply there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from app.backend import fallback_formats
from app.backend.chat_template import ChatTemplate, TemplateError
from app.backend.fallback_formats import CHATML_TEMPLATE
from app.backend.tool_syntax import ToolSyntax, learn_tool_syntax

__all__ = ["CHATML_TEMPLATE", "ChatFormat", "Message", "TemplateError", "load"]

# Contents that cannot occur in real messages, to find where a template puts
# them.
_PROBE = "\x01arbor-probe\x01"
_OTHER_PROBE = "\x02arbor-probe\x02"


@dataclass(frozen=True)
class Message:
    """One chat message as a template sees it; ``thinking`` is a reply's
    reasoning, ``tool_calls`` the calls a reply made (each ``{"id", "name",
    "arguments"}``, arguments as JSON text), and a ``tool`` message's
    ``tool_call_id`` and ``name`` the call it answers."""

    role: str
    content: str
    thinking: str = ""
    tool_calls: tuple[Mapping[str, str], ...] = ()
    tool_call_id: str = ""
    name: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The mapping chat templates expect (OpenAI's message shape).

        A reply's reasoning goes in as ``reasoning_content``, as llama.cpp
        sends it; ``ChatTemplate`` copies it where a template reads another
        name (gpt-oss's ``thinking``), and a template that reads none drops it.
        """
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.thinking:
            data["reasoning_content"] = self.thinking
        if self.tool_calls:
            data["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["arguments"],
                    },
                }
                for call in self.tool_calls
            ]
        if self.role == "tool":
            data["tool_call_id"] = self.tool_call_id
            data["name"] = self.name
        return data


class ChatFormat:
    """Renders conversations with one chat template.

    Parameters
    ----------
    template
        Jinja source of the chat template.
    bos_token, eos_token
        Token texts that templates may reference.
    kind
        ``"gguf"`` for the model's own template, else the fallback's kind
        (``"chatml"``, ``"gemma"``, ...).
    note
        Why the fallback is used, for the status bar and ``arbor info``.
    markers
        Texts that end the model's turn when it writes them (a fallback's
        turn markers, which may be plain text in the model's vocabulary).
    """

    def __init__(
        self,
        template: str,
        bos_token: str = "",
        eos_token: str = "",
        kind: str = "gguf",
        note: str = "",
        markers: tuple[str, ...] = (),
    ) -> None:
        self._template = ChatTemplate(template, bos_token, eos_token)
        self.source = template
        self.kind = kind
        self.note = note
        self.markers = markers
        # What a render ending with a reply has after the reply's content;
        # the footer is its start, or all of it.
        self._ending, self.footer = self._probe_footer()

    @cached_property
    def tool_syntax(self) -> ToolSyntax:
        """How the template writes a reply's tool calls (learned when first
        asked: most conversations call no tool)."""
        return learn_tool_syntax(self._template)

    def render(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = False,
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """Render the whole conversation as text; raises ``TemplateError``."""
        return self._template.render(
            [m.as_dict() for m in messages],
            add_generation_prompt=add_generation_prompt,
            **dict(variables or {}),
        )

    def root_text(
        self, system: str | None, variables: Mapping[str, Any] | None = None
    ) -> str:
        """Text of the conversation start: what every conversation begins with.

        It is the longest text that renders the same before any first message,
        cut back to the rendering of the system prompt alone (or of nothing)
        where the template allows that: BOS, the system prompt, or a
        template's default system prompt. The first user message's span holds
        the rest.
        """
        head = [Message("system", system)] if system else []
        first = self._render_or_empty([*head, Message("user", _PROBE)], variables)
        other = self._render_or_empty(
            [
                *head,
                Message("user", _OTHER_PROBE),
                Message("assistant", _PROBE),
                Message("user", _PROBE),
            ],
            variables,
        )
        shared = first[: _common_prefix(first, other)]
        alone = self._render_or_empty(head, variables)
        if alone and shared.startswith(alone):
            return alone
        # The first user turn is whatever a second user turn appends, when the
        # template renders a second one as plain appended text.
        one_round = self._render_or_empty(
            [*head, Message("user", _OTHER_PROBE), Message("assistant", _PROBE)],
            variables,
        )
        if one_round and other.startswith(one_round):
            user_turn = other[len(one_round) :]
            if first.endswith(user_turn) and shared.startswith(
                first[: -len(user_turn)]
            ):
                return first[: -len(user_turn)]
        return _cut_at_line(shared)

    def prompt(
        self,
        system: str | None,
        turns: Sequence[Message],
        variables: Mapping[str, Any] | None = None,
    ) -> tuple[str, str]:
        """Render a conversation ending with a user turn, ready for a reply.

        Returns ``(through_turn, with_prompt)``: the text through the last user
        turn, and the full text with the generation prompt (the first is a
        prefix of the second; for a template that always opens the assistant's
        turn they are equal). The user turn's span ends where the first ends
        and the reply's opening holds the rest, so the first never ends inside
        a marker that the generation prompt begins with (see ``_turn_end``).
        """
        messages = [*([Message("system", system)] if system else []), *turns]
        with_prompt = self.render(messages, True, variables)
        without = self.render(messages, False, variables)
        return with_prompt[: _turn_end(without, with_prompt)], with_prompt

    def history(
        self,
        system: str | None,
        turns: Sequence[Message],
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """Render a conversation as history (no generation prompt)."""
        messages = [*([Message("system", system)] if system else []), *turns]
        return self.render(messages, False, variables)

    def reply_history(
        self,
        system: str | None,
        turns: Sequence[Message],
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """Render a conversation ending with a reply, as the next turn reads it.

        That is ``history`` with the last reply closed by the ``footer``:
        what a template writes only at the very end of a conversation
        (Phi-3's ``eos_token``) is left off, as it is from the span of a
        reply just generated.
        """
        text = self.history(system, turns, variables)
        rest = self._ending[len(self.footer) :]
        if rest and self._ending.startswith(self.footer) and text.endswith(rest):
            return text[: -len(rest)]
        return text

    def _render_or_empty(
        self, messages: Sequence[Message], variables: Mapping[str, Any] | None
    ) -> str:
        # Some templates refuse a conversation without a user turn.
        try:
            return self.render(messages, False, variables)
        except TemplateError:
            return ""

    def _probe_footer(self) -> tuple[str, str]:
        """What follows a reply's content: at the end, and as the next turn reads it.

        Returns ``(ending, footer)``: the text after the last reply's content
        in a render that ends with it, and the footer that closes a reply.

        A reply's span is only ever followed by the next user turn, so the
        footer is what the template writes after the reply's content when the
        conversation goes on (e.g. ``"<|im_end|>\\n"``), not what it writes
        when the reply ends the conversation: Phi-3 ends a whole conversation
        with ``eos_token`` (``<|end|>\\n<|endoftext|>``) that a continued one
        never holds, and a footer with it would have every next turn decode
        the reply again. The two renders are compared after the reply's
        content: their shared start, cut back after its last newline or
        marker (``_cut_at_line``), is the footer. (Where the template appends
        a turn after the last one, a generation prompt or Command-R's tool
        preamble, that turn's opening marker is shared too and ends the
        footer; the next span holds the rest of the turn.) Where they share
        nothing (gpt-oss closes a last reply with ``<|return|>``, an earlier
        one with ``<|end|>``) the conversation's own ending is kept, as it is
        when a template cannot render a next turn. A template that does not
        render a last reply (YandexGPT) gets no footer: the next turn's
        rendering of the reply replaces it anyway (see folding).
        """
        history = [Message("user", "hi"), Message("assistant", _PROBE)]
        closed = self.render(history)
        if _PROBE not in closed:
            return "", ""
        ending = closed.rsplit(_PROBE, 1)[1]
        try:
            continued = self.render([*history, Message("user", _OTHER_PROBE)])
        except TemplateError:
            return ending, ending
        if _PROBE not in continued:
            return ending, ending
        shared = _common_prefix(ending, continued.split(_PROBE, 1)[1])
        if shared == len(ending):
            return ending, ending
        return ending, _cut_at_line(ending[:shared]) or ending


def load(
    template: str | None,
    bos_token: str,
    eos_token: str,
    architecture: str = "",
    has_token: Callable[[str], bool] | None = None,
) -> ChatFormat:
    """The chat format for a model's template, or a fallback with the reason why.

    ``architecture`` (GGUF ``general.architecture``) and ``has_token`` (does
    the vocabulary hold this text as one token?) choose the fallback's family.
    """
    if template:
        try:
            chat_format = ChatFormat(template, bos_token, eos_token)
            # A plain two-round conversation, with and without a system
            # prompt, must render; otherwise nothing would.
            for system in (None, "s"):
                chat_format.prompt(
                    system,
                    [
                        Message("user", "a"),
                        Message("assistant", "b"),
                        Message("user", "c"),
                    ],
                )
            return chat_format
        except TemplateError as exc:
            why = f"the model's chat template cannot be used ({exc})"
    else:
        why = "base model — no chat template"
    fallback, reason = fallback_formats.guess(
        architecture, has_token or (lambda _text: False)
    )
    return ChatFormat(
        fallback.template,
        bos_token,
        eos_token,
        kind=fallback.kind,
        note=f"{why}; using {fallback.name} turns ({reason})",
        markers=fallback.markers,
    )


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _turn_end(without: str, with_prompt: str) -> int:
    """Where the last turn ends in ``with_prompt``, given ``without`` (no prompt).

    Mostly the template only appends the generation prompt, and the turn is
    all of ``without``. Otherwise the two renders end differently, and their
    shared start can run into what both endings happen to begin with: Phi-3
    ends a render without the prompt with ``eos_token``, so ``<|endoftext|>``
    and the prompt's ``<|assistant|>`` share ``<|``. Those characters are not
    the turn's; a span ending with them would split the marker into plain
    text on both sides. So the shared start is cut back after its last
    newline or ``>``, where markup ends (``_cut_at_line``'s rule).
    """
    shared = _common_prefix(without, with_prompt)
    if shared == len(without):
        return shared
    cut = len(_cut_at_line(with_prompt[:shared]))
    # No such boundary at all: the shared start is the best guess left.
    return cut or shared


def _cut_at_line(text: str) -> str:
    # A shared start that ends inside a turn (the template writes the first
    # user turn's header there, or two endings share a marker's first
    # characters) is cut after its last newline or special marker, so the
    # root's or the user turn's span ends on a clean boundary.
    cut = max(text.rfind("\n"), text.rfind(">"))
    return text[: cut + 1] if cut >= 0 else ""
