"""Render Arbor's icon (``resources/icons/arbor.svg``) for installers.

- ``write_hicolor(share, app_id)``: PNGs in the freedesktop hicolor sizes and
  the scalable SVG, under ``share/icons/hicolor`` (the Linux bundle).
- ``python packaging/icons.py OUT.ico`` or ``OUT.icns``: one icon file for
  the Windows executable or the macOS app (Qt's image plugins write both).

Qt's own SVG renderer does the drawing, so no other tool is needed: the
packaging virtualenv has PySide6 anyway.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PySide6.QtGui import QImage

SVG = Path(__file__).resolve().parent.parent / "resources" / "icons" / "arbor.svg"
HICOLOR_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)

# The QGuiApplication the renderer needs, made on first use and kept.
_app: Any = None


def render(size: int, svg: Path = SVG) -> QImage:
    """``svg`` drawn on a transparent square image, ``size`` pixels wide."""
    global _app
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    if QGuiApplication.instance() is None:
        _app = QGuiApplication([])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"cannot render {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    return image


def write_hicolor(share: Path, app_id: str, svg: Path = SVG) -> None:
    """The icon as ``share/icons/hicolor/<n>x<n>/apps/<app_id>.png`` and SVG."""
    icons = share / "icons" / "hicolor"
    for size in HICOLOR_SIZES:
        folder = icons / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True, exist_ok=True)
        if not render(size, svg).save(str(folder / f"{app_id}.png")):
            raise SystemExit(f"cannot write the {size}px icon")
    scalable = icons / "scalable" / "apps"
    scalable.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(svg, scalable / f"{app_id}.svg")


def main(argv: list[str]) -> int:
    """Write the icon file named on the command line (.ico, .icns or .png)."""
    if len(argv) != 1:
        print("usage: icons.py OUT.ico|OUT.icns|OUT.png", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    if not render(256).save(str(out)):
        print(f"Qt cannot write {out.suffix} files here", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
