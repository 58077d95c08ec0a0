"""Sampling parameters and the llama.cpp sampler chain built from them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import llama_cpp

# How many earlier tokens the repeat penalty looks at.
PENALTY_LAST_N = 64


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. ``temperature`` 0 means greedy.

    ``seed`` None picks a random seed; the seed actually used is recorded on
    the reply so it can be reproduced.
    """

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 512
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not 0 < self.top_p <= 1 or not 0 <= self.min_p <= 1:
            raise ValueError("top_p must be in (0, 1] and min_p in [0, 1]")

    def with_seed(self) -> SamplingParams:
        """Return these params with a concrete seed (drawn now if unset)."""
        if self.seed is not None:
            return self
        return replace(self, seed=random.randrange(2**31))

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for storing on a node."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        """Build from a stored dict, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Sampler:
    """A llama.cpp sampler chain; free it with ``close`` (or use ``with``)."""

    def __init__(
        self, params: SamplingParams, history: Sequence[int], n_vocab: int
    ) -> None:
        chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )
        add = lambda sampler: llama_cpp.llama_sampler_chain_add(chain, sampler)  # noqa: E731
        if params.repeat_penalty != 1.0:
            add(
                llama_cpp.llama_sampler_init_penalties(
                    n_vocab, PENALTY_LAST_N, params.repeat_penalty, 0.0, 0.0
                )
            )
        if params.temperature == 0:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0:
                add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            seed = (
                params.seed if params.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED
            )
            add(llama_cpp.llama_sampler_init_dist(seed))
        self._chain = chain
        # The penalty sampler remembers accepted tokens; feeding it the context's
        # recent tokens makes a reply depend only on the stored tokens, so a
        # restored conversation samples exactly like the original process.
        for token in history[-PENALTY_LAST_N:]:
            llama_cpp.llama_sampler_accept(chain, token)

    def sample(self, ctx: Any) -> int:
        """Choose (and accept) the next token from the last decoded logits."""
        return int(llama_cpp.llama_sampler_sample(self._chain, ctx, -1))

    def close(self) -> None:
        """Free the native chain."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
