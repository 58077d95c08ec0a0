"""What the conversation service answers: the figures of reaching a node and
of a reply, and the reply itself. Plain values, without the engine, so the
window and its jobs can name them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    """Why a reply's generation ended (stored with the reply as the word)."""

    END_OF_TURN = "end_of_turn"  # the model ended its turn
    STOP_STRING = "stop_string"  # it wrote a stop string asked for
    MAX_TOKENS = "max_tokens"  # it reached the length limit
    CONTEXT_FULL = "context_full"  # the context filled up mid-reply
    STOPPED = "stopped"  # the user (or a client gone away) stopped it


@dataclass
class SyncStats:
    """What it took to reach a node.

    ``restore_ms`` is the whole of restoring checkpoints; of it, ``read_ms``
    went to reading blobs from SQLite, ``verify_ms`` to their checksums and
    ``apply_ms`` to the engine (combining deltas, llama.cpp).
    """

    kept_tokens: int = 0
    restored_tokens: int = 0
    reprocessed_tokens: int = 0
    restore_ms: float = 0.0
    read_ms: float = 0.0
    verify_ms: float = 0.0
    apply_ms: float = 0.0
    reprocess_ms: float = 0.0
    checkpoint_bytes_read: int = 0
    checkpoint_bytes_written: int = 0
    fallbacks: list[str] = field(default_factory=list)


@dataclass
class ReplyStats(SyncStats):
    """Figures of one reply: how the context was reached (the ``SyncStats``
    fields), then the prompt and the generation."""

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generate_ms: float = 0.0
    tokens_per_second: float = 0.0
    # Alternatives generated together: decoding the reply's span again alone,
    # which makes its checkpoint exact (see ``regenerate_parallel``).
    redecode_ms: float = 0.0
    context_tokens: int = 0
    n_ctx: int = 0
    stop_reason: StopReason | None = None
    logits_digest: str = ""

    @classmethod
    def after(cls, sync: SyncStats) -> ReplyStats:
        """Start a reply's figures with what moving to its parent cost."""
        return cls(**asdict(sync))

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with times rounded for display."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float):
                data[key] = round(value, 3)
        return data


@dataclass
class Restored(SyncStats):
    """What a restore took (the ``SyncStats`` fields) and where it left its
    conversation: at ``node_id``, its active node now."""

    conversation_id: int = 0
    node_id: int = 0


@dataclass(frozen=True)
class Reply:
    """The outcome of send, edit or regenerate: the reply is
    ``assistant_node`` of conversation ``conversation_id``, where the engine
    now stands (for alternatives, the first one's)."""

    user_node: int | None
    assistant_node: int
    text: str
    stats: ReplyStats
    conversation_id: int
    thinking: str = ""
    # The tools it called, each {"id", "name", "arguments"} (storage.tool_use).
    tool_calls: tuple[dict[str, str], ...] = ()
    # Its tokens' log probabilities, where asked for (``logprobs``); not stored.
    logprobs: tuple[dict[str, Any], ...] = ()
