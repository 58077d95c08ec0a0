"""Arbor's checkpoints beside what llama-cpp-python offers, on one conversation.

One conversation of ``--turns`` turns is built through Arbor's service on the
starter model (greedy replies, filler questions of about ``--message-tokens``
tokens). Then each way of getting that conversation's end back into a fresh
context is measured on the same tokens, with the same model, context size,
threads and flash-attention setting:

- Arbor: delta checkpoints in SQLite, ``ConversationService.restore`` in a
  fresh engine and service (any node of the tree restores the same way);
- reprocessing: decoding the path's tokens again, in ``n_batch`` batches;
- ``LlamaDiskCache``: llama-cpp-python's prompt cache on disk, holding the
  ``Llama.save_state()`` of the conversation's end (one point);
- ``save_state()`` pickled to a file (one point);
- ``llama_state_save_file`` after every message: one whole-context file per
  node, so that any node can be resumed, as Arbor's tree can.

"Cold" is a freshly created context in this process (model load not
counted), the files just written (warm page cache), as ``arbor bench``
measures cold resume. Each figure is the median of ``--repeats``. After each
restore one probe token is decoded and its logits compared with those after
decoding the same tokens again in the same batches, to show every arm got its
context back exactly. Run::

    .venv/bin/python tools/peers.py [--model PATH] [--turns 20] [--repeats 5]

It prints a Markdown table (docs/benchmarks.md, "Peers"). It imports
``llama_cpp`` directly: tools/ is not part of the application.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp.llama_cache import LlamaDiskCache

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.backend.engine import LlamaEngine  # noqa: E402
from app.backend.settings import BackendSettings  # noqa: E402
from app.bench.workload import SYSTEM_PROMPT, filler_text, greedy  # noqa: E402
from app.conversation import folding  # noqa: E402
from app.conversation.batches import redecode  # noqa: E402
from app.conversation.checkpoint_writer import CheckpointWriter  # noqa: E402
from app.conversation.service import ConversationService  # noqa: E402
from app.platform.starter_model import starter_model_path  # noqa: E402
from storage import node_rows, tree_reads  # noqa: E402
from storage.db import Database, open_database  # noqa: E402
from storage.records import NodeRecord  # noqa: E402

_MB = 1_000_000


@dataclass
class Arm:
    """One way of resuming the conversation: what it stores, how fast it resumes."""

    name: str
    points: str  # which nodes it can resume
    stored_bytes: int
    resume_ms: list[float]
    probe_diff: float  # largest |logit difference| from reprocessing after a probe


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    # LlamaDiskCache prints a line per call on stderr; llama.cpp logs too.
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def build_conversation(
    db: Database,
    model: Path,
    settings: BackendSettings,
    turns: int,
    message_tokens: int,
    reply_tokens: int,
) -> list[NodeRecord]:
    """Grow one linear conversation through Arbor; return its path."""
    with (
        LlamaEngine(model, settings) as engine,
        ConversationService(db, engine, CheckpointWriter(db)) as service,
    ):
        _conversation, node = service.new_conversation(SYSTEM_PROMPT, "peers")
        for turn in range(turns):
            text = filler_text(engine, message_tokens, seed=40_000 + turn)
            node = service.send(node, text, greedy(reply_tokens)).assistant_node
    return node_rows.get_path(db, node)


def _stock_llama(model: Path, settings: BackendSettings) -> llama_cpp.Llama:
    with _quiet_stderr():
        return llama_cpp.Llama(
            str(model),
            n_ctx=settings.n_ctx,
            n_batch=settings.n_batch,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            flash_attn=settings.flash_attn,
            verbose=False,
        )


def _probe_logits(llm: llama_cpp.Llama, n_past: int, probe: int) -> np.ndarray:
    """Decode ``probe`` at ``n_past`` in a stock Llama; return its logits."""
    batch = llama_cpp.llama_batch_init(1, 0, 1)
    try:
        batch.n_tokens = 1
        batch.token[0] = probe
        batch.pos[0] = n_past
        batch.n_seq_id[0] = 1
        batch.seq_id[0][0] = 0
        batch.logits[0] = True
        if llama_cpp.llama_decode(llm.ctx, batch) != 0:
            raise RuntimeError("probe decode failed")
        pointer = llama_cpp.llama_get_logits_ith(llm.ctx, 0)
        return np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),)).copy()
    finally:
        llama_cpp.llama_batch_free(batch)


def measure_arbor(
    db_path: Path,
    model: Path,
    settings: BackendSettings,
    leaf: int,
    repeats: int,
    probe: int,
) -> Arm:
    """Restore the conversation's end in a fresh engine and service.

    Its probe is compared with Arbor's engine decoding the path again in the
    batches each node was first decoded in (a reply token by token): KV
    values depend on batch sizes, and that is the state its checkpoints hold.
    """
    db = open_database(db_path)
    path = node_rows.get_path(db, leaf)
    db.close()
    with LlamaEngine(model, settings) as engine:
        before = None
        for node in folding.effective(path):
            if not redecode(engine, node, before):
                engine.decode(list(node.tokens))
            before = node
        engine.decode([probe], [1])
        reference = engine.logits().copy()
    times, diff = [], 0.0
    for _ in range(repeats):
        with LlamaEngine(model, settings) as engine:
            db = open_database(db_path)
            try:
                started = time.perf_counter()
                stats = ConversationService(db, engine).restore(leaf)
                times.append(_ms(started))
                if stats.reprocessed_tokens or stats.fallbacks:
                    raise SystemExit(f"Arbor fell back: {stats.fallbacks}")
                engine.decode([probe], [1])
                diff = float(np.max(np.abs(engine.logits() - reference)))
            finally:
                db.close()
    db = open_database(db_path)
    conversation = node_rows.get_node(db, leaf).conversation_id
    stored = tree_reads.tree(db, conversation)
    nodes = len(stored)
    size = sum(n.checkpoint_bytes for n in stored)
    db.close()
    return Arm("Arbor (delta checkpoints in SQLite)", f"all {nodes}", size, times, diff)


def measure_reprocess(
    model: Path, settings: BackendSettings, tokens: list[int], repeats: int, probe: int
) -> tuple[Arm, np.ndarray]:
    """Decode the path's tokens in fresh contexts; its probe logits: the reference."""
    times: list[float] = []
    reference = np.zeros(0)
    for _ in range(repeats):
        llm = _stock_llama(model, settings)
        try:
            started = time.perf_counter()
            llm.eval(tokens)
            times.append(_ms(started))
            reference = _probe_logits(llm, len(tokens), probe)
        finally:
            llm.close()
    return Arm(
        "reprocessing the prompt", "all (nothing stored)", 0, times, 0.0
    ), reference


def _resume_arm(
    name: str,
    points: str,
    stored: int,
    model: Path,
    settings: BackendSettings,
    repeats: int,
    resume: Callable[[llama_cpp.Llama], None],
    n_past: int,
    probe: int,
    reference: np.ndarray,
    after: Callable[[], None] = lambda: None,
) -> Arm:
    """Time ``resume`` in fresh contexts; ``after`` (untimed) tidies up each time."""
    times, diff = [], 0.0
    for _ in range(repeats):
        llm = _stock_llama(model, settings)
        try:
            started = time.perf_counter()
            with _quiet_stderr():
                resume(llm)
            times.append(_ms(started))
            diff = float(np.max(np.abs(_probe_logits(llm, n_past, probe) - reference)))
            with _quiet_stderr():
                after()
        finally:
            llm.close()
    return Arm(name, points, stored, times, diff)


def measure_peers(
    folder: Path,
    model: Path,
    settings: BackendSettings,
    path: list[NodeRecord],
    repeats: int,
    probe: int,
    reference: np.ndarray,
) -> list[Arm]:
    """Store the conversation llama-cpp-python's ways, then resume it from each."""
    tokens = [t for node in path for t in node.tokens]
    n = len(tokens)
    session_files: list[Path] = []
    llm = _stock_llama(model, settings)
    try:
        # One message at a time, a whole-context file after each.
        done = 0
        for node in path:
            llm.eval(list(node.tokens))
            done += len(node.tokens)
            file = folder / f"node-{node.id}.session"
            array = (llama_cpp.llama_token * done)(*tokens[:done])
            if not llama_cpp.llama_state_save_file(
                llm.ctx, str(file).encode(), array, done
            ):
                raise SystemExit("llama_state_save_file failed")
            session_files.append(file)
        state = llm.save_state()
    finally:
        llm.close()

    pickled = folder / "state.pickle"
    with pickled.open("wb") as out:
        pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
    cache_dir = folder / "disk-cache"
    with _quiet_stderr():
        LlamaDiskCache(str(cache_dir))[tokens] = state

    def from_disk_cache(llm: llama_cpp.Llama) -> None:
        llm.load_state(LlamaDiskCache(str(cache_dir))[tokens])

    def back_into_disk_cache() -> None:
        # LlamaDiskCache.__getitem__ pops the entry; the next repeat needs it.
        LlamaDiskCache(str(cache_dir))[tokens] = state

    def from_pickle(llm: llama_cpp.Llama) -> None:
        with pickled.open("rb") as source:
            llm.load_state(pickle.load(source))

    def from_session_file(llm: llama_cpp.Llama) -> None:
        out = (llama_cpp.llama_token * n)()
        count = ctypes.c_size_t(0)
        if not llama_cpp.llama_state_load_file(
            llm.ctx, str(session_files[-1]).encode(), out, n, ctypes.byref(count)
        ):
            raise SystemExit("llama_state_load_file failed")

    nodes = len(path)
    return [
        _resume_arm(
            "llama-cpp-python `LlamaDiskCache` (prompt cache)",
            "1 (the end)",
            _folder_bytes(cache_dir),
            model,
            settings,
            repeats,
            from_disk_cache,
            n,
            probe,
            reference,
            back_into_disk_cache,
        ),
        _resume_arm(
            "`Llama.save_state()`, pickled",
            "1 (the end)",
            pickled.stat().st_size,
            model,
            settings,
            repeats,
            from_pickle,
            n,
            probe,
            reference,
        ),
        _resume_arm(
            "`llama_state_save_file` after every message",
            f"all {nodes}",
            sum(f.stat().st_size for f in session_files),
            model,
            settings,
            repeats,
            from_session_file,
            n,
            probe,
            reference,
        ),
    ]


def render(
    arms: list[Arm], path_tokens: int, nodes: int, settings: BackendSettings
) -> str:
    """The table for docs/benchmarks.md."""
    reprocess = next(a for a in arms if a.stored_bytes == 0)
    lines = [
        f"{nodes} nodes, {path_tokens} tokens; n_ctx {settings.n_ctx}, "
        f"{settings.threads} threads, flash attention "
        f"{'on' if settings.flash_attn else 'off'}; medians of "
        f"{len(reprocess.resume_ms)}.",
        "",
        "| way | nodes it can resume | MB on disk | cold resume ms (best) "
        "| vs reprocessing | probe logits vs decoding again |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms:
        median = _median(arm.resume_ms)
        lines.append(
            f"| {arm.name} | {arm.points} | {arm.stored_bytes / _MB:,.1f} "
            f"| {median:,.1f} ({min(arm.resume_ms):,.1f}) "
            f"| {_median(reprocess.resume_ms) / median:,.1f}x "
            f"| {arm.probe_diff:.2g} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build the conversation, measure every arm, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--message-tokens", type=int, default=64)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--flash-attn", action="store_true")
    args = parser.parse_args(argv)
    model = args.model or starter_model_path()
    if model is None:
        raise SystemExit("no --model and no starter model installed")
    settings = BackendSettings(
        n_ctx=args.n_ctx, n_threads=args.threads, flash_attn=args.flash_attn
    )
    with tempfile.TemporaryDirectory(prefix="arbor-peers-") as scratch:
        folder = Path(scratch)
        db_path = folder / "arbor.sqlite3"
        db = open_database(db_path)
        path = build_conversation(
            db, model, settings, args.turns, args.message_tokens, args.reply_tokens
        )
        db.close()
        tokens = [t for node in path for t in node.tokens]
        print(f"built: {len(path)} nodes, {len(tokens)} tokens", file=sys.stderr)
        probe = tokens[1]  # any token: the same one for every arm
        reprocess, reference = measure_reprocess(
            model, settings, tokens, args.repeats, probe
        )
        arbor = measure_arbor(
            db_path, model, settings, path[-1].id, args.repeats, probe
        )
        peers = measure_peers(
            folder, model, settings, path, args.repeats, probe, reference
        )
        sys.stdout.write(
            render([arbor, reprocess, *peers], len(tokens), len(path), settings)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
