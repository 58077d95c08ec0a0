"""Dialogs, and the parts that only dialogs use.

- ``settings``: ``SettingsDialog``: model, backend, sampling, prompt, text size.
- ``tools_tab``: Settings → Tools, the MCP servers and their tools.
- ``workers_tab``: Settings → Workers, the ``arbor worker``s and their layers.
- ``gpu_layers``: ``GpuLayersField``, the layers on the GPU and their cost.
- ``sampling_form``: ``SamplingForm``, the fields of a ``SamplingParams``.
- ``conversation_settings``: a conversation's system prompt and sampling.
- ``new_conversation``: ``NewConversationDialog``, title, preset and prompt.
- ``models``: ``ModelsDialog``, recommended, Hub, installed and downloading.
- ``storage``: ``StorageDialog``, checkpoint sizes, database, budget.
- ``search``: ``SearchDialog``, find a message in any conversation.
- ``local_server``: ``LocalServerDialog``, the OpenAI-compatible API.
- ``context_full``: the ways on when a branch has filled the context.
- ``engine_lost``: the way on when the engine's process ended.
- ``errors``: ``show_error`` and ``confirm``, for expected failures.
- ``crash``: unexpected errors, with copyable details.
"""
