"""The reference for exactness: a reply's logits computed afresh from what is
stored (every span above it decoded in its recorded batch sizes, then the
reply's opening in one batch, as the service generates)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation import folding
from storage.records import NodeRecord


def replayed_digest(
    model: Path, path: list[NodeRecord], settings: BackendSettings | None = None
) -> str:
    """The ``logits_digest`` the reply at the end of ``path`` should have."""
    reply = path[-1]
    settings = settings or BackendSettings(n_ctx=1024, n_threads=1)
    with LlamaEngine(model, settings) as fresh:
        for node in folding.effective(path[:-1]):
            fresh.decode(node.tokens, node.chunks or None)
        opening = list(reply.tokens[: reply.chunks[0]])
        fresh.decode(opening, [len(opening)])
        return hashlib.sha256(fresh.logits().tobytes()).hexdigest()
