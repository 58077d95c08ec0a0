"""Look and feel: the Fusion style, a light or dark palette that follows the
system, the application stylesheet, and icons tinted with the palette.

The stylesheet refers to palette roles (``palette(base)``, ...) rather than
fixed colours, so the same file serves light and dark palettes.
"""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QByteArray, QObject, QPoint, QRect, QSize, Qt, Slot
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QIcon,
    QIconEngine,
    QPainter,
    QPalette,
    QPixmap,
)
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication

from app.platform.assets import get_asset

ACCENT = QColor("#2f7d4f")  # the green of the app icon
ACCENT_DARK = QColor("#4caf7a")


def is_dark() -> bool:
    """Whether the application's palette has a dark window colour."""
    window = QGuiApplication.palette().color(QPalette.ColorRole.Window)
    return window.lightness() < 128


def light_palette() -> QPalette:
    """Fusion's light palette with Arbor's accent."""
    palette = QApplication.style().standardPalette()
    palette.setColor(QPalette.ColorRole.Window, QColor("#f3f4f6"))
    palette.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
    palette.setColor(QPalette.ColorRole.AlternateBase, QColor("#eef1f4"))
    palette.setColor(QPalette.ColorRole.Highlight, ACCENT)
    palette.setColor(QPalette.ColorRole.Link, ACCENT)
    palette.setColor(QPalette.ColorRole.Accent, ACCENT)
    return palette


def dark_palette() -> QPalette:
    """A dark palette for Fusion."""
    palette = QPalette()
    colors = {
        QPalette.ColorRole.Window: "#1f2125",
        QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#17181b",
        QPalette.ColorRole.AlternateBase: "#26292e",
        QPalette.ColorRole.ToolTipBase: "#2b2e33",
        QPalette.ColorRole.ToolTipText: "#e6e6e6",
        QPalette.ColorRole.PlaceholderText: "#8a8f98",
        QPalette.ColorRole.Text: "#e6e6e6",
        QPalette.ColorRole.Button: "#2b2e33",
        QPalette.ColorRole.ButtonText: "#e6e6e6",
        QPalette.ColorRole.BrightText: "#ff6b6b",
        QPalette.ColorRole.Light: "#3a3d43",
        QPalette.ColorRole.Midlight: "#32353a",
        QPalette.ColorRole.Mid: "#44474d",
        QPalette.ColorRole.Dark: "#121316",
        QPalette.ColorRole.Shadow: "#000000",
        QPalette.ColorRole.Highlight: ACCENT_DARK.name(),
        QPalette.ColorRole.HighlightedText: "#0d0e10",
        QPalette.ColorRole.Link: ACCENT_DARK.name(),
        QPalette.ColorRole.Accent: ACCENT_DARK.name(),
    }
    for role, color in colors.items():
        palette.setColor(role, QColor(color))
    for role in (
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
        QPalette.ColorRole.WindowText,
    ):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6d7178"))
    return palette


class ThemeManager(QObject):
    """Applies the style, palette and stylesheet, and follows system changes.

    Parameters
    ----------
    app
        The application to style.
    scheme
        Force a colour scheme; ``Unknown`` follows the system.
    """

    def __init__(
        self, app: QApplication, scheme: Qt.ColorScheme = Qt.ColorScheme.Unknown
    ) -> None:
        super().__init__(app)
        self._app = app
        self._forced = scheme
        app.setStyle("Fusion")
        app.styleHints().colorSchemeChanged.connect(
            self._on_style_hints_color_scheme_changed
        )
        self.apply()

    def apply(self) -> None:
        """Set the palette for the current (or forced) scheme and the stylesheet."""
        scheme = self._forced
        if scheme == Qt.ColorScheme.Unknown:
            scheme = self._app.styleHints().colorScheme()
        palette = dark_palette() if scheme == Qt.ColorScheme.Dark else light_palette()
        self._app.setPalette(palette)
        self._app.setStyleSheet(
            get_asset("styles/arbor.qss").read_text(encoding="utf-8")
        )

    @Slot(Qt.ColorScheme)
    def _on_style_hints_color_scheme_changed(self, _scheme: Qt.ColorScheme) -> None:
        self.apply()


@cache
def _svg_source(name: str) -> str:
    return get_asset(f"icons/{name}.svg").read_text(encoding="utf-8")


# Icons drawn, by (name, width, height, colour): buttons repaint often (every
# frame while a reply streams past them), and drawing an SVG each time cost the
# GUI thread about half a millisecond per button and paint.
_PIXMAPS: dict[tuple[str, int, int, int], QPixmap] = {}
PIXMAP_CACHE_SIZE = 256


class _TintedSvgEngine(QIconEngine):
    """Renders a monochrome SVG in the palette's text colour at paint time,
    so icons follow light/dark switches without being recreated (each size
    and colour is drawn once)."""

    def __init__(self, name: str, role: QPalette.ColorRole) -> None:
        super().__init__()
        self._name = name
        self._role = role

    def _color(self, mode: QIcon.Mode) -> QColor:
        palette = QGuiApplication.palette()
        if mode == QIcon.Mode.Disabled:
            return palette.color(
                QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText
            )
        return palette.color(self._role)

    def paint(
        self, painter: QPainter, rect: QRect, mode: QIcon.Mode, state: QIcon.State
    ) -> None:
        source = _svg_source(self._name).replace(
            "currentColor", self._color(mode).name()
        )
        QSvgRenderer(QByteArray(source.encode())).render(painter, rect)

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        key = (self._name, size.width(), size.height(), self._color(mode).rgba())
        pixmap = _PIXMAPS.get(key)
        if pixmap is None:
            pixmap = QPixmap(size)
            pixmap.fill(Qt.GlobalColor.transparent)
            painter = QPainter(pixmap)
            self.paint(painter, QRect(QPoint(0, 0), size), mode, state)
            painter.end()
            if len(_PIXMAPS) >= PIXMAP_CACHE_SIZE:
                _PIXMAPS.clear()  # a palette switch or many sizes: start over
            _PIXMAPS[key] = pixmap
        return pixmap

    def clone(self) -> QIconEngine:
        return _TintedSvgEngine(self._name, self._role)


def icon(name: str, role: QPalette.ColorRole = QPalette.ColorRole.WindowText) -> QIcon:
    """The icon ``resources/icons/NAME.svg`` drawn in the palette colour ``role``."""
    return QIcon(_TintedSvgEngine(name, role))


def app_icon() -> QIcon:
    """Arbor's own (coloured) icon."""
    return QIcon(str(get_asset("icons/arbor.svg")))
