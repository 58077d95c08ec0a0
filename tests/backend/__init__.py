"""Tests of app/backend: the llama.cpp engine, chat formats, tokens, workers."""
