"""Render a model's chat template incrementally, one node span at a time.

The context of a node is the concatenation of the spans on its path, so each
message must render as text *appended* to what came before. We render the
whole conversation with the model's Jinja template and take the new suffix;
templates for which that does not hold (they rewrite earlier turns) are
detected when the model loads, and a plain ChatML format is used instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_PROBE = "\x01arbor-probe\x01"


class TemplateError(ValueError):
    """The chat template cannot be rendered incrementally."""


@dataclass(frozen=True)
class Message:
    """One chat message as the template sees it."""

    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        """Return the mapping Jinja chat templates expect."""
        return {"role": self.role, "content": self.content}


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatFormat:
    """Turns messages into the text each tree node appends to the context.

    Parameters
    ----------
    template
        Jinja source from the GGUF metadata (``tokenizer.chat_template``).
    bos_token, eos_token
        Token texts that templates may reference.
    """

    def __init__(self, template: str, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined
        )
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(template)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template does not parse: {exc}") from exc
        self.source = template
        self._bos = bos_token
        self._eos = eos_token
        self.footer = self._probe_footer()
        self._check_appends()

    def render(
        self, messages: Sequence[Message], add_generation_prompt: bool = False
    ) -> str:
        """Render the whole conversation as text."""
        context: dict[str, Any] = {
            "messages": [m.as_dict() for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self._bos,
            "eos_token": self._eos,
        }
        try:
            return self._template.render(**context)
        except TemplateError:
            raise
        except Exception as exc:  # a template can fail in any Jinja way
            raise TemplateError(f"the chat template failed: {exc}") from exc

    def root_text(self, system_prompt: str | None) -> str:
        """Text of the conversation start: BOS markup and the system prompt.

        Without a system prompt this is whatever the template puts before the
        first user turn (e.g. its default system prompt).
        """
        if system_prompt:
            return self.render([Message("system", system_prompt)])
        first_user = Message("user", _PROBE)
        reply = Message("assistant", _PROBE)
        with_one = self.render([first_user, reply])
        with_two = self.render([first_user, reply, first_user])
        user_turn = _suffix(with_one, with_two)
        alone = self.render([first_user])
        return alone[: -len(user_turn)] if alone.endswith(user_turn) else ""

    def message_text(
        self, system: str | None, turns: Sequence[Message], message: Message
    ) -> str:
        """Text that ``message`` appends after the root and the earlier ``turns``."""
        return _suffix(
            self._prefix(system, turns), self._render_turns(system, [*turns, message])
        )

    def assistant_header(self, system: str | None, turns: Sequence[Message]) -> str:
        """Text that opens the assistant's turn (the generation prompt)."""
        return _suffix(
            self._prefix(system, turns),
            self._render_turns(system, turns, add_generation_prompt=True),
        )

    def _prefix(self, system: str | None, turns: Sequence[Message]) -> str:
        # The root's text stands before the first turn; rendering no messages at
        # all would miss a template's default system prompt.
        return self._render_turns(system, turns) if turns else self.root_text(system)

    def _render_turns(
        self,
        system: str | None,
        turns: Sequence[Message],
        add_generation_prompt: bool = False,
    ) -> str:
        messages = [Message("system", system), *turns] if system else list(turns)
        return self.render(messages, add_generation_prompt)

    def _probe_footer(self) -> str:
        history = [Message("user", "hi")]
        opened = self.render(history, add_generation_prompt=True)
        closed = self.render([*history, Message("assistant", _PROBE)])
        rest = _suffix(opened, closed)
        if _PROBE not in rest:
            raise TemplateError("the template drops the assistant's reply")
        return rest.split(_PROBE, 1)[1]

    def _check_appends(self) -> None:
        # A conversation of two rounds must render as pure appends, with the
        # assistant header included verbatim before each reply.
        messages = [
            Message("user", "a"),
            Message("assistant", "b"),
            Message("user", "c"),
            Message("assistant", "d"),
        ]
        for system in (None, "s"):
            for i, message in enumerate(messages):
                text = self.message_text(system, messages[:i], message)
                if message.role == "assistant":
                    header = self.assistant_header(system, messages[:i])
                    if not text.startswith(header):
                        raise TemplateError(
                            "the assistant turn does not start with its header"
                        )


def _suffix(before: str, after: str) -> str:
    if not after.startswith(before):
        raise TemplateError("the chat template rewrites earlier turns")
    return after[len(before) :]
