"""Will a model fit this machine? Its file plus its KV cache at the context
size Arbor would use, against the machine's memory."""

from __future__ import annotations

from dataclasses import dataclass

from app.backend.offload import headroom
from app.text.quantities import format_bytes

# What llama.cpp needs besides the weights and the KV cache: compute buffers,
# the tokenizer, the output logits. Measured roughly: ~150 MB for a 135M model,
# a few hundred MB for an 8B at 4k context; this errs on the safe side.
_RUNTIME_OVERHEAD = 512 * 1024**2
# A model's share of memory that leaves the rest of the desktop usable.
_COMFORTABLE_SHARE = 0.7
# Without the model's own shape, a typical 7-8B's KV cache (f16, GQA).
_UNKNOWN_KV_PER_TOKEN = 128 * 1024


@dataclass(frozen=True)
class Fit:
    """The verdict for one model file.

    ``verdict`` is ``"fits"``, ``"tight"`` (fits, but the desktop will feel
    it) or ``"too big"``; ``estimated`` is True when the KV cache size was
    guessed because the model's shape is not known yet.
    """

    need_bytes: int
    have_bytes: int
    verdict: str
    estimated: bool
    gpu: str = ""  # "all" (it fits the GPU whole), "part" (split) or "" (no GPU)

    @property
    def fits(self) -> bool:
        """True unless the model needs more than the machine has."""
        return self.verdict != "too big"

    def describe(self) -> str:
        """One phrase for a list: "fits (needs 3.1 GB of 16 GB)"."""
        about = "about " if self.estimated else ""
        return (
            f"{self.verdict} (needs {about}{format_bytes(self.need_bytes)} "
            f"of {format_bytes(self.have_bytes)}{self.gpu_note})"
        )

    @property
    def gpu_note(self) -> str:
        """ "; all on the GPU", "; partly on the GPU" or ""."""
        return {"all": "; all on the GPU", "part": "; partly on the GPU"}.get(
            self.gpu, ""
        )


def machine_memory() -> int:
    """The machine's physical memory in bytes."""
    import psutil  # only when asked: the CLI's quick commands never need it

    return int(psutil.virtual_memory().total)


def assess(
    file_bytes: int,
    n_ctx: int,
    kv_bytes_per_token: int | None = None,
    have_bytes: int | None = None,
    gpu_bytes: int = 0,
) -> Fit:
    """The fit of a model of ``file_bytes`` at a context of ``n_ctx`` tokens.

    llama.cpp maps the weights and allocates the whole KV cache for ``n_ctx``
    at load, so both count in full. With a GPU of ``gpu_bytes``, the layers
    that fit there (less the headroom an automatic offload leaves) add its
    memory to the machine's.
    """
    usable_gpu = max(0, gpu_bytes - headroom(gpu_bytes)) if gpu_bytes else 0
    have = (machine_memory() if have_bytes is None else have_bytes) + usable_gpu
    per_token = kv_bytes_per_token or _UNKNOWN_KV_PER_TOKEN
    need = file_bytes + n_ctx * per_token + _RUNTIME_OVERHEAD
    gpu = ("all" if need <= usable_gpu else "part") if usable_gpu else ""
    if need <= have * _COMFORTABLE_SHARE:
        verdict = "fits"
    elif need <= have:
        verdict = "tight"
    else:
        verdict = "too big"
    return Fit(need, have, verdict, estimated=kv_bytes_per_token is None, gpu=gpu)
