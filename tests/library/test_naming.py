"""One name per model (``app.library.naming``): the catalog's, else the file
name cleaned and tidied, else the GGUF's ``general.name``; the same name
before the download, while it runs and once the model is loaded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.library.catalog import Catalog, model_name, shipped_catalog
from app.library.naming import tidy


@pytest.mark.parametrize(
    ("filename", "name"),
    [
        # What the window used to show for it: "gemma 3 270m".
        ("gemma-3-270m-it-Q4_K_M.gguf", "Gemma 3 270M Instruct"),
        ("gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M"),
        ("qwen2.5-1.5b-instruct-q8_0.gguf", "Qwen2.5 1.5B Instruct"),
        ("Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf", "Qwen3 30B A3B Instruct 2507"),
        ("gemma-3n-e2b-it-Q4_K_M.gguf", "Gemma 3n E2B Instruct"),
        ("mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf", "Mixtral 8x7B Instruct v0.1"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2 135M Instruct"),
        ("Phi-4-mini-instruct-Q4_K_M.gguf", "Phi 4 Mini Instruct"),
        ("tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf", "Tinyllama 1.1B Chat v1.0"),
        ("model-bf16-00001-of-00003.gguf", "Model"),
        ("tiny.gguf", "Tiny"),
    ],
)
def test_file_names_become_clean_names(filename, name):
    assert model_name(filename) == name
    # A path names the same model as its file name.
    assert model_name(f"/data/models/owner/repo/{filename}") == name


def test_a_catalog_file_has_the_catalog_s_name():
    for entry in shipped_catalog().entries:
        assert model_name(entry.file) == entry.name
        assert model_name(entry.file, repo=entry.repo) == entry.name
    # A catalog of one entry whose name is not its file's.
    entry = replace(
        shipped_catalog().entries[0],
        name="Phi-4 mini Instruct",
        repo="bartowski/microsoft_Phi-4-mini-instruct-GGUF",
        file="microsoft_Phi-4-mini-instruct-Q4_K_M.gguf",
    )
    catalog = Catalog(written="", entries=(entry,))
    assert model_name(entry.file, catalog=catalog) == "Phi-4 mini Instruct"
    # The same file name in another repository is not the catalog's file.
    assert model_name(entry.file, repo="someone/else-GGUF", catalog=catalog) == (
        "Microsoft Phi 4 Mini Instruct"
    )


def test_general_name_only_where_the_file_name_says_nothing():
    # A build label does not replace a file name that names the model.
    assert model_name("tiny.gguf", general_name="arbor-tiny-test") == "Tiny"
    assert (
        model_name("Qwen3-4B-Q4_K_M.gguf", general_name="Smollm2 135M 8k Lc100K Mix1")
        == "Qwen3 4B"
    )
    # "model-Q4_K_M.gguf" says nothing: the GGUF's own name, tidied.
    assert model_name("model-Q4_K_M.gguf", general_name="gemma 3 270m") == (
        "Gemma 3 270M"
    )
    assert model_name("ggml-model-q8_0.gguf", general_name="llama-3.2-1b") == (
        "Llama 3.2 1B"
    )
    assert model_name("model-Q4_K_M.gguf") == "Model"


def test_tidy_keeps_what_the_uploader_capitalised():
    assert tidy("gemma 3 270m it") == "Gemma 3 270M Instruct"
    assert tidy("SmolLM2 135M 8k") == "SmolLM2 135M 8K"
    assert tidy("DeepSeek R1 Distill Qwen 7B") == "DeepSeek R1 Distill Qwen 7B"
    assert tidy("") == ""
