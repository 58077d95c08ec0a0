"""Sampling parameters and the llama.cpp sampler chain built from them."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import llama_cpp

from app.backend.errors import InvalidSetting

# How many earlier tokens the repeat penalty looks at.
PENALTY_LAST_N = 64

_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
# llama.cpp takes these as C floats; far below that limit the output is
# already noise, so a larger value is a typo rather than a choice.
_MAX_FACTOR = 1000.0


def _check_float(
    name: str, value: float, low: float, high: float, low_open: bool = False
) -> None:
    """Raise ``InvalidSetting`` unless ``value`` is a finite number in range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSetting(f"{name} must be a number, not {value!r}.")
    if not math.isfinite(value):
        raise InvalidSetting(f"{name} must be a finite number, not {value}.")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        lower = f"above {low:g}" if low_open else f"at least {low:g}"
        raise InvalidSetting(
            f"{name} must be {lower} and at most {high:g}, not {value:g}."
        )


def _check_int(name: str, value: int, low: int, high: int) -> None:
    """Raise ``InvalidSetting`` unless ``value`` is a whole number in range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSetting(f"{name} must be a whole number, not {value!r}.")
    if not low <= value <= high:
        raise InvalidSetting(f"{name} must be between {low:,} and {high:,}.")


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
        # Checked here, where every caller (CLI, settings dialog, stored
        # preferences) passes: llama.cpp takes these as C floats and 32-bit
        # integers, where a NaN or an overflow would be silently wrong.
        _check_float("The temperature", self.temperature, 0.0, _MAX_FACTOR)
        _check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_float("min_p", self.min_p, 0.0, 1.0)
        _check_float(
            "The repeat penalty", self.repeat_penalty, 0.0, _MAX_FACTOR, low_open=True
        )
        _check_int("top_k", self.top_k, 0, _INT32_MAX)
        _check_int("max_tokens", self.max_tokens, 1, _INT32_MAX)
        if self.seed is not None:
            _check_int("The seed", self.seed, 0, _UINT32_MAX)

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
