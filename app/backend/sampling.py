"""The llama.cpp sampler chain built from ``SamplingParams``, and a grammar.

A :class:`~app.backend.tool_calls.Constraint` adds llama.cpp's grammar
sampler, which masks every token that would leave the grammar and, once the
grammar is complete, allows only end-of-generation tokens. A constraint with
triggers is llama.cpp's lazy grammar: it masks nothing until a trigger
pattern matches the text generated so far.

The grammar is not run over the whole vocabulary at every step: the chain
samples first, and only a token the grammar refuses has the step sampled
again with the grammar applied first, as llama.cpp's own sampler does. On
Gemma 3's 262,144 tokens, a JSON-schema reply sampled 38.8 ms a token with
the grammar over every candidate and 16.8 ms so (tools/grammar_speed.py,
the machine alone); most tokens of a constrained reply are the model's own
choice anyway.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from app.backend.tool_calls import Constraint, GrammarError
from app.backend.values import PENALTY_LAST_N, SamplingParams

# llama.cpp's llama_token_data: the candidates' layout it samples from.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class Sampler:
    """A llama.cpp sampler chain; free it with ``close`` (or use ``with``).

    Parameters
    ----------
    params
        The sampling settings.
    history
        The context's tokens, for the repeat penalty.
    n_vocab
        The vocabulary's size.
    vocab
        The model's ``llama_vocab`` pointer; needed with a constraint.
    constraint
        A grammar the reply must follow, if any.

    Raises
    ------
    GrammarError
        If llama.cpp refuses the grammar (its log says where).
    """

    def __init__(
        self,
        params: SamplingParams,
        history: Sequence[int],
        n_vocab: int,
        vocab: Any = None,
        constraint: Constraint | None = None,
    ) -> None:
        self._chain: Any = None
        self._grammar: Any = None
        self._n_vocab = n_vocab
        grammar = None if constraint is None else _grammar(vocab, constraint)
        chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )
        self._chain = chain

        def add(sampler: Any) -> Any:
            llama_cpp.llama_sampler_chain_add(chain, sampler)
            return sampler

        # The grammar stays apart from the chain (``sample``).
        self._grammar = grammar
        self._candidates: np.ndarray | None = None
        penalties = None
        if params.repeat_penalty != 1.0:
            penalties = add(
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
        # The penalty sampler remembers accepted tokens; feeding it the context's
        # recent tokens makes a reply depend only on the stored tokens, so a
        # restored conversation samples exactly like the original process.
        # The penalty sampler alone: the grammar is the reply's, and the
        # context's tokens are not text it allows (llama.cpp aborts on those).
        if penalties is not None:
            for token in history[-PENALTY_LAST_N:]:
                llama_cpp.llama_sampler_accept(penalties, token)

    def sample(self, ctx: Any, row: int = -1) -> int:
        """Choose (and accept) the next token from the logits of batch ``row``
        (by default the last decoded token's)."""
        if self._grammar is None:
            return int(llama_cpp.llama_sampler_sample(self._chain, ctx, row))
        logits = llama_cpp.llama_get_logits_ith(ctx, row)
        token = self._choose(logits, grammar_first=False)
        if not self.allows(token):
            token = self._choose(logits, grammar_first=True)
        llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def _choose(self, logits: Any, grammar_first: bool) -> int:
        """The chain's choice among all tokens, or among those the grammar
        allows, without accepting it."""
        if self._candidates is None:
            self._candidates = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        candidates = self._candidates
        # All three again each time: the samplers sort and rewrite them.
        candidates["id"] = np.arange(self._n_vocab, dtype=np.int32)
        candidates["logit"] = np.ctypeslib.as_array(logits, shape=(self._n_vocab,))
        candidates["p"] = 0.0
        array = llama_cpp.llama_token_data_array(
            data=candidates.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=self._n_vocab,
            selected=-1,
            sorted=False,
        )
        if grammar_first:
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def accept(self, token: int) -> None:
        """Record ``token`` as chosen without sampling it.

        Raises
        ------
        GrammarError
            If the grammar does not allow ``token`` here: llama.cpp would
            abort the process on it, so the token is checked first.
        """
        if self._grammar is not None:
            if not self.allows(token):
                raise GrammarError(
                    f"token {token} is not allowed by the reply's grammar"
                )
            llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self._chain, token)

    def allows(self, token: int) -> bool:
        """Whether the grammar (if any) lets ``token`` come next."""
        if self._grammar is None:
            return True
        data = llama_cpp.llama_token_data(id=token, logit=0.0, p=0.0)
        candidates = llama_cpp.llama_token_data_array(
            data=ctypes.pointer(data), size=1, selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(candidates))
        return bool(data.logit != float("-inf"))

    def close(self) -> None:
        """Free the native chain and the grammar."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self._grammar is not None:
            llama_cpp.llama_sampler_free(self._grammar)
            self._grammar = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _grammar(vocab: Any, constraint: Constraint) -> Any:
    """Compile ``constraint`` into a grammar sampler (not yet in a chain)."""
    if vocab is None:
        raise GrammarError("a grammar needs the model's vocabulary")
    gbnf, root = constraint.gbnf.encode("utf-8"), b"root"
    if constraint.triggers:
        patterns = [p.encode("utf-8") for p in constraint.triggers]
        array = (ctypes.c_char_p * len(patterns))(*patterns)
        grammar = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            vocab, gbnf, root, array, len(patterns), None, 0
        )
    else:
        grammar = llama_cpp.llama_sampler_init_grammar(vocab, gbnf, root)
    if not grammar:
        # llama.cpp logs the parse error; the grammar's head says which one.
        head = constraint.gbnf.strip().splitlines()[:1]
        raise GrammarError(
            "llama.cpp refused the grammar (a GBNF syntax error, an undefined "
            f"rule, or a trigger pattern it cannot compile); it starts: {head}"
        )
    return grammar
