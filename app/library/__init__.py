"""The model library: the curated catalog, the Hugging Face Hub, downloads, and
the models on this machine.

Qt-free, so that the command line (``arbor models …``) and the window share it;
the window runs its slow parts (network, hashing) on a worker thread.
"""
