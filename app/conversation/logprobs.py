"""The log probabilities of a reply's tokens, for clients that ask for them
(OpenAI's ``logprobs`` and ``top_logprobs``).

They are the model's own distribution at each step (a softmax of the raw
logits), before temperature, top-k/p or a grammar shape it: what the model
thought of the token it was given, as OpenAI reports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

# OpenAI's bound on top_logprobs.
MAX_TOP_LOGPROBS = 20


def token_logprobs(
    engine: LlamaEngine, row: int, token: int, top: int
) -> dict[str, Any]:
    """``token``'s entry, sampled from batch ``row``'s logits, with the
    ``top`` most likely tokens beside it (OpenAI's ``logprobs.content`` item)."""
    # Here, not at the top: the window imports the generation pipeline's
    # names without loading numpy (tests/system/test_import_weight.py).
    import numpy as np

    logits = engine.logits(row).astype(np.float64)
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak).sum()))
    entry = _entry(engine, token, float(logits[token]) - log_total)
    if top > 0:
        best = np.argpartition(-logits, top - 1)[:top]
        best = best[np.argsort(-logits[best], kind="stable")]
        entry["top_logprobs"] = [
            _entry(engine, int(t), float(logits[t]) - log_total) for t in best
        ]
    else:
        entry["top_logprobs"] = []
    return entry


def _entry(engine: LlamaEngine, token: int, logprob: float) -> dict[str, Any]:
    data = engine.token_bytes(token, special=True)
    return {
        "token": data.decode("utf-8", errors="replace"),
        "logprob": logprob,
        "bytes": list(data),
    }
