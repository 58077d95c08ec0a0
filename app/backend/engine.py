"""The llama.cpp engine: one model, one context, tokens in, logits and KV state out.

Built on the low-level API because Arbor needs what the high-level ``Llama``
class does not expose: a second (scratch) sequence in a unified KV cache, which
is how a node's KV cells are copied out and back in without touching the rest.
Not thread-safe: one thread owns an engine.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from app.backend import chat_format as chat_formats
from app.backend import (
    devices,
    model_meta,
    native_log,
    offload,
    offload_plan,
    reasoning,
    rpc_client,
)
from app.backend.chat_format import ChatFormat
from app.backend.errors import (
    BackendError,
    ContextFullError,
    Interrupted,
    ModelFileError,
)
from app.backend.kv_state import CombinedState, DeltaLayout
from app.backend.model_file import check_model_file, content_identity
from app.backend.offload import OffloadCost
from app.backend.placement import layer_holders, read_placement
from app.backend.sampling import Sampler
from app.backend.settings import (
    ALL_GPU_LAYERS,
    AUTO_GPU_LAYERS,
    DEFAULT_N_CTX,
    KV_CACHE_TYPES,
    BackendSettings,
    layers_text,
)
from app.backend.threads import automatic_threads
from app.backend.tool_calls import Constraint
from app.backend.values import MAX_FORKS, ModelInfo, SamplingParams, StateKind

log = logging.getLogger(__name__)

MAIN_SEQ = 0
SCRATCH_SEQ = 1
# Sequences FIRST_FORK_SEQ, FIRST_FORK_SEQ + 1, ... hold alternatives
# generated together (``fork``): each shares the main sequence's cells up to
# the fork and appends its own reply.
FIRST_FORK_SEQ = 2
# Bumped when Arbor changes how it lays out checkpoints.
CHECKPOINT_FORMAT = 1
# The most bytes of deltas combined for one llama.cpp call (a quarter of it
# with flash attention on). Combining copies the deltas into one buffer first;
# that copy pays off only where it is cheaper than the calls it saves. With V
# transposed (flash attention off) each call costs n_layer x n_embd_v small
# copies, 0.2 to 0.75 ms for SmolLM2-135M on the 2-core VMs measured, while
# copying runs at 4 to 10 GB/s, so the break-even is about 2 MiB; with flash
# attention a call costs a quarter of that. Larger deltas go one call each,
# straight from the buffer they were read into.
RUN_BYTES = 2 << 20
# The most tokens of a long prompt decoded in one llama_decode on the CPU.
# One call cannot be broken, so Stop and the progress shown wait for the
# batch in hand. A 4,000-token prompt on SmolLM2-135M, two busy cores
# (``tools/stop_latency.py --compare``): batches of 512 took 3.6 to 7.3 s
# each, Stop 5.1 s (median); batches of 64 took 0.4 to 1.0 s, Stop 0.5 s,
# at the same speed (95 tokens/s against 88; 118 against 122 on 2,000).
# Where every layer is offloaded a batch is fast and its size matters:
# ``n_batch`` then.
PROMPT_STEP = 64

# Told how far a long decode got: (tokens decoded, tokens in all); returns
# whether to go on. Set by the thread that owns the engine, for one job.
DecodeWatch = Callable[[int, int], bool]
# Told how far a model load got (0 to 1); returns whether to go on.
LoadWatch = Callable[[float], bool]

# Token attributes, from llama.h (the binding lists them only in a comment).
_TOKEN_ATTR_CONTROL = 1 << 3
_TOKEN_ATTR_USER_DEFINED = 1 << 4


def available_memory() -> int | None:
    """Bytes of memory free for new allocations, or None where unknown.

    MemAvailable counts the page cache that can be dropped (what a new
    allocation can really get); the sysconf figure, for systems without
    /proc, counts free pages only.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows, macOS
        return None


def _size_text(n_bytes: float) -> str:
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.1f} GiB"
    return f"{n_bytes / 2**20:.1f} MiB"


def _layer_count(model_path: Path) -> int:
    """The layers of the model at ``model_path`` as llama.cpp places them:
    its repeating layers (with any next-token-prediction ones) and the
    output layer. Read without a weight, on no device (a vocabulary-only
    load skips the layer counts): a split by hand is checked before any
    weight goes to a worker."""
    with offload_plan.sized_model(model_path, on_no_device=True) as model:
        # load_tensors numbers them 0 to n_layer_all, the output layer last.
        return (
            int(llama_cpp.llama_model_n_layer(model))
            + int(llama_cpp.llama_model_n_layer_nextn(model))
            + 1
        )


def gpu_offload_supported() -> bool:
    """Whether llama.cpp found a GPU to offload layers to."""
    return bool(devices.offload_devices())


class LlamaEngine:
    """A loaded model with its context, positioned somewhere in a conversation.

    ``n_past`` is how many tokens sequence 0 holds; the next decode appends
    at that position.
    """

    def __init__(
        self,
        model_path: Path,
        settings: BackendSettings,
        load_watch: LoadWatch | None = None,
    ) -> None:
        devices.load_backends()
        model_path = Path(model_path).expanduser().resolve()
        check_model_file(model_path)
        self._model_identity = content_identity(model_path)
        self.settings = settings
        # Asked before anything else talks to them: llama.cpp aborts this
        # process on a worker that does not answer (rpc_client).
        self._workers = rpc_client.connect(settings.workers)
        self._worker_devices = rpc_client.device_list(self._workers)
        self._model: Any = None
        self._ctx: Any = None
        self._probed_cost: OffloadCost | None = None
        # A NULL-terminated device list holding no device (CPU only).
        self._no_devices = (ctypes.c_void_p * 1)(None)
        self._batch: Any = None
        # Asked between the batches of a decode of more than one (a long
        # prompt, a reprocessed branch): the only place such a decode can
        # report progress and stop, since one llama_decode cannot be broken.
        self.decode_watch: DecodeWatch | None = None

        self._model = self._load_model(model_path, load_watch)
        rpc_client.hold(self._workers)
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.n_swa = int(llama_cpp.llama_model_n_swa(self._model))
        n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self._model))
        try:
            n_ctx, context_note = self._context_size(settings.n_ctx, n_ctx_train)
            self._check_memory(n_ctx)
            self._ctx = self._create_context(n_ctx)
        except BackendError:
            self.close()
            raise
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        # The batch size llama.cpp settled on: it caps n_batch at the context
        # it was asked for (and may round n_ctx up after), so a larger batch
        # would abort in llama_decode. Allocating n_batch slots once.
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        # The batch size of a long decode (``PROMPT_STEP``); recorded with
        # each node (``chunks``), so a replay keeps the sizes it was made in.
        self.prompt_step = min(self.n_batch, PROMPT_STEP)
        self.n_past = 0
        # End position of each fork sequence while alternatives are generated.
        self._forks: dict[int, int] = {}
        # Deltas staged by add_delta, applied together by end_deltas.
        self._combined = CombinedState()
        self._staged_end = 0
        self._planned: list[int] = []

        self.path = model_path
        self.chat_format = self._load_chat_format()
        self.reasoning_format = reasoning.reasoning_format(self.chat_format.source)
        self.reasoning_switch = reasoning.reasoning_switch(self.chat_format.source)
        self.state_kind, state_note = self._state_kind()
        # One look at the devices now that the model and its context are in
        # place: their free memory is what the Settings estimate starts from.
        found = devices.list_devices()
        targets = devices.offload_targets(found)
        has_gpu = bool(targets)
        self.placement = read_placement(self._load_log)
        if self.placement.offloaded_all:
            self.prompt_step = self.n_batch
        holders = layer_holders(
            self.placement, found, rpc_client.buffer_names(self._workers)
        )
        cpu_variant = devices.load_backends().cpu_variant
        offload_cost = self._loaded_offload_cost(model_path) if has_gpu else None
        self.info = ModelInfo(
            path=str(model_path),
            identity=self._model_identity,
            name=self._meta("general.name") or model_path.stem,
            size_bytes=model_path.stat().st_size,
            n_layer=int(llama_cpp.llama_model_n_layer(self._model)),
            n_vocab=self.n_vocab,
            n_ctx=self.n_ctx,
            n_ctx_train=n_ctx_train,
            context_note=context_note,
            n_gpu_layers=settings.n_gpu_layers if has_gpu else 0,
            gpu_offload_supported=has_gpu,
            state_kind=self.state_kind,
            state_note=state_note,
            chat_format=self.chat_format.kind,
            kv_bytes_per_token=self._kv_bytes_per_token(),
            chat_format_note=self.chat_format.note,
            reasoning_format=self.reasoning_format.name,
            reasoning_choices=(
                self.reasoning_switch.choices if self.reasoning_switch else ()
            ),
            reasoning_default=(
                self.reasoning_switch.default if self.reasoning_switch else None
            ),
            # Learned now (a few renders of the template, tens of ms) rather
            # than at the first tool turn, so the window can say beforehand
            # that tools will use the generic format.
            tool_format=self.chat_format.tool_syntax.kind,
            offloaded_layers=self.placement.offloaded_layers,
            offloadable_layers=self.placement.offloadable_layers,
            gpu_bytes=sum(self.placement.device_bytes.values()),
            placement=self.placement.describe(),
            cpu_variant=cpu_variant,
            offload_cost=offload_cost,
            offload_target=", ".join(f"{d.name} ({d.description})" for d in targets),
            offload_free_bytes=sum(d.free_bytes for d in targets),
            offload_total_bytes=sum(d.total_bytes for d in targets),
            devices=tuple(found),
            layer_holders=holders,
        )
        self.profile_details = {
            "model_identity": self._model_identity,
            "model_name": self.info.name,
            "type_k": settings.kv_cache_type,
            "type_v": settings.kv_cache_type,
            "flash_attn": settings.uses_flash_attn,
            "llama_cpp": llama_cpp.__version__,
            # The value, not the enum: the fingerprint hashes this dict's repr.
            "state_kind": self.state_kind.value,
            "checkpoint_format": CHECKPOINT_FORMAT,
            # Cells computed by other kernels restore without an error but are
            # not what these would compute (docs/DESIGN.md): the CPU variant and
            # the devices holding layers separate profiles.
            "cpu_backend": cpu_variant or "built in",
            "offload": offload_plan.signature(self.placement, found),
        }
        # A delta of full-attention layers restores bit-exactly into a context
        # of another size (tests/conversation/test_fallbacks.py), so raising
        # n_ctx keeps the checkpoints. Sliding-window and recurrent state was
        # not shown to: there n_ctx still separates profiles.
        if self.n_swa or self.state_kind is not StateKind.DELTA:
            self.profile_details["n_ctx"] = self.n_ctx
        # Only with workers, so that the profile (and the checkpoints) of a
        # run on this machine alone stay what they were before workers.
        if self._workers:
            self.profile_details["workers"] = rpc_client.signature(
                self._workers, holders
            )
        self.profile_fingerprint = hashlib.sha256(
            repr(sorted(self.profile_details.items())).encode()
        ).hexdigest()

    # --- loading ----------------------------------------------------------------

    def _gpu_layers(self, model_path: Path) -> int:
        """The layers to offload: the setting, or for "auto" the most that fit."""
        wanted = self.settings.n_gpu_layers
        if self._workers and self.settings.worker_layers:
            # Split by hand: the counts say how many leave this machine.
            return sum(self.settings.worker_layers)
        if self._workers:
            # Workers are there to hold what does not fit here: every layer
            # goes to them unless a count is given, split by their free
            # memory as llama.cpp splits between GPUs.
            return ALL_GPU_LAYERS if wanted == AUTO_GPU_LAYERS else wanted
        targets = devices.offload_devices()
        if not targets or wanted == 0:
            return 0
        if wanted != AUTO_GPU_LAYERS:
            return wanted
        n_ctx = self.settings.n_ctx
        self._probed_cost, n_ctx = offload_plan.probe(
            model_path, self.settings.kv_cache_type, n_ctx, self._context_params
        )
        layers = offload.best_layers(
            self._probed_cost,
            n_ctx,
            sum(d.free_bytes for d in targets),
            sum(d.total_bytes for d in targets),
        )
        log.info(
            "GPU layers (auto): %d of %d", layers, self._probed_cost.offloadable_layers
        )
        return layers

    def _loaded_offload_cost(self, model_path: Path) -> OffloadCost:
        """What offloading the loaded model costs, for the Settings estimate:
        its compute buffers as measured where some layers are on a GPU, else
        as a no-allocation load sizes them."""
        compute = sum(self.placement.compute_bytes.values())
        if compute:
            return offload_plan.cost(self._model, self.settings.kv_cache_type, compute)
        if self._probed_cost is None:
            self._probed_cost, _n_ctx = offload_plan.probe(
                model_path,
                self.settings.kv_cache_type,
                self.settings.n_ctx,
                self._context_params,
            )
        return self._probed_cost

    def _load_model(self, model_path: Path, watch: LoadWatch | None) -> Any:
        """Load the weights; a failure carries llama.cpp's own reason.

        ``watch`` hears the progress; when it returns False llama.cpp stops
        loading and ``Interrupted`` is raised.
        """
        model_params = llama_cpp.llama_model_default_params()
        stopped = False

        def on_progress(progress: float, _user_data: ctypes.c_void_p) -> bool:
            nonlocal stopped
            if watch is None or stopped:
                return not stopped
            try:
                stopped = not watch(progress)
            except Exception:  # an exception must not cross the C frames
                log.exception("the model load's progress callback failed")
            return not stopped

        # Kept in a local until the load returns: llama.cpp calls it meanwhile.
        callback = llama_cpp.llama_progress_callback(on_progress)
        model_params.progress_callback = callback
        model_params.n_gpu_layers = self._gpu_layers(model_path)
        if self._workers:
            # The workers' devices, not this machine's GPUs. This CPU keeps
            # its weights as they are (no repacking into its own layouts,
            # which compute with other kernels): then the layers left here
            # and those on CPU workers compute alike, and a checkpoint is
            # tied to the split alone (issue 25).
            model_params.devices = ctypes.cast(self._worker_devices, ctypes.c_void_p)
            model_params.use_extra_bufts = False
            # Kept in a local until the load returns, like the callback
            # (llama.cpp copies it then).
            split = self._split_by_hand(model_path)
            if split is not None:
                model_params.tensor_split = split
        elif model_params.n_gpu_layers == 0:
            # No device at all, not merely no layers: llama.cpp would still
            # run large matrix products on a GPU (op offload), whose cells
            # differ from the CPU's.
            model_params.devices = ctypes.cast(self._no_devices, ctypes.c_void_p)
        native_log.clear_errors()
        native_log.start_recording()
        try:
            # fsencode: a path that is not valid UTF-8 still names its file.
            model = llama_cpp.llama_model_load_from_file(
                os.fsencode(model_path), model_params
            )
        finally:
            self._load_log = native_log.stop_recording()
        if not model and stopped:
            raise Interrupted(f"Loading {model_path.name} was stopped.")
        if not model:
            detail = native_log.errors("it gave no reason")
            raise ModelFileError(
                f"{model_path.name} could not be loaded (truncated, corrupt or an "
                f"unsupported architecture). llama.cpp says: {detail}."
            )
        return model

    def _split_by_hand(self, model_path: Path) -> Any:
        """``llama_model_params.tensor_split`` for the layers split by hand
        between the workers (None: split by their free memory).

        llama.cpp (``load_tensors``) gives the offloaded layers, the last
        ``n_gpu_layers`` of the model's layers counting the output layer, to
        the devices in order: layer ``il`` goes to the first device whose
        cumulative share of ``tensor_split`` exceeds ``(il - first
        offloaded) / n_gpu_layers``. With whole counts as the shares and
        their sum as ``n_gpu_layers`` (``_gpu_layers``), that is exactly:
        the first worker gets the first ``count`` of the offloaded layers,
        the next the next ones, and a count of 0 none (the cumulative
        shares are small whole numbers, exact in floats, and both sides
        divide by the same sum). A worker with several devices shares its
        count between them (``rpc_client.device_shares``).
        """
        counts = self.settings.worker_layers
        if not counts:
            return None
        layers = _layer_count(model_path)
        if sum(counts) > layers:
            raise BackendError(
                f"The layers split by hand add up to {sum(counts)}, more than "
                f"{model_path.name} has ({layers_text(layers)}): give the "
                f"workers {layers} or fewer."
            )
        shares = rpc_client.device_shares(self._workers, counts)
        room = int(llama_cpp.llama_max_devices())
        if len(shares) > room:
            raise BackendError(
                f"The workers serve {len(shares)} devices; llama.cpp splits a "
                f"model between {room} at most."
            )
        # llama.cpp reads llama_max_devices() floats, one per device in order.
        return (ctypes.c_float * room)(*shares)

    def _context_size(self, requested: int, n_ctx_train: int) -> tuple[int, str]:
        """The context size to create, and a note when it is not ``requested``.

        Beyond its training length a model's replies fall apart, so a size
        the user chose above it is refused. The default size is not a choice:
        where it exceeds a small model's training length, that length is used.
        """
        if n_ctx_train <= 0 or requested <= n_ctx_train:
            return requested, ""
        if requested == DEFAULT_N_CTX:
            note = (
                f"This model was trained for {n_ctx_train} tokens: the context "
                f"holds {n_ctx_train}, not the default {DEFAULT_N_CTX}."
            )
            log.info("%s", note)
            return n_ctx_train, note
        raise BackendError(
            f"A context of {requested} tokens is too large: this model was "
            f"trained for {n_ctx_train} tokens. Choose {n_ctx_train} or less."
        )

    def _check_memory(self, n_ctx: int) -> None:
        """Refuse a context whose KV cache cannot fit in the free memory.

        llama.cpp would try anyway, and take minutes and all the memory
        before failing (or be killed, or crash in a GPU driver). The estimate
        counts the KV cache only (n_ctx x n_layer x (K + V) x bytes per
        element); the compute buffers come on top. The layers offloaded to a
        GPU keep their share of the cache in that GPU's memory, shared
        between the GPUs as the weights are; the rest is in system memory.
        """
        needed = n_ctx * self._kv_bytes_per_token()
        placement = read_placement(self._load_log)
        n_layer = max(1, int(llama_cpp.llama_model_n_layer(self._model)))
        # The first offloaded layer is the output layer, which has no cache.
        on_devices = needed * min(n_layer, max(0, placement.offloaded_layers - 1))
        on_devices //= n_layer
        weights = sum(placement.device_bytes.values())
        for device in devices.list_devices():
            share = placement.device_bytes.get(device.name, 0)
            if not share or not weights:
                continue
            device_needs = on_devices * share // weights
            if device_needs > device.free_bytes:
                raise BackendError(
                    f"A context of {n_ctx} tokens needs about "
                    f"{_size_text(device_needs)} of {device.name} "
                    f"({device.description}) memory for its KV cache, but only "
                    f"{_size_text(device.free_bytes)} is free there. Choose a "
                    "smaller context size or fewer GPU layers."
                )
        on_host = needed - on_devices
        available = available_memory()
        if available is None or on_host <= available:
            return
        raise BackendError(
            f"A context of {n_ctx} tokens needs about {_size_text(on_host)} of "
            f"memory for its KV cache, but only {_size_text(available)} is "
            "available. Choose a smaller context size (or a quantized KV cache "
            "with flash attention)."
        )

    def _create_context(self, n_ctx: int) -> Any:
        """The llama.cpp context; a failure carries llama.cpp's own reason."""
        ctx_params = self._context_params(n_ctx)
        native_log.clear_errors()
        native_log.start_recording()
        try:
            ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        finally:
            self._load_log += native_log.stop_recording()
        if not ctx:
            detail = native_log.errors("it gave no reason")
            raise BackendError(
                f"Could not create a context of {n_ctx} tokens with these "
                f"settings. llama.cpp says: {detail}."
            )
        return ctx

    def _context_params(self, n_ctx: int) -> Any:
        """llama.cpp's context parameters for these settings at ``n_ctx``."""
        settings = self.settings
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = settings.n_batch
        ctx_params.n_ubatch = settings.n_batch
        # Sequence 1 is scratch space for copying one node's cells in or out,
        # sequences 2.. hold alternatives generated together (``fork``); a
        # unified KV cache lets all of them share the same cells. n_seq_max
        # sizes only the compute buffers: measured on the tiny model and
        # SmolLM2, checkpoints made at n_seq_max 2 restore bit-exactly at 6,
        # and a single sequence decodes to the same logits at either.
        ctx_params.n_seq_max = FIRST_FORK_SEQ + MAX_FORKS
        ctx_params.kv_unified = True
        # Sliding-window layers keep every cell, not only the last window
        # (llama.cpp's default, set here because correctness rests on it).
        # Arbor cuts the context at arbitrary earlier points (a branch switch
        # keeps the common prefix; a re-rendered turn starts inside its
        # parent's span). A window-sized cache reuses old cells, so a cut far
        # enough back finds its window gone; and once its cells wrap around,
        # their order differs from a fresh run's, which changes logits in the
        # last bits (measured: 3.6e-7), breaking bit-exact restores. The price
        # is memory: those layers hold n_ctx cells instead of about
        # 2 x window + n_batch (nothing more for Gemma 2 up to its 8k training
        # context; for Gemma 3, whose window is 1k, 1.5x the whole KV cache at
        # a 4k context and 4.7x at 32k). Checkpoints are the same size either way.
        ctx_params.swa_full = True
        ctx_params.n_threads = settings.threads
        ctx_params.n_threads_batch = settings.threads
        ctx_params.type_k = KV_CACHE_TYPES[settings.kv_cache_type]
        ctx_params.type_v = KV_CACHE_TYPES[settings.kv_cache_type]
        ctx_params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if settings.uses_flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        ctx_params.no_perf = True
        return ctx_params

    # --- model facts ---------------------------------------------------------

    def _meta(self, key: str) -> str | None:
        return model_meta.model_meta(self._model, key)

    def _state_kind(self) -> tuple[StateKind, str]:
        if llama_cpp.llama_model_is_recurrent(self._model):
            return StateKind.FULL, (
                "recurrent model: its state cannot be split per token"
            )
        if llama_cpp.llama_model_is_hybrid(self._model):
            return StateKind.FULL, (
                "hybrid model: part of its state cannot be split per token"
            )
        if self.n_swa > 0:
            return StateKind.DELTA, (
                "sliding-window attention: each node stores only the KV cells of "
                "its own tokens (deltas, in window-sized pieces)"
            )
        return StateKind.DELTA, "each node stores only the KV cells of its own tokens"

    def _kv_bytes_per_token(self) -> int:
        return model_meta.kv_bytes_per_token(self._model, self.settings.kv_cache_type)

    def _load_chat_format(self) -> ChatFormat:
        template_ptr = llama_cpp.llama_model_chat_template(self._model, None)
        template = (
            template_ptr.decode("utf-8", errors="replace") if template_ptr else None
        )
        bos = self.token_text(llama_cpp.llama_vocab_bos(self._vocab))
        eos = self.token_text(llama_cpp.llama_vocab_eos(self._vocab))
        chat_format = chat_formats.load(
            template,
            bos,
            eos,
            architecture=self._meta("general.architecture") or "",
            has_token=lambda text: len(self.tokenize(text)) == 1,
        )
        if chat_format.note:
            log.warning("%s", chat_format.note)
        return chat_format

    @functools.cached_property
    def vocab_id(self) -> str:
        """What decides how text becomes tokens: the vocabulary, template, BOS rule.

        Stored with every node: tokens made under another ``vocab_id`` are
        tokenized again. Hashing every token's text takes one native call per
        token (~20 ms for a 150k vocabulary), so it is computed on first use,
        and a caller may remember it under ``vocab_key`` (``adopt_vocab_id``).
        """
        digest = hashlib.sha256(self.chat_format.source.encode())
        digest.update(str(self.adds_bos).encode())
        for token in range(self.n_vocab):
            digest.update(llama_cpp.llama_vocab_get_text(self._vocab, token) or b"")
            digest.update(b"\0")
        return digest.hexdigest()

    @property
    def vocab_key(self) -> str:
        """A cheap name for ``vocab_id``'s inputs: the model's bytes, template, BOS.

        Two engines with the same key have the same ``vocab_id``: the
        vocabulary is part of the model file that ``content_identity`` names.
        """
        digest = hashlib.sha256(self._model_identity.encode())
        digest.update(self.chat_format.source.encode())
        digest.update(str(self.adds_bos).encode())
        return digest.hexdigest()

    def adopt_vocab_id(self, known: str) -> None:
        """Take ``vocab_id`` as remembered under this ``vocab_key``, unhashed."""
        self.__dict__["vocab_id"] = known

    # --- tokens ----------------------------------------------------------------

    @property
    def adds_bos(self) -> bool:
        """Whether the model wants a BOS token at the start of the context."""
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    @property
    def bos_token(self) -> int:
        """The BOS token id, or -1 if the model has none."""
        return int(llama_cpp.llama_vocab_bos(self._vocab))

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; special markers like ``<|im_start|>`` are parsed."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), buf, capacity, add_bos, True
        )
        if n < 0:  # the buffer was too small; -n is the size needed
            capacity = -n
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buf, capacity, add_bos, True
            )
        return list(buf[:n])

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes a token stands for (special markers only if ``special``)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(
            self._vocab, token, buf, len(buf), 0, special
        )
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(
                self._vocab, token, buf, len(buf), 0, special
            )
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        """A token's text with special markers shown (for templates)."""
        if token < 0:
            return ""
        return self.token_bytes(token, special=True).decode("utf-8", errors="replace")

    def detokenize(self, tokens: list[int] | tuple[int, ...]) -> str:
        """The text of ``tokens`` with special markers shown (the model's view)."""
        data = b"".join(self.token_bytes(t, special=True) for t in tokens)
        return data.decode("utf-8", errors="replace")

    def is_special(self, token: int) -> bool:
        """Whether ``token`` is markup rather than text (never shown as such).

        Control tokens (``<|im_start|>``) always are; user-defined tokens are
        when they look like a marker (``<think>``, ``<|channel|>``), since
        llama.cpp prints user-defined tokens even when asked not to.
        """
        attr = int(llama_cpp.llama_vocab_get_attr(self._vocab, token))
        if attr & _TOKEN_ATTR_CONTROL:
            return True
        if attr & _TOKEN_ATTR_USER_DEFINED:
            text = self.token_text(token).strip()
            return len(text) > 2 and text[0] in "<[" and text[-1] in ">]"
        return False

    def is_end_of_generation(self, token: int) -> bool:
        """Whether ``token`` ends the assistant's turn (EOS, EOT, <|im_end|>, ...)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    # --- decoding --------------------------------------------------------------

    def decode(
        self,
        tokens: list[int] | tuple[int, ...],
        chunks: list[int] | tuple[int, ...] | None = None,
    ) -> list[int]:
        """Append ``tokens`` at ``n_past`` and compute logits for the last one.

        ``chunks`` are batch sizes to use (a replay of how the tokens were first
        decoded, which keeps floating-point results bit-identical); by default
        batches of ``prompt_step``. Returns the batch sizes used. A decode of
        more tokens than one step holds tells ``decode_watch`` before each
        batch, and raises ``Interrupted`` (the batches before it decoded)
        when told to stop; a short one (a message's header apart, then the
        rest) runs through.
        """
        tokens = list(tokens)
        if not tokens:
            return []
        self._fit_threads()
        if self.n_past + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"The conversation needs {self.n_past + len(tokens)} tokens but the "
                f"context holds {self.n_ctx}. Start a new branch higher up, or raise "
                "the context size in the settings."
            )
        if (
            chunks is None
            or sum(chunks) != len(tokens)
            or max(chunks, default=0) > self.n_batch
        ):
            chunks = self.batch_sizes(len(tokens))
        watch = self.decode_watch if len(tokens) > self.prompt_step else None
        offset = 0
        for size in chunks:
            if watch is not None and not watch(offset, len(tokens)):
                raise Interrupted(
                    f"Stopped after reading {offset:,} of {len(tokens):,} tokens."
                )
            self._decode_batch(tokens[offset : offset + size])
            offset += size
        if watch is not None:
            watch(offset, len(tokens))
        return list(chunks)

    @property
    def threads_in_use(self) -> int:
        """The threads llama.cpp computes a batch with now."""
        return int(llama_cpp.llama_n_threads_batch(self._ctx))

    def _fit_threads(self) -> None:
        """With "automatic" threads, compute on the cores free now (see
        ``app/backend/threads.py``); a count the user chose stays."""
        if self.settings.n_threads > 0:
            return
        threads = automatic_threads()
        if threads != self.threads_in_use:
            llama_cpp.llama_set_n_threads(self._ctx, threads, threads)

    def _decode_batch(self, tokens: list[int]) -> None:
        batch = self._batch
        n = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = self.n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = MAIN_SEQ
            batch.logits[i] = i == n - 1
        batch.n_tokens = n
        result = llama_cpp.llama_decode(self._ctx, batch)
        if result == 1:
            raise ContextFullError("The context has no room left for these tokens.")
        if result != 0:
            raise BackendError(f"llama.cpp failed to decode (error {result}).")
        self.n_past += n

    def logits(self, row: int = -1) -> np.ndarray:
        """A copy of the logits after the last decoded token (or batch ``row``)."""
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, row)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def batch_sizes(self, n_tokens: int) -> list[int]:
        """The batch sizes ``decode`` uses for ``n_tokens`` by default."""
        step = self.prompt_step
        return [min(step, n_tokens - i) for i in range(0, n_tokens, step)]

    # --- alternatives decoded together --------------------------------------------

    def fork(self, n: int) -> list[int]:
        """Start ``n`` sequences that continue the main one; return their ids.

        In a unified KV cache the copy shares the cells (each cell is tagged
        with several sequences): nothing is copied, and the prefix is decoded
        once for all of them. ``decode_forks`` then appends to each. The main
        sequence is left as it is.

        What a fork's cells hold is *not* what decoding the same tokens alone
        gives: a batch of several rows takes other matmul kernels, and the
        sequences' cells interleave in the cache, which changes the order of
        the attention sums (measured, see ``ConversationService
        .regenerate_parallel``). Forks serve sampling only; checkpoints are
        made from the main sequence.
        """
        if not 1 <= n <= MAX_FORKS:
            raise BackendError(f"between 1 and {MAX_FORKS} alternatives, not {n}")
        if self.state_kind is StateKind.FULL:
            # Recurrent state has no cells to share; copying it per sequence
            # is possible but not worth it for these models.
            raise BackendError(
                "Alternatives cannot be generated together with this model "
                f"({self.info.state_note})."
            )
        self.end_fork()
        seqs = [FIRST_FORK_SEQ + k for k in range(n)]
        for seq in seqs:
            llama_cpp.llama_memory_seq_cp(self._mem, MAIN_SEQ, seq, -1, -1)
            self._forks[seq] = self.n_past
        return seqs

    def fork_pos(self, seq: int) -> int:
        """How many positions fork sequence ``seq`` holds."""
        return self._forks[seq]

    def decode_forks(self, rows: list[tuple[int, int]]) -> None:
        """Append one token to each of some forks, in one batch.

        ``rows`` are ``(sequence, token)``; row ``i``'s logits are then
        ``logits(i)`` (and what ``sample(sampler, i)`` samples from).
        """
        self._fit_threads()
        batch = self._batch
        for i, (seq, token) in enumerate(rows):
            batch.token[i] = token
            batch.pos[i] = self._forks[seq]
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = True
        batch.n_tokens = len(rows)
        result = llama_cpp.llama_decode(self._ctx, batch)
        if result == 1:
            raise ContextFullError("The context has no room left for these tokens.")
        if result != 0:
            raise BackendError(f"llama.cpp failed to decode (error {result}).")
        for seq, _token in rows:
            self._forks[seq] += 1

    def ranked_token(
        self, row: int, rank: int, allowed: Callable[[int], bool] | None = None
    ) -> int:
        """The token with the ``rank``-th highest logit of batch ``row`` (0:
        top), counting only the tokens ``allowed`` lets come next (a
        grammar's), and the lowest of them where there are fewer."""
        logits = self.logits(row)
        order = np.argsort(-logits, kind="stable")
        if allowed is None:
            return int(order[min(rank, len(order) - 1)])
        found = -1
        for token in order:
            if allowed(int(token)):
                found = int(token)
                if rank == 0:
                    break
                rank -= 1
        return found

    def end_fork(self) -> None:
        """Drop every fork sequence (the cells only they held are freed)."""
        for seq in range(FIRST_FORK_SEQ, FIRST_FORK_SEQ + MAX_FORKS):
            llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
        self._forks.clear()

    def sampler(
        self,
        params: SamplingParams,
        history: list[int],
        constraint: Constraint | None = None,
    ) -> Sampler:
        """A sampler chain for ``params``, primed with the context's recent
        tokens, that follows ``constraint``'s grammar if one is given
        (``GrammarError`` if llama.cpp refuses it)."""
        return Sampler(params, history, self.n_vocab, self._vocab, constraint)

    def sample(self, sampler: Sampler, row: int = -1) -> int:
        """Pick the next token with ``sampler`` from the logits of batch ``row``."""
        return sampler.sample(self._ctx, row)

    # --- KV state ----------------------------------------------------------------

    def truncate(self, pos: int) -> None:
        """Forget every token from ``pos`` on (keep the first ``pos``).

        When the context cannot be cut exactly there it is emptied instead:
        ``n_past`` is then 0, which callers take as "start from the root".
        """
        if pos >= self.n_past:
            return
        if pos <= 0 or self.state_kind is StateKind.FULL:
            # Recurrent state cannot be cut at a position: start over.
            llama_cpp.llama_memory_clear(self._mem, True)
            self._forks.clear()
            self.n_past = 0
            return
        if not llama_cpp.llama_memory_seq_rm(
            self._mem, MAIN_SEQ, pos, -1
        ) or not self._window_intact(pos):
            llama_cpp.llama_memory_clear(self._mem, True)
            self.n_past = 0
            return
        self.n_past = pos

    def _window_intact(self, pos: int) -> bool:
        """Whether the sliding-window layers still hold what token ``pos`` sees.

        The next token attends to the ``n_swa`` positions before it. With
        ``swa_full`` nothing is ever dropped, so this is a guard, not a path
        taken: were cells dropped (a window-sized cache reuses the oldest),
        decoding would go on silently wrong. llama.cpp keeps every position
        between a sequence's first and last cell (it purges below any cell it
        reuses), and these two calls answer for the window cache, so the two
        ends tell whether the whole window is there.
        """
        if not self.n_swa:
            return True
        low = llama_cpp.llama_memory_seq_pos_min(self._mem, MAIN_SEQ)
        high = llama_cpp.llama_memory_seq_pos_max(self._mem, MAIN_SEQ)
        return bool(high == pos - 1 and 0 <= low <= max(0, pos - self.n_swa))

    def capture(self, start: int, end: int) -> bytes:
        """Serialize the KV cells of positions ``[start, end)`` of the conversation.

        The context may go on after ``end`` (a span decoded in one batch with
        the next one's start). For "full" models the whole state at ``end``
        is serialized instead, so the context must end there. Sliding-window
        models get one serialized piece per window-aligned stretch (see
        ``_window_pieces``), each with a length prefix.
        """
        whole = self.state_kind is StateKind.FULL
        if end > self.n_past or (whole and end != self.n_past):
            raise BackendError(f"capture at {end} but the context is at {self.n_past}")
        if whole:
            return self._seq_state(MAIN_SEQ)
        if not self.n_swa:
            return self._capture_cells(start, end)
        pieces = [
            self._capture_cells(*span) for span in self._window_pieces(start, end)
        ]
        return b"".join(len(piece).to_bytes(8, "little") + piece for piece in pieces)

    def begin_deltas(self, cells: Sequence[int]) -> None:
        """Start applying consecutive deltas of ``cells`` cells each, in order.

        ``add_delta`` then takes them one by one and ``end_deltas`` finishes:
        consecutive deltas whose bytes have the plain shape (``kv_state``)
        and that fit together in ``RUN_BYTES`` are combined and applied with
        one llama.cpp call per run; others with a call each. Fewer deltas
        than announced may come.
        """
        self._combined.clear()
        self._staged_end = self.n_past
        self._planned = list(cells)

    def add_delta(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Add the delta of positions ``[start, end)`` after what is held or staged.

        ``data`` is only read during the call. Returns False when the delta
        is refused (it does not follow on, or llama.cpp rejects it); what was
        staged before it may then have been applied or not: ``n_past`` says.
        """
        if start != self._staged_end:
            return False
        if self._planned:
            self._planned.pop(0)
        if not self._combined.filled:
            # Too long to share a run even with the next one: skip parsing.
            per_cell = len(data) / max(1, end - start)
            following = self._planned[0] if self._planned else 0
            if (end - start + following) * per_cell > RUN_BYTES:
                return self._add_alone(data, start, end)
        layout = (
            DeltaLayout.parse(memoryview(data), start, end)
            if self.state_kind is StateKind.DELTA and not self.n_swa
            else None
        )
        if layout is None:
            # Sliding-window pieces, or bytes of another shape: llama.cpp
            # checks them itself, one call each.
            return self._add_alone(data, start, end)
        if self._combined.accepts(layout):
            self._combined.add(memoryview(data), layout)
            self._staged_end = end
            return True
        if not self.end_deltas():
            return False
        cells = self._run_cells(layout)
        if cells == layout.cells:
            # Alone in its run: straight from the caller's buffer.
            return self._add_alone(data, start, end)
        self._combined.begin(layout, cells)
        self._combined.add(memoryview(data), layout)
        self._staged_end = end
        return True

    def _add_alone(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Apply a delta with a call of its own, after what is staged."""
        if not self.end_deltas():
            return False
        ok = self.restore(data, start, end)
        self._staged_end = self.n_past
        return ok

    def _run_cells(self, layout: DeltaLayout) -> int:
        """Cells of a run starting with ``layout``'s delta: it and the planned
        deltas after it, while they fit in the run's bytes (see ``RUN_BYTES``).

        Runs end on a delta's boundary, so that a run is laid out once for
        exactly the cells it gets.
        """
        limit = RUN_BYTES if layout.v_trans else RUN_BYTES // 4
        cells = layout.cells
        for planned in self._planned:
            if (cells + planned) * layout.cell_bytes > limit:
                break
            cells += planned
        return cells

    def end_deltas(self) -> bool:
        """Apply what ``add_delta`` staged; False if refused (none of it held)."""
        state = self._combined.state()
        start, end = self.n_past, self._staged_end
        self._combined.clear()
        if not len(state):
            return True
        if not self._apply_cells(state, start, end):
            self._staged_end = self.n_past
            return False
        self.n_past = end
        return True

    def restore(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Apply a checkpoint made by ``capture(start, end)``; True on success.

        A delta goes on top of the ``start`` tokens already held; a full
        snapshot replaces everything. On failure the context is left holding
        exactly what it held before (or nothing, for full snapshots).
        """
        if self.state_kind is StateKind.FULL:
            llama_cpp.llama_memory_clear(self._mem, True)
            self.n_past = 0
            if not self._set_seq_state(data, MAIN_SEQ):
                llama_cpp.llama_memory_clear(self._mem, True)
                return False
            if llama_cpp.llama_memory_seq_pos_max(self._mem, MAIN_SEQ) != end - 1:
                llama_cpp.llama_memory_clear(self._mem, True)
                return False
            self.n_past = end
            return True
        if start != self.n_past:
            return False
        if not self.n_swa:
            ok = self._apply_cells(data, start, end)
        else:
            pieces = self._window_pieces(start, end)
            states = self._split_pieces(data)
            ok = (
                states is not None
                and len(states) == len(pieces)
                and all(
                    self._apply_cells(state, p0, p1)
                    for state, (p0, p1) in zip(states, pieces, strict=True)
                )
            )
            if not ok:  # take back the pieces already applied
                llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, start, -1)
        if ok:
            self.n_past = end
        return ok

    def _window_pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """``[start, end)`` cut at multiples of ``n_swa``.

        llama.cpp serializes a sequence's window-layer cells only within the
        window of its last position, so a delta of a longer span would lack
        the window layers' cells of all but its last ``n_swa`` tokens. Such a
        delta restores exactly at its end, but the context could not then be
        cut inside that span (measured: wrong logits that no position check
        notices). Pieces of at most one window, aligned so that chunked
        attention (Llama 4) keeps them whole too, carry every cell.
        """
        pieces = []
        while start < end:
            cut = min(end, (start // self.n_swa + 1) * self.n_swa)
            pieces.append((start, cut))
            start = cut
        return pieces

    @staticmethod
    def _split_pieces(data: bytes | memoryview) -> list[bytes | memoryview] | None:
        """The pieces of a sliding-window delta, or None if it is malformed."""
        pieces: list[bytes | memoryview] = []
        offset = 0
        while offset < len(data):
            size = int.from_bytes(data[offset : offset + 8], "little")
            offset += 8
            if size == 0 or offset + size > len(data):
                return None
            pieces.append(data[offset : offset + size])
            offset += size
        return pieces

    def _capture_cells(self, start: int, end: int) -> bytes:
        llama_cpp.llama_memory_seq_rm(self._mem, SCRATCH_SEQ, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._mem, MAIN_SEQ, SCRATCH_SEQ, start, end)
        try:
            # A window cache that dropped some of these cells would make a delta
            # that restores a context with holes: refuse rather than store it.
            if self.n_swa and not self._holds(SCRATCH_SEQ, start, end):
                raise BackendError(
                    f"The sliding-window cache no longer holds positions {start}-"
                    f"{end - 1}; no checkpoint was made."
                )
            return self._seq_state(SCRATCH_SEQ)
        finally:
            llama_cpp.llama_memory_seq_rm(self._mem, SCRATCH_SEQ, -1, -1)

    def _apply_cells(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Add the cells of one serialized delta (piece) to the main sequence."""
        ok = self._set_seq_state(data, SCRATCH_SEQ)
        # The cells must sit exactly at the node's positions: a checkpoint of the
        # right size but the wrong place would silently corrupt the context. A
        # window-sized piece holds all its cells, so for sliding-window models
        # (whose position queries answer for the window cache) this holds too.
        ok = ok and self._holds(SCRATCH_SEQ, start, end)
        if ok:
            llama_cpp.llama_memory_seq_cp(self._mem, SCRATCH_SEQ, MAIN_SEQ, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._mem, SCRATCH_SEQ, -1, -1)
        return ok

    def _holds(self, seq: int, start: int, end: int) -> bool:
        return bool(
            llama_cpp.llama_memory_seq_pos_min(self._mem, seq) == start
            and llama_cpp.llama_memory_seq_pos_max(self._mem, seq) == end - 1
        )

    def _seq_state(self, seq: int) -> bytes:
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq)
        # A ctypes array, then a copy into bytes, both with the GIL held. Tried
        # instead: anonymous memory that llama.cpp fills with the GIL released.
        # Other threads then waited about 1 ms instead of about 4 during a
        # 245-token capture, but every capture touched fresh pages, where these
        # two reuse the heap's warm memory in a running process: 5.7 to 6.1 ms
        # a capture instead of 1.7 to 2.5 (docs/benchmarks.md).
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, seq)
        return ctypes.string_at(buf, written)

    def _set_seq_state(self, data: bytes | memoryview, seq: int) -> bool:
        # Point llama.cpp at the caller's own buffer (it only reads it):
        # copying tens of megabytes first would cost more than the restore.
        # A read-only memoryview (of bytes) has no writable ctypes view, so
        # its address comes from numpy, which takes any buffer as it is.
        size = len(data)
        if not size:
            return False
        address = np.frombuffer(data, np.uint8).ctypes.data
        buf = ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8))
        written = llama_cpp.llama_state_seq_set_data(self._ctx, buf, size, seq)
        return bool(written == size)

    # --- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        """Free the context and the model; the engine is unusable afterwards."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None
            rpc_client.release(self._workers)

    def __enter__(self) -> LlamaEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
