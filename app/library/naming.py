"""The one name a model is shown under, wherever it is shown.

Downloads, the status bar, the switch bar, the welcome page and the empty
conversation all call ``app.library.catalog.model_name``, so a model has
the same name before it is downloaded, while it downloads and once it is
loaded. In order:

1. The catalog's name, for a catalog file ("Gemma 3 1B Instruct").
2. The file name, cleaned: quantization, split suffix and ".gguf" dropped
   (``names.display_name``), then tidied (``tidy``):
   ``gemma-3-270m-it-Q4_K_M.gguf`` → "Gemma 3 270M Instruct".
3. The GGUF's own ``general.name``, tidied, only where the file name says
   nothing ("model-Q4_K_M.gguf"). Not before the file name, because
   ``general.name`` is unknown until the file is downloaded and opened (so
   the same file would change name once loaded), and because it is often a
   build label ("Smollm2 135M 8k Lc100K Mix1", "arbor-tiny-test").
"""

from __future__ import annotations

import re
from pathlib import PurePath

from app.library import names

# Sizes: 270m, 4b, 1.5b, 8x7b, 100k; and the "effective"/"active"
# parameter counts of newer families: e2b (Gemma 3n), a3b (Qwen3 MoE).
_SIZE = re.compile(r"^(?:\d+x)?\d+(?:\.\d+)?[kmbt]$|^[ae]\d+(?:\.\d+)?b$", re.I)
# A version such as v0.3, kept as written.
_VERSION = re.compile(r"^v\d", re.I)
# Words that say the model was tuned to chat, spelt as the catalog spells them.
_TUNED = {"it": "Instruct", "instruct": "Instruct", "chat": "Chat"}
# File names that name no model: the GGUF's general.name says more.
_GENERIC = frozenset({"", "model", "ggml model", "ggml", "gguf", "unsloth"})


def tidy(text: str) -> str:
    """A name as a person would write it: "gemma 3 270m it" → "Gemma 3 270M
    Instruct".

    Sizes are upper-cased (a Mixture's ``x`` stays small: "8x7B"), "it" and
    "instruct" read "Instruct", words all in lower case get a capital, and
    words the uploader capitalised ("SmolLM2", "Qwen3") stay as they are, as
    do versions ("v0.3").
    """
    words = []
    for word in text.split():
        lower = word.lower()
        if _SIZE.match(word):
            word = word.upper().replace("X", "x")
        elif lower in _TUNED:
            word = _TUNED[lower]
        elif word == lower and word[:1].isalpha() and not _VERSION.match(word):
            word = word[:1].upper() + word[1:]
        words.append(word)
    return " ".join(words)


def file_model_name(filename: str, general_name: str | None = None) -> str:
    """The name of a model no catalog entry names: ``filename`` cleaned and
    tidied, or the GGUF's ``general_name`` where the file name says nothing
    (steps 2 and 3 above)."""
    cleaned = names.display_name(PurePath(filename).name)
    if cleaned.lower().removesuffix(".gguf") in _GENERIC and general_name:
        return tidy(" ".join(re.split(r"[-_\s]+", general_name)).strip())
    return tidy(cleaned)
