"""``arbor serve``: an OpenAI-compatible HTTP API whose prompt cache is the
conversation tree (the request's messages are matched against stored nodes,
whose checkpoints restore the context)."""
