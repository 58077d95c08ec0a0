"""Synthetic conversations, built through the real service: long prompts, short replies.

Long user messages grow a path quickly (decoding a prompt is far faster than
generating), and short greedy replies keep generation time small. The text is
plain ASCII filler drawn with a fixed seed, so every run builds the same tree.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from app.backend.engine import LlamaEngine
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage import node_rows

Progress = Callable[[str], None]

SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly."

# Room a turn needs besides the user's words: template markup around the
# message, the assistant header and footer, and the reply itself.
_TURN_MARKUP_TOKENS = 16

_PROSE = (
    "tree branch leaf root river stone light garden path window morning "
    "evening letter story friend city market music table paper winter summer "
    "mountain forest bridge harbor island question answer journey lantern "
    "valley meadow orchard candle kitchen library teacher student engine "
    "signal number pattern memory shadow silver yellow quiet gentle careful "
    "simple ancient modern early later often always never again today "
    "walks reads writes builds carries follows remembers answers opens closes "
    "the a of and to in on with for about under over near between across"
)
_WORDS = tuple(_PROSE.split())


def filler_text(engine: LlamaEngine, n_tokens: int, seed: int) -> str:
    """ASCII prose of about ``n_tokens`` tokens for ``engine``'s tokenizer.

    Token counts depend on the tokenizer (a byte-level vocab spends a token
    per character), so the text is cut at the ``n_tokens``-th token.
    """
    rng = random.Random(seed)
    sentences = []
    # Generously long: even a byte-level tokenizer gets n_tokens from it.
    for _ in range(n_tokens // 4 + 1):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 14))]
        sentences.append(" ".join(words).capitalize() + ".")
    tokens = engine.tokenize(" ".join(sentences))[:n_tokens]
    text = b"".join(engine.token_bytes(t) for t in tokens)
    return text.decode("ascii", errors="ignore").strip()


def greedy(max_tokens: int) -> SamplingParams:
    """Deterministic sampling: same prompt, same reply, in every arm and run."""
    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


@dataclass(frozen=True)
class LinearChat:
    """A linear conversation and its nodes closest to each target path length."""

    conversation_id: int
    root_id: int
    milestones: dict[int, int]  # target tokens -> assistant node id
    leaf_id: int


def build_linear_chat(
    service: ConversationService,
    targets: list[int],
    turn_tokens: int,
    reply_tokens: int,
    progress: Progress,
) -> LinearChat:
    """Grow one chat turn by turn, recording the node where each target is reached.

    The last turn before a target is sized so the path ends near the target.
    """
    engine = service.engine
    assert engine is not None
    conversation, root = service.new_conversation(SYSTEM_PROMPT, "bench: linear chat")
    node, end = root, node_rows.get_node(service.db, root).end_pos
    milestones: dict[int, int] = {}
    turn = 0
    for target in sorted(targets):
        while end < target:
            room = target - end - _TURN_MARKUP_TOKENS - reply_tokens
            text = filler_text(engine, max(8, min(turn_tokens, room)), seed=turn)
            reply = service.send(node, text, greedy(reply_tokens))
            node, end = reply.assistant_node, reply.stats.context_tokens
            turn += 1
        milestones[target] = node
        progress(f"linear chat reached {end} tokens (target {target})")
    return LinearChat(conversation, root, milestones, node)


@dataclass(frozen=True)
class SiblingPair:
    """Two branches under one fork node whose user messages are equally long."""

    fork_id: int
    message_tokens: int
    leaves: tuple[int, int]


def build_sibling_pair(
    service: ConversationService,
    fork_id: int,
    message_tokens: int,
    reply_tokens: int,
) -> SiblingPair:
    """Add two user messages (and replies) of about ``message_tokens`` under a node."""
    engine = service.engine
    assert engine is not None
    leaves = tuple(
        service.send(
            fork_id,
            filler_text(engine, message_tokens, seed=10_000 + 7 * message_tokens + i),
            greedy(reply_tokens),
        ).assistant_node
        for i in range(2)
    )
    return SiblingPair(fork_id, message_tokens, (leaves[0], leaves[1]))


def build_bushy_tree(
    service: ConversationService,
    width: int,
    message_tokens: int,
    reply_tokens: int,
) -> int:
    """Build a tree as branching use makes it; return its conversation id.

    ``width`` questions under the root, two replies to each (a regeneration),
    and two follow-up questions with a reply under every reply.
    """
    engine = service.engine
    assert engine is not None
    conversation, root = service.new_conversation(SYSTEM_PROMPT, "bench: bushy tree")
    seed = 20_000
    for _ in range(width):
        seed += 1
        first = service.send(
            root, filler_text(engine, message_tokens, seed), greedy(reply_tokens)
        )
        # A sampled regeneration, so the two replies differ as they would in use.
        again = service.regenerate(
            first.assistant_node,
            SamplingParams(temperature=0.8, seed=seed, max_tokens=reply_tokens),
        )
        for reply_id in (first.assistant_node, again.assistant_node):
            for _ in range(2):
                seed += 1
                service.send(
                    reply_id,
                    filler_text(engine, message_tokens, seed),
                    greedy(reply_tokens),
                )
    return conversation
