"""Names vulture's dead-code pass must count as used (issue 42; ``make lint``).

Each name here is read by machinery outside our code, which vulture cannot
see: a library, the C side of llama.cpp, pytest. Vulture's whitelist idiom:
touching an attribute of ``_`` marks that name as used, everywhere. Generic
cases (Qt's camelCase overrides, pytest fixtures and hooks) are ignore
options in pyproject.toml's ``[tool.vulture]`` instead. Add a name only with
the reason it is used; delete code that nothing uses.

This file is never imported; vulture only parses it.
"""

# ruff: noqa: B018 - the bare attribute expressions are the idiom, read by vulture.

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# llama.cpp's parameter structs (ctypes): each field assigned is read by
# llama_model_load_from_file / llama_init_from_model in C
# (app/backend/engine.py, app/backend/offload_plan.py).
_.progress_callback
_.use_extra_bufts
_.tensor_split
_.no_alloc
_.load_mode
_.n_ubatch
_.n_seq_max
_.kv_unified
_.swa_full
_.n_threads_batch
_.type_k
_.type_v
_.flash_attn_type
_.no_perf

# sqlite3 connection attributes, read by the driver: autocommit at the
# driver level (storage/db.py), rows by column name (tests/server/test_client_chats.py).
_.isolation_level
_.row_factory

# http.server calls a request handler's do_<METHOD> and log_message, and
# reads close_connection and the server's daemon_threads (tests/helpers/fake_hub.py).
_.do_GET
_.do_HEAD
_.log_message
_.close_connection
_.daemon_threads

# Jinja reads these class attributes: the operators a sandbox routes through
# call_binop, the tags an extension parses (app/backend/chat_template.py).
_.intercepted_binops
_.tags

# Dataclass fields written out with asdict() or vars() into JSON and read
# from there: a reply's stats in the CLI's and the server's answers
# (app/conversation/results.py), the bench's results (app/bench/results.py,
# checked by tests/bench/test_bench.py), the GPU check's build attempts
# (tools/gpu_check/build.py).
_.checkpoint_bytes_written
_.logits_digest
_.sync_ms
_.log_tail

# pydantic models that are JSON schemas the model is asked to fill: their
# fields are the schema (tests/server/test_server_clients.py, tools/agent_bench.py).
_.confidence
_.readings

# typing.Protocol signatures of callables: objects of that shape are called,
# their __call__ never named (app/window/reply_in_flight.py,
# app/window/shown_conversation.py).
_.__call__

# Fixtures a test requests for their effect only (skip unless lavapipe runs,
# a short Hub timeout, with and without the style sheet): pytest reads the
# argument's name (tests/system/test_gpu_soft.py, tests/library/test_hub_timeouts.py,
# tests/ui/test_error_dialog.py).
_.lavapipe
_.short_bound
_.styled

# Tests whose code is the point: defining the class is what must raise
# (tests/jobs/test_jobs.py); the attribute makes a reference cycle for the
# collector to free (tests/ui/test_gui_thread_gc.py).
_.Untitled
_.me
