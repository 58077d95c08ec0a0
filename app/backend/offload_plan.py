"""Planning an offload: what a model's parts cost on a GPU, measured before
loading it, and what names the placement in a backend profile.

llama.cpp sizes a model without allocating it (``no_alloc``, the load its
own ``--fit`` makes): the tensors' shapes are read and the compute buffers
reserved on paper. It does not say what each layer weighs; the token
embeddings (kept on the CPU) and the output layer are about n_vocab x n_embd
weights each, and the repeating layers share the rest.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp

from app.backend import native_log
from app.backend.errors import ModelFileError
from app.backend.model_meta import kv_bytes_per_token
from app.backend.offload import OffloadCost
from app.backend.placement import Placement, read_placement
from app.backend.values import Device


def probe(
    model_path: Path,
    kv_cache_type: str,
    n_ctx: int,
    context_params: Callable[[int], Any],
) -> tuple[OffloadCost, int]:
    """What offloading the model at ``model_path`` costs, and the context size
    it is for (``n_ctx``, no more than the model was trained for).

    ``context_params(n_ctx)`` gives the context parameters the real load
    will use, so that the compute buffers are sized as they will be.
    It takes about as long as reading the vocabulary.
    """
    with sized_model(model_path) as model:
        n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(model))
        if n_ctx_train > 0:
            n_ctx = min(n_ctx, n_ctx_train)
        native_log.start_recording()
        try:
            ctx = llama_cpp.llama_init_from_model(model, context_params(n_ctx))
        finally:
            compute = read_placement(native_log.stop_recording()).compute_bytes
        if ctx:
            llama_cpp.llama_free(ctx)
        return cost(model, kv_cache_type, sum(compute.values())), n_ctx


@contextmanager
def sized_model(model_path: Path, on_no_device: bool = False) -> Iterator[Any]:
    """The model at ``model_path`` read without its weights (``no_alloc``):
    its shapes and metadata, nothing allocated; freed on leaving.

    Sized as for offloading every layer, or ``on_no_device`` on none at all.
    Raises ``ModelFileError`` with llama.cpp's reason if it cannot be read.
    """
    params = llama_cpp.llama_model_default_params()
    params.no_alloc = True
    params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    params.n_gpu_layers = -1
    # Alive until the load returns (llama.cpp reads the list then).
    no_devices = (ctypes.c_void_p * 1)(None)
    if on_no_device:
        params.n_gpu_layers = 0
        params.devices = ctypes.cast(no_devices, ctypes.c_void_p)
    native_log.clear_errors()
    model = llama_cpp.llama_model_load_from_file(os.fsencode(model_path), params)
    if not model:
        raise ModelFileError(
            f"{model_path.name} could not be loaded (truncated, corrupt or an "
            "unsupported architecture). llama.cpp says: "
            f"{native_log.errors('it gave no reason')}."
        )
    try:
        yield model
    finally:
        llama_cpp.llama_model_free(model)


def cost(model: Any, kv_cache_type: str, compute_bytes: int) -> OffloadCost:
    """The GPU bytes of a loaded (or sized) llama.cpp ``model``'s parts."""
    n_layer = max(1, int(llama_cpp.llama_model_n_layer(model)))
    size = int(llama_cpp.llama_model_size(model))
    bytes_per_weight = size / max(1, int(llama_cpp.llama_model_n_params(model)))
    n_vocab = int(
        llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    )
    embeddings = int(n_vocab * llama_cpp.llama_model_n_embd(model) * bytes_per_weight)
    return OffloadCost(
        n_layer=n_layer,
        output_bytes=embeddings,
        layer_bytes=max(0, size - embeddings) // n_layer,
        kv_bytes_per_token=kv_bytes_per_token(model, kv_cache_type),
        compute_bytes=compute_bytes,
    )


def signature(placement: Placement, found: Sequence[Device]) -> str:
    """The layers on GPUs and which of the ``found`` devices hold them, for
    the backend profile ("" for none):
    "29/29 on Vulkan0 (Vulkan NVIDIA GeForce RTX 4070)"."""
    if not placement.offloaded_layers:
        return ""
    named = {d.name: d for d in found}
    holders = ", ".join(
        f"{name} ({named[name].backend} {named[name].description})"
        if name in named
        else name
        for name in sorted(placement.device_bytes)
    )
    return f"{placement.offloaded_layers}/{placement.offloadable_layers} on {holders}"
