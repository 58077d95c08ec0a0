"""The views name a model as ``app.library.naming`` does (issue 41): the
welcome page's recent models and the switch bar, on real widgets
(offscreen); the status bar, Downloads and the empty conversation are
checked through the window in ``test_models_dialog.py``."""

from __future__ import annotations

from pathlib import Path

from app.qt.views.library.model_offer import ModelOfferBar
from app.qt.views.library.welcome import WelcomePage


def _file(folder: Path, name: str) -> str:
    path = folder / name
    path.write_bytes(b"GGUF")
    return str(path)


def test_recent_models_have_clean_names_and_their_quantization(qtbot, tmp_path):
    page = WelcomePage()
    qtbot.addWidget(page)
    four = _file(tmp_path, "gemma-3-270m-it-Q4_K_M.gguf")
    eight = _file(tmp_path, "gemma-3-270m-it-Q8_0.gguf")
    plain = _file(tmp_path, "tiny.gguf")
    page.set_recent([four, eight, plain, str(tmp_path / "gone-Q4_0.gguf")])
    items = [page.recent_list.item(i) for i in range(page.recent_list.count())]
    assert [i.text() for i in items] == [
        "Gemma 3 270M Instruct · Q4_K_M",
        "Gemma 3 270M Instruct · Q8_0",
        "Tiny",
    ]
    assert [i.toolTip() for i in items] == [four, eight, plain]  # the file itself


def test_the_switch_bar_names_both_models_cleanly(qtbot, tmp_path):
    bar = ModelOfferBar()
    qtbot.addWidget(bar)
    made_with = _file(tmp_path, "gemma-3-270m-it-Q4_K_M.gguf")
    bar.offer(made_with, str(tmp_path / "qwen2.5-0.5b-q8_0.gguf"))
    assert bar.label.text().startswith(
        "This conversation was made with Gemma 3 270M Instruct. Going on with "
        "Qwen2.5 0.5B reads"
    )
    assert bar.switch_button.text() == "Switch to Gemma 3 270M Instruct"
    assert bar.keep_button.text() == "Continue with Qwen2.5 0.5B"
