"""``arbor serve``: an OpenAI-compatible HTTP API whose prompt cache is the
conversation tree (the request's messages are matched against stored nodes,
whose checkpoints restore the context)."""

# The port ``arbor serve`` listens on unless told (llama.cpp's server takes
# 8080 and Ollama 11434; this one is free of both).
DEFAULT_PORT = 8790
