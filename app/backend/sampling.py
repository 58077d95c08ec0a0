"""The llama.cpp sampler chain built from ``SamplingParams``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp

from app.backend.values import PENALTY_LAST_N, SamplingParams


class Sampler:
    """A llama.cpp sampler chain; free it with ``close`` (or use ``with``)."""

    def __init__(
        self, params: SamplingParams, history: Sequence[int], n_vocab: int
    ) -> None:
        chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )

        def add(sampler: Any) -> None:
            llama_cpp.llama_sampler_chain_add(chain, sampler)

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

    def sample(self, ctx: Any, row: int = -1) -> int:
        """Choose (and accept) the next token from the logits of batch ``row``
        (by default the last decoded token's)."""
        return int(llama_cpp.llama_sampler_sample(self._chain, ctx, row))

    def accept(self, token: int) -> None:
        """Record ``token`` as chosen (for the repeat penalty) without sampling."""
        llama_cpp.llama_sampler_accept(self._chain, token)

    def close(self) -> None:
        """Free the native chain."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
