"""llama.cpp's own log, routed into Python logging and kept where Arbor reads it.

llama.cpp says some things only in its log: why a model failed to load, which
backend files it loaded, how many layers it offloaded and how large each
device's buffers are. This module installs the one C callback, forwards every
message to the ``app.backend.llama_cpp`` logger and keeps the lines Arbor
reads back: the last errors, and everything since ``start_recording``.
"""

from __future__ import annotations

import ctypes
import logging
import re

import llama_cpp

# ggml_log_level, from ggml.h (the binding does not export it). CONT carries
# on the previous message: the progress dots of a load, or the rest of a line.
_GGML_LOG_WARN = 3
_GGML_LOG_ERROR = 4
_GGML_LOG_CONT = 5
# llama.cpp's DEBUG and INFO are its own verbose trace (a hundred lines per
# model load): both go to DEBUG so that an INFO log stays about Arbor.
_PYTHON_LOG_LEVELS = {_GGML_LOG_WARN: logging.WARNING, _GGML_LOG_ERROR: logging.ERROR}
_native = logging.getLogger("app.backend.llama_cpp")

# The last few errors llama.cpp logged, for the message of a failed load.
_last_errors: list[str] = []
# Every line since start_recording, while a load is being watched.
_recorded: list[str] | None = None
_previous_level = logging.DEBUG


# The module keeps a reference to the callback, so it is never freed.
@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # a ctypes CFUNCTYPE
def _native_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _previous_level
    message = text.decode("utf-8", errors="replace")
    if level == _GGML_LOG_CONT:
        python_level = _previous_level
        if python_level == logging.ERROR and _last_errors:
            _last_errors[-1] += message.rstrip("\n")
    else:
        python_level = _PYTHON_LOG_LEVELS.get(level, logging.DEBUG)
        _previous_level = python_level
        if python_level == logging.ERROR:
            _last_errors.append(message.rstrip("\n"))
            del _last_errors[:-5]
    if _recorded is not None and level != _GGML_LOG_CONT:
        _recorded.append(message.rstrip("\n"))
    if message.strip(" .\n"):  # not a lone progress dot
        _native.log(python_level, "llama.cpp: %s", message.rstrip())


_installed = False


def install() -> None:
    """Route llama.cpp's log through this module (once; later calls do nothing)."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_native_log, ctypes.c_void_p(0))
        _installed = True


def clear_errors() -> None:
    """Forget earlier errors, before a call whose failure should be explained."""
    _last_errors.clear()


def errors(fallback: str) -> str:
    """What llama.cpp logged as errors since the last clear, as one sentence."""
    # "llama_model_load: error loading model: ..." -> "error loading model: ..."
    lines = [re.sub(r"^\w+: ", "", line.strip()) for line in _last_errors]
    return "; ".join(line for line in lines if line) or fallback


def start_recording() -> None:
    """Keep every line llama.cpp logs from now until ``stop_recording``."""
    global _recorded
    _recorded = []


def stop_recording() -> list[str]:
    """The lines logged since ``start_recording``; recording stops."""
    global _recorded
    lines, _recorded = _recorded or [], None
    return lines
