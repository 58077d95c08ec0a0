"""The llama.cpp backend: the only package that imports ``llama_cpp``. No Qt here."""
