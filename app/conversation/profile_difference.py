"""Why a checkpoint made under another backend profile is not applied here.

A node keeps one checkpoint per profile: the model, the KV cache's types,
flash attention, the llama.cpp build, the CPU variant, the GPUs that held
layers and, with workers, which of their devices held which layers. Cells
another profile made restore without an error from llama.cpp, but are not
what this one would compute, so Arbor reprocesses instead and says which
difference kept it from using them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _placement(offload: Any) -> str:
    return f"with {offload}" if offload else "on the CPU alone"


# What each difference means to a user, given the other profile's value.
_REASONS: dict[str, Callable[[Any], str]] = {
    "model_identity": lambda _v: "with another model file",
    # Before "offload", which differs too: the workers are what the user changed.
    "workers": lambda v: (
        f"with its layers on workers ({v})" if v else "without workers"
    ),
    "offload": lambda v: f"with its layers placed otherwise ({_placement(v)})",
    "cpu_backend": lambda v: f"by another CPU backend ({v})",
    "llama_cpp": lambda v: f"by llama.cpp {v}",
    "type_k": lambda v: f"with a {v} KV cache",
    "flash_attn": lambda v: "with flash attention " + ("on" if v else "off"),
    "n_ctx": lambda v: f"at a context of {v} tokens",
    "checkpoint_format": lambda _v: "by an older Arbor",
}


def difference(here: dict[str, Any], there: dict[str, Any]) -> str:
    """The first difference between profile ``there`` and ``here``, as
    "made with its layers placed otherwise (…)", or "" when none is named."""
    for key, reason in _REASONS.items():
        if here.get(key) != there.get(key):
            return "made " + reason(there.get(key))
    return ""
