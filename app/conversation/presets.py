"""Presets: a named system prompt with its sampling, to pick per conversation.

Qt-free. The presets are one preference (a list of plain dicts in the
settings table); a conversation that picks one keeps a copy of its sampling
and its name, so editing or deleting the preset later changes no
conversation made with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.backend.values import SamplingParams


@dataclass(frozen=True)
class Preset:
    """A system prompt and the sampling that goes with it, under a name."""

    name: str
    system_prompt: str
    sampling: SamplingParams

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for the settings table."""
        return {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "sampling": self.sampling.as_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preset:
        """Build from a stored dict; raises ``ValueError``/``TypeError`` if it
        is not one."""
        name = str(data["name"]).strip()
        if not name:
            raise ValueError("A preset needs a name.")
        return cls(
            name=name,
            system_prompt=str(data.get("system_prompt") or ""),
            sampling=SamplingParams.from_dict(dict(data.get("sampling") or {})),
        )


# What a first start offers: three common ways of chatting, to be edited,
# deleted or added to. Their sampling follows the usual advice for each use
# (low temperature where exactness matters, a wider one for writing).
STARTER_PRESETS: tuple[Preset, ...] = (
    Preset(
        "Precise",
        "Answer accurately and concisely. Say so when you are not sure.",
        SamplingParams(temperature=0.2, top_p=0.9),
    ),
    Preset(
        "Coding",
        "You are an expert programmer. Answer with correct, idiomatic code "
        "and short explanations.",
        SamplingParams(temperature=0.2, top_p=0.95, max_tokens=1024),
    ),
    Preset(
        "Creative",
        "You are a creative writing partner: vivid, original and willing to "
        "take risks.",
        SamplingParams(temperature=1.0, top_p=0.98, min_p=0.02, repeat_penalty=1.05),
    ),
)


def presets_from_stored(value: Any) -> tuple[Preset, ...]:
    """The presets a stored preference holds; entries that are not presets
    (a database edited by hand, a later version's) are skipped, and a second
    one of the same name is dropped."""
    if not isinstance(value, list):
        return STARTER_PRESETS
    presets: dict[str, Preset] = {}
    for entry in value:
        try:
            preset = Preset.from_dict(entry)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        presets.setdefault(preset.name, preset)
    return tuple(presets.values())


def with_preset(presets: tuple[Preset, ...], preset: Preset) -> tuple[Preset, ...]:
    """``presets`` with ``preset`` added, replacing one of the same name in
    its place."""
    if any(p.name == preset.name for p in presets):
        return tuple(preset if p.name == preset.name else p for p in presets)
    return (*presets, preset)


def without_preset(presets: tuple[Preset, ...], name: str) -> tuple[Preset, ...]:
    """``presets`` without the one named ``name``."""
    return tuple(p for p in presets if p.name != name)


def conversation_sampling(
    stored: dict[str, Any] | None, default: SamplingParams
) -> tuple[SamplingParams, str | None]:
    """The sampling a conversation's replies use and the preset it came from.

    ``stored`` is what the conversation keeps (None: ``default``, the
    Settings'); a stored value that is not valid falls back to ``default``.
    """
    if stored is None:
        return default, None
    try:
        sampling = SamplingParams.from_dict({**default.as_dict(), **stored})
    except (TypeError, ValueError):
        return default, None
    preset = stored.get("preset")
    return sampling, preset if isinstance(preset, str) else None


def stored_sampling(
    sampling: SamplingParams | None, preset: str | None
) -> dict[str, Any] | None:
    """``sampling`` as a conversation stores it: its fields and, where it came
    from one, the preset's name (``SamplingParams.from_dict`` ignores it)."""
    if sampling is None:
        return None
    return {**sampling.as_dict(), **({"preset": preset} if preset else {})}
