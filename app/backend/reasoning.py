"""Separate a reasoning model's thinking from its answer while the reply streams.

Reasoning models write their chain of thought before the answer, wrapped in
markers that differ by family. We recognise the families of llama.cpp's
reference chat templates (``models/templates/*.jinja``; its own parsers live in
``common/chat*.cpp`` and ``common/parsers/``) from the template's Jinja source:

- **tag pairs**: ``<think>``…``</think>`` (Qwen3, QwQ, DeepSeek R1/V3.x/V4,
  GLM, MiniMax-M2, Kimi-K2-Thinking, Nemotron, SmolLM3, …), ``<seed:think>``
  (Seed-OSS), ``<mm:think>`` (MiniMax-M3), ``<think:opensource>`` (Hunyuan 3),
  ``[THINK]`` (Magistral/Ministral), ``<|inner_prefix|>`` (Apertus),
  ``<|START_THINKING|>`` (Command R7B, Cohere2 MoE; answer wrapped in
  ``<|START_RESPONSE|>``/``<|START_TEXT|>``), ``<think>`` + ``<response>``
  (Granite 3.3), ``<|channel>thought``…``<channel|>`` (Gemma 4), ``<|think|>``
  (Solar Open) and the ``<|open|>think<|sep|>`` sections of Kimi K3;
- **an implicit opening**: Apriel thinks from the first token and starts its
  answer after ``[BEGIN FINAL RESPONSE]``;
- **message headers**: gpt-oss's harmony format
  (``<|channel|>analysis<|message|>…<|end|>``) and Muse Glimmer
  (``<|start|>assistant to=self<|message|>…<|eom|>``), where each message's
  header says where its text goes.

The algorithm, once. A format is a small state machine: each state routes
text to a channel (thinking, answer, nothing, or a message header) and lists
the markers that leave it. :class:`ReasoningSplitter` keeps the unresolved
tail of the text in a buffer and repeatedly takes, from the current state's
markers, the leftmost complete match (the longest one at that position); text
before it goes to the state's channel. A tail that could still grow into a
marker is held back, and so is a complete match that a longer marker could
still extend, so the outcome never depends on how the text was cut into
tokens: pushing a reply in any chunks gives what :func:`split_reply` gives for
the whole text. States that expect a marker first (the reply's start) move on
at the first visible non-space character.

Special tokens take part in marker matching with their text, but are never
shown; a header's special tokens are read when it is classified. Like
llama.cpp's ``reasoning_content``, thinking is shown without the whitespace
around it, and the answer without leading whitespace (a format without
reasoning passes text through unchanged).

No Qt and no llama_cpp here: the module is pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "NO_REASONING",
    "ReasoningFormat",
    "ReasoningSplitter",
    "ReasoningSwitch",
    "reasoning_format",
    "reasoning_switch",
    "split_reply",
    "starts_in_thinking",
]

THINKING = "thinking"
ANSWER = "answer"
_HEADER = "header"

# Where a state's text goes: a channel, the message header, or nowhere (None).
_Sink = str | None

# A real harmony header is a role, a recipient and a channel name; text that
# runs longer without <|message|> is a model not speaking the format.
_HEADER_LIMIT = 256

# Next state after a header's <|message|>: decided by the header's text.
_CLASSIFY = "@classify"


@dataclass(frozen=True)
class _State:
    """One state of a format's machine.

    ``sink`` says where text goes; ``markers`` maps each marker that leaves
    the state to the next state (the marker itself is never shown);
    ``on_text`` is the state to move to at the first visible non-space
    character, for states that wait for an opening marker.
    """

    sink: _Sink
    markers: tuple[tuple[str, str], ...] = ()
    on_text: str | None = None


@dataclass(frozen=True)
class ReasoningFormat:
    """How one family of models marks its thinking.

    Attributes
    ----------
    name : str
        The family, e.g. ``"think-tags"``, ``"harmony"``, ``"gemma4-channel"``,
        or ``"none"`` for a template without reasoning.
    states : tuple
        The machine: ``(state name, state)`` pairs. The splitter starts in
        ``"start"``, or, when the generation prompt already opened the
        thinking block, in ``"think0"`` (``"thinking"`` where there is none).
    """

    name: str
    states: tuple[tuple[str, _State], ...] = field(repr=False)

    @property
    def has_reasoning(self) -> bool:
        """Whether replies of this format can contain thinking."""
        return self.name != "none"

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the format knows, longest first."""
        found = {m for _, state in self.states for m, _ in state.markers}
        return tuple(sorted(found, key=lambda m: (-len(m), m)))

    def state(self, name: str) -> _State:
        """Return the state called ``name``."""
        return dict(self.states)[name]


# --- The formats -------------------------------------------------------------


def _tag_format(
    name: str,
    opens: tuple[str, ...],
    closes: tuple[str, ...],
    *,
    answer_opens: tuple[str, ...] = (),
    answer_closes: tuple[str, ...] = (),
    noise: tuple[str, ...] = (),
    reopen: bool = False,
    hide_after_answer: bool = False,
) -> ReasoningFormat:
    """Build a format whose thinking sits between an opening and closing marker.

    ``answer_opens``/``answer_closes`` wrap the answer where a family does
    (dropped); ``noise`` are structural markers dropped anywhere outside the
    thinking; ``reopen`` lets a later thinking block follow the answer (Gemma 4,
    Kimi K3); ``hide_after_answer`` hides what follows the answer's closing
    marker (Kimi K3's tool and message sections).
    """
    to_thinking = tuple((m, "think0") for m in opens)
    to_answer = tuple((m, "answer") for m in answer_opens)
    # The reply's start: an opening marker starts the thinking, a stray
    # closing one is dropped (GLM and Laguna prompts may already hold the
    # opening), anything else is the answer.
    after_close = "start" if (reopen or answer_opens) else "answer"
    start = _State(
        None,
        (
            *to_thinking,
            *((m, after_close) for m in closes),
            *to_answer,
            *((m, "start") for m in (*answer_closes, *noise)),
        ),
        on_text="answer",
    )
    # The same opening marker again before any thinking text is a model
    # repeating what the prompt already opened; later it is just text.
    think0 = _State(
        THINKING,
        (*to_thinking, *((m, after_close) for m in closes), *to_answer),
        on_text=THINKING,
    )
    thinking = _State(THINKING, (*((m, after_close) for m in closes), *to_answer))
    after_answer = "hidden" if hide_after_answer else "answer"
    answer = _State(
        ANSWER,
        (
            *(to_thinking if reopen else ()),
            *((m, "answer") for m in (*answer_opens, *noise)),
            *((m, after_answer) for m in answer_closes),
            *(((m, "answer") for m in closes) if reopen else ()),
        ),
    )
    states = [
        ("start", start),
        ("think0", think0),
        (THINKING, thinking),
        ("answer", answer),
    ]
    if hide_after_answer:
        states.append(("hidden", _State(None, (*to_thinking, *to_answer))))
    return ReasoningFormat(name, tuple(states))


def _header_format(
    name: str, ends: tuple[str, ...], start: str = "<|start|>"
) -> ReasoningFormat:
    """Build a format of headed messages: ``<|start|>HEADER<|message|>TEXT END``.

    The generation prompt ends inside a header (``<|start|>assistant``), so the
    machine starts there.
    """
    to_header = tuple((m, _HEADER) for m in (start, *ends))
    header = _State(_HEADER, (("<|message|>", _CLASSIFY), *to_header))
    return ReasoningFormat(
        name,
        (
            ("start", header),
            (_HEADER, header),
            (THINKING, _State(THINKING, to_header)),
            ("answer", _State(ANSWER, to_header)),
        ),
    )


NO_REASONING = ReasoningFormat("none", (("start", _State(ANSWER)),))
THINK_TAGS = _tag_format("think-tags", ("<think>",), ("</think>",))
THINK_RESPONSE_TAGS = _tag_format(
    "think-response-tags",
    ("<think>",),
    ("</think>",),
    answer_opens=("<response>",),
    answer_closes=("</response>",),
)
SEED_THINK = _tag_format("seed-think", ("<seed:think>",), ("</seed:think>",))
MINIMAX_THINK = _tag_format("minimax-think", ("<mm:think>",), ("</mm:think>",))
MISTRAL_THINK = _tag_format("mistral-think", ("[THINK]",), ("[/THINK]",))
APERTUS_INNER = _tag_format(
    "apertus-inner", ("<|inner_prefix|>",), ("<|inner_suffix|>",)
)
COHERE_THINKING = _tag_format(
    "cohere-thinking",
    ("<|START_THINKING|>",),
    ("<|END_THINKING|>",),
    answer_opens=("<|START_RESPONSE|>", "<|START_TEXT|>"),
    answer_closes=("<|END_RESPONSE|>", "<|END_TEXT|>"),
)
GEMMA4_CHANNEL = _tag_format(
    "gemma4-channel",
    ("<|channel>thought",),
    ("<channel|>",),
    # An empty channel opener (not "thought") is dropped, as llama.cpp does.
    noise=("<|channel>",),
    reopen=True,
)
SOLAR_THINK = _tag_format(
    "solar-think",
    ("<|think|>",),
    ("<|end|>",),
    answer_opens=("<|content|>",),
    answer_closes=("<|end|>",),
    noise=("<|begin|>assistant",),
    reopen=True,
)
KIMI_K3_SECTIONS = _tag_format(
    "kimi-k3-sections",
    ("<|open|>think<|sep|>",),
    ("<|close|>think<|sep|>",),
    answer_opens=("<|open|>response<|sep|>",),
    answer_closes=("<|close|>response<|sep|>",),
    noise=("<|close|>message<|sep|>", "<|end_of_msg|>"),
    reopen=True,
    hide_after_answer=True,
)
HARMONY = _header_format("harmony", ("<|end|>", "<|return|>", "<|call|>"))
GLIMMER = _header_format("glimmer-channels", ("<|eom|>", "<|eot|>"))


def _apriel_format() -> ReasoningFormat:
    # Apriel thinks from its first token; there is no opening marker at all.
    begin, end = "[BEGIN FINAL RESPONSE]", "[END FINAL RESPONSE]"
    return ReasoningFormat(
        "apriel",
        (
            ("start", _State(None, ((begin, "answer"),), on_text=THINKING)),
            ("think0", _State(THINKING, ((begin, "answer"),))),
            (THINKING, _State(THINKING, ((begin, "answer"),))),
            ("answer", _State(ANSWER, ((end, "answer"), (begin, "answer")))),
        ),
    )


APRIEL = _apriel_format()


def _hunyuan_format(source: str) -> ReasoningFormat:
    # Hunyuan 3 builds its tags as '<think{}>'.format(HYTK), HYTK = ':opensource'.
    suffix = re.search(r"set\s+HYTK\s*=\s*['\"]([^'\"]*)['\"]", source)
    tail = suffix.group(1) if suffix else ""
    return _tag_format("hunyuan-think", (f"<think{tail}>",), (f"</think{tail}>",))


def reasoning_format(template_source: str | None) -> ReasoningFormat:
    """Detect how a chat template's model marks its thinking.

    Parameters
    ----------
    template_source
        The Jinja source of the model's chat template, or None.

    Returns
    -------
    ReasoningFormat
        The family's format; :data:`NO_REASONING` (name ``"none"``) when the
        template shows no reasoning markers.
    """
    src = template_source or ""
    # Order matters where families share markers: the more specific first
    # (llama.cpp's common_chat_try_specialized_template orders them alike).
    if "<|channel|>" in src:
        return HARMONY
    if "to=self<|message|>" in src:
        return GLIMMER
    if "<|open|>" in src and "<|close|>" in src and "<|end_of_msg|>" in src:
        return KIMI_K3_SECTIONS
    if "<|channel>" in src and "<channel|>" in src:
        return GEMMA4_CHANNEL
    if "<seed:think>" in src:
        return SEED_THINK
    if "<mm:think>" in src:
        return MINIMAX_THINK
    if "<think{}>" in src:
        return _hunyuan_format(src)
    if "<|START_THINKING|>" in src:
        return COHERE_THINKING
    if "[THINK]" in src and "[/THINK]" in src:
        return MISTRAL_THINK
    if "[BEGIN FINAL RESPONSE]" in src:
        return APRIEL
    if "<|inner_prefix|>" in src and "<|inner_suffix|>" in src:
        return APERTUS_INNER
    if "<|think|>" in src and "<|begin|>assistant" in src:
        return SOLAR_THINK
    if "<think></think>" in src and "<response></response>" in src:
        return THINK_RESPONSE_TAGS
    # Old Qwen/DeepSeek templates only strip "</think>" from history.
    if "</think>" in src:
        return THINK_TAGS
    return NO_REASONING


def starts_in_thinking(fmt: ReasoningFormat, generation_prompt: str) -> bool:
    r"""Tell whether the generation prompt already opened the thinking block.

    Parameters
    ----------
    fmt
        The model's reasoning format.
    generation_prompt
        The text the template appends for ``add_generation_prompt`` (e.g.
        ``"<|im_start|>assistant\n<think>\n"``). The last marker in it
        decides, so text before the generation prompt (history a template
        re-renders) does no harm unless the prompt itself has no marker.

    Returns
    -------
    bool
        True when the reply's first text is thinking: the prompt ends inside
        an open thinking block, or the format thinks without an opening
        marker (Apriel).
    """
    state = fmt.state(ReasoningSplitter(fmt)._probe(generation_prompt))
    if state.sink is None and state.on_text is not None:
        state = fmt.state(state.on_text)
    return state.sink == THINKING


# --- Streaming ---------------------------------------------------------------


class _Channel:
    """What has been shown on one channel, and the whitespace held back.

    Leading whitespace is dropped when ``trim_leading``; trailing whitespace
    waits for more text (thinking drops it at the end, the answer releases
    it). A new block after earlier text starts on a blank line.
    """

    def __init__(self, trim_leading: bool, release_tail: bool) -> None:
        self.text = ""
        self._trim_leading = trim_leading
        self._release_tail = release_tail
        self._held = ""
        self._separator = False

    def new_block(self) -> None:
        """Start another block of this channel (after a block of the other)."""
        if self.text:
            self._held = "\n\n"
            self._separator = True

    def write(self, text: str) -> str:
        """Take text and return what may be shown now."""
        if not text:
            return ""
        if self._separator or (self._trim_leading and not self.text):
            text = text.lstrip()
            if not text:
                return ""
        self._separator = False
        body = text.rstrip()
        if not body:
            self._held += text
            return ""
        shown = self._held + body
        self._held = text[len(body) :]
        self.text += shown
        return shown

    def close(self) -> str:
        """End of reply: return the held whitespace if it is to be shown."""
        held, self._held = self._held, ""
        if self._release_tail and not self._separator and held:
            self.text += held
            return held
        return ""


class ReasoningSplitter:
    """Streams pieces of generated text into thinking and answer.

    Parameters
    ----------
    fmt
        The model's reasoning format (see :func:`reasoning_format`).
    in_thinking
        Whether the generation prompt already opened the thinking block (see
        :func:`starts_in_thinking`).

    Attributes
    ----------
    thinking : str
        Everything shown as thinking so far, without surrounding whitespace.
    answer : str
        Everything shown as answer so far, without leading whitespace.
    """

    def __init__(self, fmt: ReasoningFormat, in_thinking: bool = False) -> None:
        self.format = fmt
        self._states = dict(fmt.states)
        self._state = "start"
        if in_thinking and fmt.has_reasoning:
            # think0 tolerates the model repeating the prompt's opening marker.
            self._state = "think0" if "think0" in self._states else THINKING
        self._buffer = ""
        # Positions in the buffer that came from special tokens: never shown.
        self._hidden: list[bool] = []
        self._header_raw = ""
        self._header_shown = ""
        self._probing = False
        reasoning = fmt.has_reasoning
        self._channels = {
            THINKING: _Channel(trim_leading=True, release_tail=False),
            ANSWER: _Channel(trim_leading=reasoning, release_tail=True),
        }

    @property
    def thinking(self) -> str:
        """Return the thinking shown so far."""
        return self._channels[THINKING].text

    @property
    def answer(self) -> str:
        """Return the answer shown so far."""
        return self._channels[ANSWER].text

    def push(self, text: str, special: bool = False) -> list[tuple[str, str]]:
        """Take one token's text and return the pieces ready to show.

        Parameters
        ----------
        text
            The token's text exactly as the model emitted it.
        special
            Whether the token is a special/control token: its text counts for
            markers but is never shown.

        Returns
        -------
        list of (str, str)
            ``("thinking" | "answer", text)`` pieces, in order.
        """
        out: list[tuple[str, str]] = []
        self._buffer += text
        self._hidden.extend([special] * len(text))
        self._scan(final=False, out=out)
        return _merged(out)

    def flush(self) -> list[tuple[str, str]]:
        """End of reply: resolve and release everything held back."""
        out: list[tuple[str, str]] = []
        self._scan(final=True, out=out)
        in_header = self._states[self._state].sink == _HEADER
        if in_header and self._header_shown.strip() and "<|" not in self._header_raw:
            # Plain text where a header was expected: a model that does not
            # speak the format. A cut-off real header stays hidden.
            self._leave_header(out)
        for name, channel in self._channels.items():
            tail = channel.close()
            if tail:
                out.append((name, tail))
        return _merged(out)

    # -- the machine --

    def _probe(self, text: str) -> str:
        # Follow the markers of a prompt without showing anything: text does
        # not count as the reply's start, headers never fall back, and every
        # marker counts in every state, so the last one decides (a block
        # closed in history does not hide the prompt's own opening). A marker
        # leads into thinking from every state or from none, so one target
        # per marker is enough.
        targets: dict[str, str] = {}
        for _, state in self.format.states:
            for marker, target in state.markers:
                targets.setdefault(marker, target)
        everywhere = tuple(targets.items())
        self._states = {
            name: replace(state, markers=everywhere)
            for name, state in self._states.items()
        }
        self._probing = True
        self._buffer = text
        self._hidden = [False] * len(text)
        self._scan(final=True, out=[])
        return self._state

    def _scan(self, final: bool, out: list[tuple[str, str]]) -> None:
        while self._buffer:
            state = self._states[self._state]
            match_at, marker, held_at = _find_marker(self._buffer, state.markers, final)
            stop = min(match_at, held_at)
            if state.on_text is not None and not self._probing:
                first = self._first_visible(stop)
                if first is not None:
                    self._route(self._take(first), out)
                    self._enter(state.on_text, out)
                    continue
            if marker is None or held_at <= match_at:
                # No marker, or one not yet decided: show what precedes it.
                self._route(self._take(stop), out)
                return
            before = self._state
            self._route(self._take(match_at), out)
            if self._state != before:
                # A header that ran too long became the answer: the marker
                # belongs to the new state's rules, so look again.
                continue
            self._take(len(marker))
            self._enter(dict(state.markers)[marker], out)

    def _first_visible(self, stop: int) -> int | None:
        for i in range(stop):
            if not self._hidden[i] and not self._buffer[i].isspace():
                return i
        return None

    def _take(self, n: int) -> tuple[str, str]:
        raw = self._buffer[:n]
        hidden = self._hidden[:n]
        self._buffer = self._buffer[n:]
        del self._hidden[:n]
        if not any(hidden):
            return raw, raw
        return raw, "".join(c for c, h in zip(raw, hidden, strict=True) if not h)

    def _route(self, piece: tuple[str, str], out: list[tuple[str, str]]) -> None:
        raw, shown = piece
        sink = self._states[self._state].sink
        if sink == _HEADER:
            self._header_raw += raw
            self._header_shown += shown
            if len(self._header_raw) > _HEADER_LIMIT and not self._probing:
                self._leave_header(out)
        elif sink is not None and shown and not self._probing:
            visible = self._channels[sink].write(shown)
            if visible:
                out.append((sink, visible))

    def _leave_header(self, out: list[tuple[str, str]]) -> None:
        shown = self._header_shown
        self._enter("answer", out)
        self._route(("", shown), out)

    def _enter(self, name: str, out: list[tuple[str, str]]) -> None:
        if name == _CLASSIFY:
            name = _classify_header(self._header_raw)
        old = self._states[self._state].sink
        new = self._states[name].sink
        if new == _HEADER:
            self._header_raw = self._header_shown = ""
        elif new is not None and new != old:
            self._channels[new].new_block()
        self._state = name


def _find_marker(
    buffer: str, markers: tuple[tuple[str, str], ...], final: bool
) -> tuple[int, str | None, int]:
    """Find the next marker in ``buffer``.

    Returns ``(match_at, marker, held_at)``: the leftmost complete match (the
    longest at that position), or ``len(buffer)`` and None; and where the
    tail that could still become a marker begins (``len(buffer)`` when
    nothing is held, always when ``final``).
    """
    size = len(buffer)
    match_at, marker = size, None
    for m, _ in markers:
        at = buffer.find(m)
        if at != -1 and (
            at < match_at or (at == match_at and len(m) > len(marker or ""))
        ):
            match_at, marker = at, m
    held_at = size
    if not final:
        for m, _ in markers:
            # The longest proper prefix of m that the buffer ends with.
            for k in range(min(len(m) - 1, size), 0, -1):
                if size - k >= held_at:
                    break
                if buffer.endswith(m[:k]):
                    held_at = size - k
                    break
    return match_at, marker, held_at


_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")


def _classify_header(header: str) -> str:
    """Tell where a harmony/Glimmer message goes from its header's text.

    ``analysis`` (harmony) and ``to=self`` (Glimmer) are thinking; so is a
    message to a tool, which is the model's own business. Final and
    commentary (preamble) messages, and messages to the user, are the answer.
    """
    recipient = _RECIPIENT.search(header)
    if recipient and recipient.group(1) not in ("user", "all", "assistant"):
        return THINKING
    channel = _CHANNEL.search(header)
    if channel and channel.group(1) == "analysis":
        return THINKING
    return "answer"


def _merged(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for kind, text in pieces:
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def split_reply(
    fmt: ReasoningFormat, text: str, in_thinking: bool = False
) -> tuple[str, str]:
    """Split a whole reply into ``(thinking, answer)``.

    Parameters
    ----------
    fmt
        The model's reasoning format.
    text
        The generated text, markers included.
    in_thinking
        Whether the generation prompt already opened the thinking block.

    Returns
    -------
    tuple of str
        The thinking and the answer, as :class:`ReasoningSplitter` shows them.
    """
    splitter = ReasoningSplitter(fmt, in_thinking)
    splitter.push(text)
    splitter.flush()
    return splitter.thinking, splitter.answer


# --- Switching thinking on and off -------------------------------------------


@dataclass(frozen=True)
class ReasoningSwitch:
    """A template variable that turns thinking on or off, or sets its effort.

    Attributes
    ----------
    variable : str
        The template variable, e.g. ``"enable_thinking"``.
    choices : tuple of str
        User-facing choices, e.g. ``("on", "off")`` or ``("low", "medium",
        "high")``.
    default : str
        The choice the template makes when no variable is passed, under
        llama.cpp's convention that ``enable_thinking`` is always defined
        (true unless set), as :class:`~app.backend.chat_template.ChatTemplate`
        does too.
    settings : tuple
        ``(choice, ((name, value), ...))`` pairs: the variables of each choice.
    """

    variable: str
    choices: tuple[str, ...]
    default: str
    settings: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = field(repr=False)

    def variables(self, choice: str | None) -> dict[str, Any]:
        """Return the Jinja variables for a choice.

        Parameters
        ----------
        choice
            One of :attr:`choices`, or None for the template's default.

        Returns
        -------
        dict
            The variables to render with; ``{}`` for None.

        Raises
        ------
        ValueError
            If ``choice`` is not one of :attr:`choices`.
        """
        if choice is None:
            return {}
        for name, values in self.settings:
            if name == choice:
                return dict(values)
        raise ValueError(f"{choice!r} is not one of {self.choices}")


def _switch(variable: str, default: str, **settings: dict[str, Any]) -> ReasoningSwitch:
    # Keyword order is the order the choices are offered in.
    return ReasoningSwitch(
        variable=variable,
        choices=tuple(settings),
        default=default,
        settings=tuple(
            (name, tuple(values.items())) for name, values in settings.items()
        ),
    )


def _on_off(
    variable: str, default: str = "on", on: Any = True, off: Any = False
) -> ReasoningSwitch:
    return _switch(variable, default, on={variable: on}, off={variable: off})


def _levels(variable: str, levels: tuple[str, ...], default: str) -> ReasoningSwitch:
    return _switch(variable, default, **{level: {variable: level} for level in levels})


_LOW_MEDIUM_HIGH = ("low", "medium", "high")

# Each row: substrings the source must all contain, and the switch. Checked in
# order, the more specific first. Defaults are what the template does with
# enable_thinking defined as true; tests/backend/test_reasoning.py renders every
# reference template to check them.
_SWITCHES: tuple[tuple[tuple[str, ...], ReasoningSwitch], ...] = (
    # gpt-oss: "Reasoning: <effort>" in the system message.
    (
        ("<|channel|>", "reasoning_effort"),
        _levels("reasoning_effort", _LOW_MEDIUM_HIGH, "medium"),
    ),
    # Hunyuan 3: no_think closes the block in the generation prompt.
    (
        ("'no_think'", "reasoning_effort"),
        _switch(
            "reasoning_effort",
            "off",
            off={"reasoning_effort": "no_think"},
            low={"reasoning_effort": "low"},
            high={"reasoning_effort": "high"},
        ),
    ),
    # DeepSeek V4 Flash: thinking on/off, plus "high" and "max" effort prompts.
    (
        ("reasoning_effort_high", "thinking_start_token"),
        _switch(
            "thinking",
            "on",
            off={"thinking": False},
            on={"thinking": True},
            high={"thinking": True, "reasoning_effort": "high"},
            max={"thinking": True, "reasoning_effort": "max"},
        ),
    ),
    # DeepSeek V4: thinking on/off, plus a "max" effort prompt.
    (
        ("reasoning_effort_max", "thinking_start_token"),
        _switch(
            "thinking",
            "on",
            off={"thinking": False},
            on={"thinking": True},
            max={"thinking": True, "reasoning_effort": "max"},
        ),
    ),
    # Kimi K3: thinking on/off and an effort for the thinking section.
    (
        ("thinking_effort",),
        _switch(
            "thinking",
            "max",
            off={"thinking": False},
            low={"thinking": True, "thinking_effort": "low"},
            high={"thinking": True, "thinking_effort": "high"},
            max={"thinking": True, "thinking_effort": "max"},
        ),
    ),
    # MiniMax-M3: the model decides unless told.
    (
        ('thinking_mode == "adaptive"',),
        _switch(
            "thinking_mode",
            "auto",
            auto={"thinking_mode": "adaptive"},
            on={"thinking_mode": "enabled"},
            off={"thinking_mode": "disabled"},
        ),
    ),
    # Seed-OSS: a token budget; 0 skips the thinking, -1 is unlimited.
    (("thinking_budget", "<seed:think>"), _on_off("thinking_budget", on=-1, off=0)),
    # Cohere2 MoE: `reasoning`, or reasoning_effort "none".
    (("<|START_THINKING|>", "set reasoning = reasoning"), _on_off("reasoning")),
    # Solar Open: low or minimal effort closes the block in the prompt.
    (
        ('reasoning_effort in ["low", "minimal"]',),
        _on_off("reasoning_effort", on="high", off="low"),
    ),
    # Muse Glimmer: "Reasoning strength: <x>." in the system message.
    (
        ("reasoning_strength",),
        _levels("reasoning_strength", _LOW_MEDIUM_HIGH, "high"),
    ),
    # DeepSeek V3.1/V3.2: `thinking`, which falls back to enable_thinking.
    (
        ("not thinking is defined", "set thinking = enable_thinking"),
        _on_off("thinking"),
    ),
)

# Not `ns.enable_thinking` nor `namespace(enable_thinking=...)`: a namespace
# attribute is no template variable (Nemotron Nano v2 reads /think instead).
_ENABLE_THINKING = re.compile(r"(?<![.\w])enable_thinking\b(?!\s*=(?!=))")
# A bare `thinking` test in a Jinja statement (Granite 3.3: `elif thinking`).
_THINKING_TEST = re.compile(r"{%-?\s*(?:el)?if\s+(?:not\s+)?thinking\s*-?%}")


def reasoning_switch(template_source: str | None) -> ReasoningSwitch | None:
    """Detect the variable that switches a template's thinking.

    Parameters
    ----------
    template_source
        The Jinja source of the model's chat template, or None.

    Returns
    -------
    ReasoningSwitch or None
        The switch, or None when the template has no such variable.
    """
    src = template_source or ""
    for needles, switch in _SWITCHES:
        if all(n in src for n in needles):
            return switch
    if _ENABLE_THINKING.search(src):
        return _on_off("enable_thinking")
    if _THINKING_TEST.search(src):
        # Not aliased to enable_thinking, so undefined (false) by default.
        return _on_off("thinking", default="off")
    if re.search(r"\breasoning_effort\b", src):
        return _levels("reasoning_effort", _LOW_MEDIUM_HIGH, "medium")
    return None
