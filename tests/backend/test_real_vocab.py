"""The real-vocabulary tiny models tokenize exactly like the vocabularies they copy.

``tests/helpers/real_vocab.py`` copies a real model family's tokenizer (from one of
llama.cpp's vocab-only GGUFs, or from the Gemma 3 270M file) into a tiny
random-weight llama. Three checks that the copy is faithful: llama.cpp's own
tokenizer test cases (``ggml-vocab-NAME.gguf.inp``/``.out``) come out the
same from the copy as from the vocabulary file, and as expected; a chat
template's rendering, special markers parsed, gives the same tokens from
both; and the app's backend loads the copy and decodes with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.chat_format import ChatFormat, Message
from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from tests.helpers import real_vocab, template_corpus

# name: a reference template of the same family, to tokenize its rendering.
VOCABS = {
    "phi-3": "microsoft-Phi-3.5-mini-instruct",
    "llama-spm": "mistralai-Mistral-Nemo-Instruct-2407",
    "llama-bpe": "meta-llama-Llama-3.1-8B-Instruct",
    "command-r": "CohereForAI-c4ai-command-r-plus-tool_use",
    "gemma-4": "google-gemma-4-31B-it",
}
# Each is read in well under a second; Gemma 4's 262k tokens and 515k merges
# make the biggest file.
MAX_BYTES = 40_000_000
CONVERSATION = [
    Message("user", "Hi there!\n"),
    Message("assistant", "  Hello! How can I help?\n\n"),
    Message("user", "Grüße aus Köln, 世界 🌳?"),
]


def _rendering(template_name: str, engine: LlamaEngine) -> str:
    fmt = ChatFormat(
        template_corpus.reference_templates()[template_name],
        engine.token_text(engine.bos_token) if engine.bos_token >= 0 else "",
        "",
    )
    return fmt.render(CONVERSATION, add_generation_prompt=True)


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_copy_tokenizes_like_the_vocabulary(real_vocabs, tmp_path, name):
    vocab = real_vocab.vocab_file(real_vocabs, name)
    model = real_vocab.real_vocab_model(tmp_path, vocab, None)
    assert model.stat().st_size < MAX_BYTES
    cases = real_vocab.tokenizer_cases(real_vocabs, name)
    expected = [case.tokens for case in cases]
    engine = LlamaEngine(model, BackendSettings(n_ctx=256, n_threads=1))
    try:
        rendered = _rendering(VOCABS[name], engine)
        with real_vocab.llama_tokenizer(vocab) as tokenize:
            # llama.cpp's expectations hold for the vocabulary itself...
            assert [tokenize(case.text, False) for case in cases] == expected
            from_vocab = tokenize(rendered, True)
        # ... and for the copy.
        assert real_vocab.llama_tokenize(model, [c.text for c in cases]) == expected
        # The backend's tokens of a template's render, markers parsed.
        assert engine.tokenize(rendered) == from_vocab
        assert engine.n_vocab == len(
            real_vocab.read_tokenizer(vocab)["tokenizer.ggml.tokens"][2]
        )
        engine.decode(from_vocab[:32])
        assert engine.n_past == len(from_vocab[:32])
    finally:
        engine.close()


def test_model_name_is_copied_as_it_decides_tokenization(real_vocabs, tmp_path):
    # llama.cpp gives Phi-3's special tokens rstrip by the model's name: a
    # copy under another name would keep the newline after <|end|>.
    vocab = real_vocab.vocab_file(real_vocabs, "phi-3")
    model = real_vocab.real_vocab_model(tmp_path, vocab, None)
    assert real_vocab.read_tokenizer(model)["general.name"][2] == b"Phi3"
    texts = ["<|end|>\n<|user|>\nHi", "<|end|>", "<|user|>"]
    tokens, [end], [user] = real_vocab.llama_tokenize(model, texts, special=True)
    assert real_vocab.llama_tokenize(vocab, texts[:1], special=True) == [tokens]
    assert tokens[:2] == [end, user]


@pytest.mark.gemma3
def test_copy_of_a_real_model_file(gemma3_models, real_vocabs, tmp_path):
    # Only the 253 MB file's metadata is read; the copy tokenizes like it.
    source = gemma3_models.base
    model = real_vocab.real_vocab_model(tmp_path, source, None)
    assert model.stat().st_size < MAX_BYTES
    texts = [case.text for case in real_vocab.tokenizer_cases(real_vocabs, "gemma-4")]
    texts.append("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")
    for special in (False, True):
        assert real_vocab.llama_tokenize(
            model, texts, special
        ) == real_vocab.llama_tokenize(source, texts, special)


def test_cached_model_is_reused_and_keyed_by_template(real_vocabs, tmp_path: Path):
    vocab = real_vocab.vocab_file(real_vocabs, "llama-spm")
    first = real_vocab.real_vocab_model(tmp_path, vocab, "{{ 'a' }}")
    written = first.stat().st_mtime_ns
    assert real_vocab.real_vocab_model(tmp_path, vocab, "{{ 'a' }}") == first
    assert first.stat().st_mtime_ns == written
    assert real_vocab.real_vocab_model(tmp_path, vocab, "{{ 'b' }}") != first
