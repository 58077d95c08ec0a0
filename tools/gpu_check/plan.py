"""What the check runs, in order, with each step's time limit.

Two sizes of the same plan: ``gpu`` (real models' shapes, the lengths the
issue asks for) and ``small`` (the CPU and lavapipe runs here, in seconds).
Steps come in order of worth: the exactness checks first, then the figures
on the 1B shape, and the 8B shape last, so that a run short of time drops
the least.

Standard library only (the orchestrator runs under the machine's bare Python).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sizes:
    """The shapes and lengths of one size of the plan."""

    main: str  # a Llama shape: exactness, replay, placement and figures
    swa: str  # a sliding-window shape
    big: str | None  # a larger Llama shape for the figures only
    exact_chars: tuple[int, int]
    exact_reply: int
    swa_chars: tuple[int, int]
    swa_reply: int
    resume_lengths: tuple[int, ...]
    turn_tokens: int
    repeats: int
    state_lengths: tuple[int, ...]
    prompt_tokens: int
    gen_tokens: int


SIZES = {
    "gpu": Sizes(
        main="llama-3.2-1b-shape",
        swa="gemma-2-2b-shape",
        big="llama-3.1-8b-shape",
        exact_chars=(300, 200),
        exact_reply=32,
        # Messages and a reply longer than the 512-token window.
        swa_chars=(1300, 700),
        swa_reply=600,
        resume_lengths=(2048, 8192, 32768),
        turn_tokens=2048,
        repeats=3,
        state_lengths=(256, 2048, 8192),
        prompt_tokens=512,
        gen_tokens=128,
    ),
    "small": Sizes(
        main="small-llama",
        swa="small-gemma2",
        big=None,
        exact_chars=(60, 40),
        exact_reply=12,
        swa_chars=(150, 100),  # the window is 64
        swa_reply=80,
        resume_lengths=(256, 1024),
        turn_tokens=256,
        repeats=1,
        state_lengths=(64, 512),
        prompt_tokens=128,
        gen_tokens=32,
    ),
}


@dataclass
class Step:
    """One step: ``kind`` is a step of ``steps.py`` or "llama_bench"."""

    id: str
    kind: str
    args: dict[str, Any]
    timeout: float
    needs: tuple[str, ...] = ()
    # The least time worth starting it with (else it is skipped).
    least: float = 10.0
    notes: list[str] = field(default_factory=list)


def plan(
    sizes: Sizes,
    work: Path,
    gpu_flags: list[str],
    cpu_flags: list[str],
    on_gpu: bool,
    flash_attn_kernels: bool,
    llama_bench: str,
) -> list[Step]:
    """Every step for ``sizes``; ``on_gpu`` False leaves out what needs a GPU."""
    models = work / "models"
    common = {"work": str(work / "tmp"), "flags": gpu_flags}

    def model(shape: str) -> str:
        return str(models / f"{shape}.gguf")

    steps = [
        Step("devices", "devices", {}, 60),
        Step(
            "model main",
            "write_model",
            {"shape": sizes.main, "path": model(sizes.main)},
            120,
        ),
        Step(
            "model swa",
            "write_model",
            {"shape": sizes.swa, "path": model(sizes.swa)},
            120,
        ),
        Step(
            "cold resume exact",
            "exact",
            common
            | {
                "model": model(sizes.main),
                "message_chars": sizes.exact_chars,
                "reply_tokens": sizes.exact_reply,
            },
            150,
            ("model main",),
        ),
    ]
    for lost in ("message", "reply"):
        steps.append(
            Step(
                f"shared batch replay ({lost})",
                "batch_replay",
                common | {"model": model(sizes.main), "lost": lost},
                120,
                ("model main",),
            )
        )
    steps.append(
        Step(
            "sliding window exact",
            "exact",
            common
            | {
                "model": model(sizes.swa),
                "message_chars": sizes.swa_chars,
                "reply_tokens": sizes.swa_reply,
            },
            180,
            ("model swa",),
        )
    )
    if on_gpu:
        steps.append(
            Step(
                "placement refusals",
                "placement",
                common
                | {
                    "model": model(sizes.main),
                    "cpu_flags": cpu_flags,
                    "reply_tokens": sizes.exact_reply,
                },
                180,
                ("model main",),
            )
        )
    targets = [("main", sizes.main)] + ([("big", sizes.big)] if sizes.big else [])
    for role, shape in targets:
        if role == "big":
            steps.append(
                Step(
                    "model big",
                    "write_model",
                    {"shape": shape, "path": model(shape)},
                    150,
                    least=60,
                )
            )
        steps += _figures(
            role, common | {"model": model(shape)}, sizes, llama_bench, on_gpu
        )
    if flash_attn_kernels:  # last: Arbor's default is flash attention off
        steps += [
            Step(
                f"state speed {role} (flash attention)",
                "state_speed",
                common
                | {
                    "model": model(shape),
                    "lengths": sizes.state_lengths,
                    "flash_attn": True,
                },
                120,
                (f"model {role}",),
                least=30,
            )
            for role, shape in targets
        ]
    return steps


def _figures(
    role: str, args: dict[str, Any], sizes: Sizes, llama_bench: str, on_gpu: bool
) -> list[Step]:
    """The figures of one model: cold resume, capture and restore, speed."""
    needs = (f"model {role}",)
    # A step per length, shortest first: a run short of time loses the
    # longest only (each builds its own conversation; on a GPU that is
    # seconds).
    steps = [
        Step(
            f"cold resume {role} {length}",
            "cold_resume",
            args
            | {
                "lengths": (length,),
                "turn_tokens": sizes.turn_tokens,
                "repeats": sizes.repeats,
            },
            180,
            needs,
            least=30,
        )
        for length in sizes.resume_lengths
    ]
    steps += [
        Step(
            f"state speed {role}",
            "state_speed",
            args | {"lengths": sizes.state_lengths, "flash_attn": False},
            120,
            needs,
            least=30,
        ),
        Step(
            f"speed {role}",
            "speed",
            args
            | {
                "prompt_tokens": sizes.prompt_tokens,
                "gen_tokens": sizes.gen_tokens,
                "repeats": sizes.repeats,
            },
            120,
            needs,
            least=30,
        ),
    ]
    if llama_bench:
        steps.append(
            Step(
                f"llama-bench {role}",
                "llama_bench",
                {
                    "binary": llama_bench,
                    "model": args["model"],
                    "ngl": "99" if on_gpu else "0",
                    "prompt_tokens": sizes.prompt_tokens,
                    "gen_tokens": sizes.gen_tokens,
                    "repeats": sizes.repeats,
                },
                120,
                needs,
                least=30,
            )
        )
    return steps


def only(steps: list[Step], words: list[str]) -> list[Step]:
    """The steps whose id holds one of ``words``, "devices" and the steps
    they need, for a second run that adds what a first one had no time for
    ("big")."""
    if not words:
        return steps
    wanted = {s.id for s in steps if s.id == "devices" or any(w in s.id for w in words)}
    for step in reversed(steps):  # and what they need (a model written before)
        if step.id in wanted:
            wanted.update(step.needs)
    return [s for s in steps if s.id in wanted]
