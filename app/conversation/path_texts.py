"""The texts a path's spans must make the context read, for a whole path at once.

A span is placed so that the context after it reads what the template renders
for the path through its node (``spans.place``): for a user message, the
rendering through its turn and the generation prompt after it; for a reply,
the rendering through the reply as the next turn reads it. Rendered node by
node (``exact``), the template goes over every turn above each node, so the
first visit of an imported path of n messages renders n times over up to n
turns: O(n²), most of the 17.8 s CPU that a 1,001-message path's first visit
spent outside the model here (``tools/scale_first_visit.py``).

``whole_path`` gets the same texts from short windows of the path. A
template that renders a turn the same way whatever came more than a round
before it renders the path through a turn as

    the rendering through the user turn a round above it
    + what a window ending with the same turns adds after that user turn,

where a window keeps the first user turn (templates put the system prompt
there, or count alternating roles from it), one round of context, and the
turns from the base user turn on. Each node then costs one window of a few
turns, and the rendering through each user turn is carried down the path.
Earlier replies whose reasoning a template drops (Qwen3, DeepSeek-R1,
gpt-oss) and a last reply rendered unlike an earlier one fit this: they
depend on where the last user turn is, which every window has.

That a template does so is checked, not assumed. Each window must render the
turns it shares with its base as a prefix of its own rendering (a template
that moves text between turns, as Mistral's moves the system prompt to the
last user turn, does not, and ``whole_path`` declines). Then the texts of a
few nodes, the first ones a window with a gap serves, two in the middle and
the last two, are rendered in full and compared: the rendering through each
user turn is carried from one window to the next, so a difference anywhere
above the last node shows there. Any difference, a path whose roles do not
alternate, or a template error in a window, and ``whole_path`` returns None:
the spans are then placed from ``exact`` texts, node by node, as always.

The comparison samples: a template that rendered one turn in the middle of a
long path otherwise for something more than a round away, and only there,
would go unseen. None of llama.cpp's reference templates (103 of them, its
``models/templates`` and ``test-chat-template.cpp``) does, on any node:
``tests/conversation/test_first_visit_linear.py`` compares every node's texts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.backend.chat_format import ChatFormat, Message, TemplateError

log = logging.getLogger(__name__)

Variables = Mapping[str, Any] | None

# Rounds (a reply and the user turn after it) a window keeps above its base
# user turn, after the first user turn.
_CONTEXT_ROUNDS = 1

# Where markup ends: a user turn cut back there (chat_format's ``_turn_end``)
# depends only on the window's own text after its base when it ends on one.
_LINE_ENDS = ("\n", ">")


@dataclass(frozen=True)
class UserText:
    """What the context reads through a user's turn, and the generation
    prompt that follows it (the reply's opening)."""

    through: str
    prompt: str


Target = UserText | str
"""A user turn's ``UserText``, or the text through a reply."""

# The turns a reply answers: the generation prompt follows them.
INPUT_ROLES = ("user", "tool")


def exact(
    fmt: ChatFormat, system: str | None, turns: Sequence[Message], variables: Variables
) -> Target:
    """The target of the last of ``turns``, rendered over all of them."""
    if turns[-1].role in INPUT_ROLES:
        through, with_prompt = fmt.prompt(system, turns, variables)
        return UserText(through, with_prompt[len(through) :])
    return fmt.reply_history(system, turns, variables)


class PathTexts:
    """The targets of a path's turns, each made when asked for.

    They share the text carried down the path (the rendering through the
    latest user turn, which only grows), so holding them all costs one
    context's text and what each adds to it, not a context per node.
    """

    def __init__(self) -> None:
        self._carried = ""
        # Per turn: how much of the carried text its target starts with, what
        # follows that, and for a user turn the generation prompt.
        self._parts: list[tuple[int, str, str | None]] = []

    def __len__(self) -> int:
        """The number of turns."""
        return len(self._parts)

    def __getitem__(self, turn: int) -> Target:
        """The target of ``turn`` (0: the first user turn)."""
        length, rest, prompt = self._parts[turn]
        text = self._carried[:length] + rest
        return text if prompt is None else UserText(text, prompt)

    def add(self, target: Target) -> None:
        """Add a turn rendered in full (the first ones)."""
        if isinstance(target, UserText):
            self._parts.append((0, target.through, target.prompt))
        else:
            self._parts.append((0, target, None))

    def carry(self, through: str) -> None:
        """Carry the rendering through a user turn from here on."""
        self._carried = through

    def add_reply(self, rest: str) -> None:
        """Add a reply whose target is the carried text and ``rest``."""
        self._parts.append((len(self._carried), rest, None))

    def add_user(self, rest: str, prompt: str) -> None:
        """Add a user turn: the carried text grows by ``rest``."""
        self._carried += rest
        self._parts.append((len(self._carried), "", prompt))


def whole_path(
    fmt: ChatFormat, system: str | None, turns: Sequence[Message], variables: Variables
) -> PathTexts | None:
    """The target of every turn of a path (``exact`` of each prefix), or None.

    ``turns`` are the path's messages without the root: user turns first,
    then alternating. None where the windows' texts could not be shown to
    be the exact ones (see the module docstring).
    """
    if not _alternates(turns):
        return None
    try:
        targets = _windowed(fmt, system, turns, variables)
        if targets is None:
            log.debug("the template moves text between turns; rendering per node")
            return None
        for t in _checked(len(turns)):
            if exact(fmt, system, turns[: t + 1], variables) != targets[t]:
                log.info(
                    "turn %d of %d renders unlike its window; rendering per node",
                    t,
                    len(turns),
                )
                return None
    except TemplateError as exc:
        log.debug("a window of the path does not render (%s); per node", exc)
        return None
    return targets


def _alternates(turns: Sequence[Message]) -> bool:
    return all(
        message.role == ("user" if t % 2 == 0 else "assistant")
        for t, message in enumerate(turns)
    )


def _first_gapped_base() -> int:
    # The first base user turn whose window leaves turns out.
    return 2 * _CONTEXT_ROUNDS + 2


def _checked(count: int) -> list[int]:
    """Turns whose windowed texts are compared with their exact ones."""
    first = _first_gapped_base() + 1
    if count <= first:
        return []  # every window is the whole path above its turn
    middle = max(first, count // 2)
    wanted = {first, first + 1, middle, middle + 1, count - 2, count - 1}
    return sorted(t for t in wanted if first <= t < count)


def _windowed(
    fmt: ChatFormat, system: str | None, turns: Sequence[Message], variables: Variables
) -> PathTexts | None:
    """Every turn's target from windows; None where a window's rendering does
    not begin with its base's."""
    count = len(turns)
    targets = PathTexts()
    first = exact(fmt, system, turns[:1], variables)
    assert isinstance(first, UserText)
    targets.add(first)
    # What is carried is a user turn's ``through``: the rendering of a
    # conversation that ends there may close it otherwise (Phi-3 ends one
    # with ``eos_token``), the next turn's does not.
    targets.carry(first.through)
    for base in range(0, count, 2):
        reply, user = base + 1, base + 2
        if reply >= count:
            break
        start = base - 2 * _CONTEXT_ROUNDS + 1
        if start <= 1:
            # The window is the whole path above: its texts are the exact ones.
            targets.add(exact(fmt, system, turns[: reply + 1], variables))
            if user < count:
                target = exact(fmt, system, turns[: user + 1], variables)
                assert isinstance(target, UserText)
                targets.add(target)
                targets.carry(target.through)
            continue
        head = [turns[0], *turns[start : base + 1]]
        base_text, _prompt = fmt.prompt(system, head, variables)
        cut = len(base_text)
        text = fmt.reply_history(system, [*head, turns[reply]], variables)
        if len(text) <= cut or not text.startswith(base_text):
            return None
        targets.add_reply(text[cut:])
        if user >= count:
            break
        window = [*head, turns[reply], turns[user]]
        through, with_prompt = fmt.prompt(system, window, variables)
        without = fmt.history(system, window, variables)
        if not (
            len(through) > cut
            and with_prompt.startswith(base_text)
            and without.startswith(base_text)
            # Where the turn was cut back, it was cut after the window's own
            # markup, as it would be after the whole path's.
            and (len(through) == len(without) or through.endswith(_LINE_ENDS))
        ):
            return None
        targets.add_user(through[cut:], with_prompt[len(through) :])
    return targets
