"""What a GGUF file name says: its quantization, whether it is one part of a
split model, and a clean name to show instead of the file name."""

from __future__ import annotations

import re

# llama.cpp's quantization names as they appear in file names: Q4_K_M, Q8_0,
# IQ4_XS, IQ2_XXS, Q4_0_4_4, F16, BF16, MXFP4 ... (case varies by uploader).
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]{1,3})*|BF16|F16|F32|MXFP4)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
# gguf-split's part names: model-Q4_K_M-00001-of-00003.gguf
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# Words in file names that say nothing to a reader.
_NOISE = re.compile(r"(?<![A-Za-z0-9])(gguf|ggml)(?![A-Za-z0-9])", re.IGNORECASE)


def quantization(filename: str) -> str | None:
    """The quantization named in ``filename`` (upper case), or None."""
    stem = _SPLIT.sub("", filename.rsplit("/", 1)[-1])
    matches = _QUANT.findall(stem.removesuffix(".gguf"))
    return matches[-1].upper() if matches else None


def split_part(filename: str) -> tuple[int, int] | None:
    """``(part, of)`` for a part of a split model, else None."""
    match = _SPLIT.search(filename)
    return (int(match.group(1)), int(match.group(2))) if match else None


def split_siblings(filename: str) -> list[str]:
    """Every part's file name of the split model ``filename`` belongs to
    (``[filename]`` when it is not split), first part first."""
    match = _SPLIT.search(filename)
    if not match:
        return [filename]
    head = filename[: match.start()]
    total = int(match.group(2))
    return [f"{head}-{i:05d}-of-{total:05d}.gguf" for i in range(1, total + 1)]


def is_gguf(filename: str) -> bool:
    """True for a GGUF file name (not a partial download)."""
    return filename.lower().endswith(".gguf")


def display_name(filename: str) -> str:
    """A readable model name from a file name.

    ``Qwen3-4B-Q4_K_M.gguf`` → ``Qwen3 4B``,
    ``gemma-3-270m-q4_k_m.gguf`` → ``gemma 3 270m``. The quantization is
    shown beside the name, not in it.
    """
    stem = _SPLIT.sub(".gguf", filename.rsplit("/", 1)[-1])
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    stem = _QUANT.sub("", stem)
    stem = _NOISE.sub("", stem)
    words = [word for word in re.split(r"[-_\s]+", stem) if word]
    return " ".join(words).strip(" .") or filename
