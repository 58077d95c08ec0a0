"""Issue 44: Arbor's exactness checks and figures with every layer on a real GPU.

NEVER RUN ON A GPU YET: the CUDA build and every step with all layers on a
GPU were prepared and tested on this project's machines without one (the
CPU, and Mesa's software Vulkan driver, lavapipe). The first run on a GPU is
also this tool's first test there; its JSON says so (``status_note``).

What it does, in one command on a machine with an NVIDIA GPU and no
network (``run --build``):

1. builds llama.cpp from the sources prepared here (``build.py``: CUDA for
   the card's architecture only, backends loaded at run time as the
   Makefile builds them, llama-bench from the same sources; Vulkan, then
   the CPU alone, where the CUDA build fails);
2. writes random-weight models of real models' shapes (``shapes.py``:
   Llama 3.2 1B, Gemma 2 2B with a 512-token window, Llama 3.1 8B);
3. runs the exactness checks with every layer on the GPU (``steps.py``):
   a cold resume in a new process reprocesses nothing and sees the logits
   of continuous decoding, for a Llama and for a sliding-window model; a
   span that shared its batch is decoded again exactly
   (``tests/helpers/batch_replay.py``); a checkpoint made on the GPU is refused on
   the CPU with its reason, and the reverse;
4. measures cold resume against reprocessing at 2k, 8k and 32k tokens
   (``app.bench``), capture and restore throughput against the card's own
   copy rates (``copy_rate.py``), and prompt and generation speed against
   llama-bench;
5. writes ``gpu_check.json``, ``gpu_check.md`` (the table) and
   ``build.log`` to ``--out``, after every step, within ``--deadline``
   seconds (steps that no longer fit are skipped, the 8B ones first).

How to run it
-------------
Here (with the network; ``make setup`` has cached the llama-cpp-python
sdist), write ``.gpu-check/`` (git-ignored, about 29 MiB: the trimmed
sources, the bindings, the wheels the steps import):

    .venv/bin/python -m tools.gpu_check prepare

On the GPU machine (the ``run`` tool; carry ``[".gpu-check"]``,
``timeout_s`` 600), one command:

    export PATH=$PATH:/usr/local/cuda/bin; nvidia-smi -L;
    python3 -m tools.gpu_check run --build --out $OUT --deadline 560

A second call on the same machine while it stays up reuses the build and
the models and can add what the first had no time for (the 8B shape's
figures, here):

    python3 -m tools.gpu_check run --build --out $OUT --deadline 200 --only big

``--cuda-fa`` also builds flash attention's CUDA kernels (a longer build;
how much longer was not measured) and measures capture and restore with it
on: for a later session, once the default build has run.

The same checks here, with small shapes (tests/tools/test_gpu_check.py runs the
first):

    .venv/bin/python -m tools.gpu_check run --backend cpu --out /tmp/check
    .venv/bin/python -m tools.gpu_check run --backend vulkan --out /tmp/check

and the device's path without a GPU (the prepared bindings under a bare
Python 3.12, with this machine's libraries, or a CPU build of the prepared
sources: ``build --backend cpu``):

    python3.12 -m tools.gpu_check run --backend cpu --out /tmp/check \\
        --lib-dir .venv/lib/python3.11/site-packages/llama_cpp/lib
"""
