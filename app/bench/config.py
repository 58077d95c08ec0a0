"""The knobs of one benchmark run: sizes of the synthetic conversations, repeats."""

from __future__ import annotations

from dataclasses import dataclass

# The path length the cold-resume and sibling-switch targets of the issue refer to.
REFERENCE_PATH_TOKENS = 2048


@dataclass(frozen=True)
class BenchConfig:
    """Sizes and repeats of one benchmark run.

    Attributes
    ----------
    repeats
        Every timed figure is the median of this many measurements.
    path_targets
        Cold-resume path lengths in tokens (the longest is clipped to the context).
    turn_tokens
        Size of each synthetic user message while the linear chat grows; long
        messages build long paths fast, since prompt decoding is far faster
        than generation.
    reply_tokens
        Most tokens of each synthetic reply (greedy, kept short for speed).
    sibling_cases
        ``(fork target, suffix message tokens)``: two sibling branches whose
        user messages have about that many tokens, forked at the linear chat's
        node nearest the target.
    overhead_prompts
        Prompts generated with checkpointing off, on, and queued.
    overhead_tokens
        Most tokens generated per overhead prompt.
    bushy_width
        Questions under the bushy tree's root; each gets two replies, each
        reply two follow-ups.
    bushy_message_tokens
        Size of each user message of the bushy tree.
    alternatives_counts
        How many alternatives to generate together (and one by one).
    alternatives_tokens
        Most tokens of each alternative.
    """

    repeats: int = 3
    path_targets: tuple[int, ...] = (256, 1024, 2048, 4096)
    turn_tokens: int = 240
    reply_tokens: int = 8
    sibling_cases: tuple[tuple[int, int], ...] = (
        (2048, 16),
        (2048, 128),
        (2048, 512),
        (256, 128),
    )
    overhead_prompts: int = 3
    overhead_tokens: int = 64
    bushy_width: int = 3
    bushy_message_tokens: int = 48
    alternatives_counts: tuple[int, ...] = (1, 2, 4)
    alternatives_tokens: int = 64

    def __post_init__(self) -> None:
        """Reject configurations the scenarios cannot run."""
        if self.repeats < 1:
            raise ValueError("repeats must be at least 1")
        missing = {fork for fork, _ in self.sibling_cases} - set(self.path_targets)
        if missing:
            raise ValueError(f"sibling forks {sorted(missing)} are not path targets")

    @classmethod
    def quick(cls, repeats: int = 1) -> BenchConfig:
        """Return a run small enough for a test on the tiny model, all sections kept."""
        return cls(
            repeats=repeats,
            path_targets=(128, 256),
            turn_tokens=64,
            reply_tokens=4,
            sibling_cases=((256, 8), (256, 32), (128, 8)),
            overhead_prompts=1,
            overhead_tokens=8,
            bushy_width=1,
            bushy_message_tokens=16,
            alternatives_tokens=8,
        )
