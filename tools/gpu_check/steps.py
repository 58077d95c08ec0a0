"""The check's steps, each run in a process of its own.

``python -m tools.gpu_check.steps STEP 'JSON'`` runs one step with the
arguments in JSON and prints its result as JSON on the last line. A process
per step, because which devices llama.cpp sees is fixed for a process, a
native abort must not end the whole check, and a step that runs past its
time can be killed without losing the others.

The steps use Arbor's own code: the exactness checks drive the ``arbor``
command line in new processes (a cold resume is a new process restoring
from SQLite), as ``tests/system/test_gpu_soft.py`` does on lavapipe, and the
figures come from ``app.bench`` (cold resume against reprocessing), the
engine's ``capture`` and ``restore``, and the service's own reply timings.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

Args = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
_PROSE = (
    "tree branch leaf root river stone light garden path window morning "
    "evening letter story friend city market music table paper winter summer "
    "mountain forest bridge harbor island question answer journey lantern"
)


def text_of(n_chars: int, seed: int) -> str:
    """Plain prose of ``n_chars`` characters (about as many tokens for the
    byte-level vocabulary of these models)."""
    rng = random.Random(seed)
    vocabulary = _PROSE.split()
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n_chars:
        words.append(rng.choice(vocabulary))
    return " ".join(words)[:n_chars].strip()


def _greedy(max_tokens: int) -> list[str]:
    return ["--temperature", "0", "--max-tokens", str(max_tokens)]


def _arbor(data_dir: str, model: str, flags: list[str], *args: str | int) -> Any:
    """``arbor`` in a new process, as a user runs it; its JSON answer."""
    command = [sys.executable, "-m", "app", "--data-dir", data_dir, "--model", model]
    done = subprocess.run(
        [*command, *flags, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"arbor {args[0]} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _child(step: str, args: Args) -> Any:
    """Another step in a new process (the continuous arm of an exactness check)."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check.steps", step, json.dumps(args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"step {step} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _reply_facts(reply: Any) -> dict[str, Any]:
    stats = reply["stats"]
    keep = ("context_tokens", "restored_tokens", "reprocessed_tokens", "fallbacks")
    return {key: stats[key] for key in keep} | {"logits_digest": stats["logits_digest"]}


# --- steps -----------------------------------------------------------------------


def devices(_args: Args) -> Any:
    """The devices and backend libraries llama.cpp found in this process."""
    from app.backend import devices as found

    loaded = found.load_backends()
    return {
        "backends": loaded.files,
        "cpu_variant": loaded.cpu_variant,
        "devices": [asdict(d) for d in found.list_devices()],
    }


def write_model(args: Args) -> Any:
    """Write the model ``args["shape"]`` names to ``args["path"]``."""
    from tools.gpu_check.shapes import SHAPES
    from tools.gpu_check.shapes import write_model as write

    started = time.perf_counter()
    path = Path(args["path"])
    done = path.with_suffix(".done")  # a second run reuses the file
    if not done.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, SHAPES[args["shape"]])
        done.touch()
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "seconds": time.perf_counter() - started,
    }


def exact(args: Args) -> Any:
    """Cold resume in a new process against one process's continuous decoding.

    Three ``arbor`` processes (new, send, send from the first reply: it
    restores the path from SQLite) and one process that sends both turns
    without restoring. The second reply must restore everything, reprocess
    nothing, and see the same logits (sha256 of the float32 array) and give
    the same text.
    """
    model, flags = args["model"], args["flags"]
    texts = [text_of(n, seed) for seed, n in enumerate(args["message_chars"])]
    greedy = _greedy(args["reply_tokens"])
    data_dir = tempfile.mkdtemp(prefix="exact-", dir=args["work"])
    root = _arbor(data_dir, model, flags, "new", "--system", "Answer briefly.")
    first = _arbor(data_dir, model, flags, "send", root["node"], texts[0], *greedy)
    second = _arbor(
        data_dir, model, flags, "send", first["assistant_node"], texts[1], *greedy
    )
    continuous = _child("continuous", args | {"texts": texts})
    cold = _reply_facts(second)
    return {
        "first_context_tokens": first["stats"]["context_tokens"],
        "cold": cold,
        "continuous": continuous,
        "verdicts": {
            "nothing reprocessed": cold["reprocessed_tokens"] == 0,
            "no fallbacks": cold["fallbacks"] == [],
            "whole path restored": cold["restored_tokens"]
            == first["stats"]["context_tokens"],
            "logits equal": cold["logits_digest"] == continuous["second_digest"],
            "texts equal": first["text"] == continuous["first_text"]
            and second["text"] == continuous["second_text"],
        },
    }


def continuous(args: Args) -> Any:
    """Both turns of ``exact`` in one engine that never restores."""
    from app.backend.engine import LlamaEngine
    from app.backend.values import SamplingParams
    from app.cli.parser import backend_settings, build_parser
    from app.conversation.service import ConversationService
    from storage.db import open_database

    settings = backend_settings(build_parser().parse_args([*args["flags"], "info"]))
    greedy = SamplingParams(temperature=0, max_tokens=args["reply_tokens"])
    folder = Path(tempfile.mkdtemp(prefix="continuous-", dir=args["work"]))
    db = open_database(folder / "continuous.sqlite3")
    engine = LlamaEngine(Path(args["model"]), settings)
    try:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation("Answer briefly.")
        first = service.send(root, args["texts"][0], greedy)
        second = service.send(first.assistant_node, args["texts"][1], greedy)
        if second.stats.restored_tokens:
            raise RuntimeError("the continuous arm restored a checkpoint")
        service.close()
        return {
            "offloaded_layers": engine.info.offloaded_layers,
            "offloadable_layers": engine.info.offloadable_layers,
            "placement": engine.info.placement,
            "first_text": first.text,
            "second_text": second.text,
            "second_digest": second.stats.logits_digest,
        }
    finally:
        engine.close()
        db.close()


def batch_replay(args: Args) -> Any:
    """``tests/helpers/batch_replay.py``: a span that shared its batch, decoded again
    exactly after its checkpoint is lost (``lost``: message or reply)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.batch_replay",
            args["model"],
            tempfile.mkdtemp(prefix="replay-", dir=args["work"]),
            args["lost"],
            *args["flags"],
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"tests.helpers.batch_replay failed: {done.stderr.strip()[-2000:]}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["verdicts"] = {
        "shared a batch": bool(result["shared"]),
        "only the lost span and below reprocessed": result["reprocessed"]
        == result["below_tokens"],
        "same checkpoints, byte for byte": bool(result["same_checkpoints"]),
        "batch record kept": bool(result["record_kept"]),
    }
    return result


def placement(args: Args) -> Any:
    """A checkpoint made with every layer on the GPU is refused on the CPU,
    with its reason, and one made on the CPU is refused on the GPU; each
    still restores where it was made."""
    model = args["model"]
    greedy = _greedy(args["reply_tokens"])
    arms = {"gpu": args["flags"], "cpu": args["cpu_flags"]}
    out: dict[str, Any] = {"verdicts": {}}
    for made, other in (("gpu", "cpu"), ("cpu", "gpu")):
        # A database each: checkpoints of one direction's start (the same
        # system prompt) would otherwise serve the other.
        data_dir = tempfile.mkdtemp(prefix=f"placement-{made}-", dir=args["work"])
        root = _arbor(data_dir, model, arms[made], "new")["node"]
        first = _arbor(
            data_dir, model, arms[made], "send", root, "Tell me about trees.", *greedy
        )
        moved = _arbor(
            data_dir,
            model,
            arms[other],
            "send",
            first["assistant_node"],
            "Why?",
            *greedy,
        )
        back = _arbor(
            data_dir,
            model,
            arms[made],
            "send",
            first["assistant_node"],
            "Why?",
            *greedy,
        )
        fallbacks = moved["stats"]["fallbacks"]
        out[f"{made}_to_{other}"] = {
            "reasons": fallbacks,
            "moved": _reply_facts(moved),
            "back": _reply_facts(back),
        }
        expected = (
            "made with its layers placed otherwise (with "
            if made == "gpu"
            else "made with its layers placed otherwise (on the CPU alone)"
        )
        out["verdicts"] |= {
            f"{made} checkpoint refused on the {other}, all reprocessed": (
                moved["stats"]["restored_tokens"] == 0
                and moved["stats"]["reprocessed_tokens"]
                == first["stats"]["context_tokens"]
            ),
            f"{made} checkpoint refused on the {other} with its reason": (
                len(fallbacks) == 1 and expected in fallbacks[0]
            ),
            f"{made} checkpoint still restores on the {made}": (
                back["stats"]["reprocessed_tokens"] == 0
                and back["stats"]["fallbacks"] == []
            ),
        }
    return out


def cold_resume(args: Args) -> Any:
    """``app.bench``'s cold resume against reprocessing, at each length."""
    from app.backend.engine import LlamaEngine
    from app.bench import workload
    from app.bench.cold_resume import run_cold_resume
    from app.bench.instrumented import SYNC, BenchService, TimedEngine
    from app.cli.parser import backend_settings, build_parser
    from storage.db import open_database

    flags = [*args["flags"], "--n-ctx", str(max(args["lengths"]) + 1024)]
    settings = backend_settings(build_parser().parse_args([*flags, "info"]))
    model = Path(args["model"])
    notes: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="cold-", dir=args["work"]))
    db = open_database(folder / "bench.sqlite3")
    engine = TimedEngine(model, settings)
    scratch = LlamaEngine(model, settings)
    service = BenchService(db, engine)
    try:
        service.set_mode(SYNC)
        started = time.perf_counter()
        chat = workload.build_linear_chat(
            service, args["lengths"], args["turn_tokens"], 16, notes.append
        )
        built_s = time.perf_counter() - started
        rows = run_cold_resume(
            db, model, settings, chat.milestones, scratch, args["repeats"], notes.append
        )
    finally:
        service.close()
        engine.close()
        scratch.close()
        db.close()
    return {"build_chat_s": built_s, "rows": [asdict(r) for r in rows], "notes": notes}


def state_speed(args: Args) -> Any:
    """Capture and restore throughput at each length, with the copy rates
    of the device for scale, and whether the restored state is exact."""
    from app.backend.engine import LlamaEngine
    from app.cli.parser import backend_settings, build_parser
    from tools.gpu_check import copy_rate

    lengths = args["lengths"]
    flags = [*args["flags"], "--n-ctx", str(max(lengths) + 64)]
    if args.get("flash_attn"):
        flags.append("--flash-attn")
    settings = backend_settings(build_parser().parse_args([*flags, "info"]))
    rows = []
    with LlamaEngine(Path(args["model"]), settings) as engine:
        rng = random.Random(3)
        for n in lengths:
            tokens = [rng.randrange(5, 261) for _ in range(n)]
            engine.truncate(0)
            engine.decode(tokens[:-1])
            data = engine.capture(0, n - 1)
            engine.decode(tokens[-1:])
            expected = engine.logits()

            def capture(n: int = n) -> None:
                engine.capture(0, n - 1)

            capture_s = copy_rate.best(capture)

            def restore(data: bytes = data, n: int = n) -> None:
                engine.truncate(0)
                if not engine.restore(data, 0, n - 1):
                    raise RuntimeError(f"restore of {n - 1} tokens refused")

            restore_s = copy_rate.best(restore)
            engine.decode(tokens[-1:])
            rows.append(
                {
                    "tokens": n - 1,
                    "bytes": len(data),
                    "capture_ms": capture_s * 1000,
                    "restore_ms": restore_s * 1000,
                    "capture_gbps": len(data) / capture_s / 1e9,
                    "restore_gbps": len(data) / restore_s / 1e9,
                    "restored_logits_equal": bool((engine.logits() == expected).all()),
                }
            )
        facts = {
            "flash_attn": settings.uses_flash_attn,
            "placement": engine.info.placement,
            "kv_bytes_per_token": engine.info.kv_bytes_per_token,
        }
    return facts | {"rows": rows, "copy": copy_rate.measure()}


def speed(args: Args) -> Any:
    """Prompt and generation speed through the service, as the window sees
    them (a ``prompt_tokens`` message, then ``gen_tokens`` greedy tokens)."""
    from app.backend.engine import LlamaEngine
    from app.backend.values import SamplingParams
    from app.cli.parser import backend_settings, build_parser
    from app.conversation.service import ConversationService
    from storage.db import open_database

    settings = backend_settings(build_parser().parse_args([*args["flags"], "info"]))
    folder = Path(tempfile.mkdtemp(prefix="speed-", dir=args["work"]))
    db = open_database(folder / "speed.sqlite3")
    prompt, generated = [], []
    with LlamaEngine(Path(args["model"]), settings) as engine:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation(None)
        params = SamplingParams(temperature=0, max_tokens=args["gen_tokens"])
        for i in range(args["repeats"] + 1):  # the first warms up
            reply = service.send(root, text_of(args["prompt_tokens"], 100 + i), params)
            if i:
                stats = reply.stats
                prompt.append(stats.prompt_tokens / stats.prompt_ms * 1000)
                generated.append(stats.tokens_per_second)
        threads = engine.threads_in_use
        service.close()
    db.close()
    return {
        "prompt_tokens": args["prompt_tokens"],
        "gen_tokens": args["gen_tokens"],
        "threads": threads,
        "prompt_tps": statistics.median(prompt),
        "gen_tps": statistics.median(generated),
    }


STEPS: dict[str, Callable[[Args], Any]] = {
    "devices": devices,
    "write_model": write_model,
    "exact": exact,
    "continuous": continuous,
    "batch_replay": batch_replay,
    "placement": placement,
    "cold_resume": cold_resume,
    "state_speed": state_speed,
    "speed": speed,
}


def main() -> None:
    """Run the step named on the command line; print its JSON result."""
    step, args = sys.argv[1], json.loads(sys.argv[2])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print(json.dumps(STEPS[step](args)))


if __name__ == "__main__":
    main()
