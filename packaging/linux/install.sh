#!/bin/sh
# Install Arbor for the current user, or remove it again.
#
#   ./install.sh              install (or update) from this unpacked folder
#   ./install.sh --uninstall  remove exactly what an install put in place
#
# Where (PREFIX defaults to ~/.local; set it to install elsewhere):
#   $PREFIX/opt/arbor/                          the bundle (a copy of this folder)
#   $PREFIX/bin/arbor                           symlink to the launcher
#   $PREFIX/share/applications/APP_ID.desktop   menu entry (Exec= the launcher)
#   $PREFIX/share/icons/hicolor/*/apps/APP_ID.{png,svg}
#   $PREFIX/share/metainfo/APP_ID.metainfo.xml  for software centres
# Both directions can be repeated. Conversations (~/.local/share/Arbor) are
# user data and never touched.
set -eu

APP_ID=io.github.arbor.Arbor
PREFIX=${PREFIX:-$HOME/.local}
TARGET=$PREFIX/opt/arbor
BIN=$PREFIX/bin/arbor
SHARE=$PREFIX/share
DESKTOP=$SHARE/applications/$APP_ID.desktop
METAINFO=$SHARE/metainfo/$APP_ID.metainfo.xml
ICONS=$SHARE/icons/hicolor

refresh_caches() {
    # Menus and icon themes pick up changes without these, only later.
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q "$SHARE/applications" 2>/dev/null || true
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$ICONS/index.theme" ]; then
        gtk-update-icon-cache -q -t "$ICONS" 2>/dev/null || true
    fi
}

uninstall() {
    # The symlink only if it is ours: another `arbor` on the PATH stays.
    if [ -L "$BIN" ] && [ "$(readlink "$BIN")" = "$TARGET/arbor" ]; then
        rm -f "$BIN"
    fi
    rm -f "$DESKTOP" "$METAINFO"
    for icon in "$ICONS"/*/apps/"$APP_ID".png "$ICONS"/scalable/apps/"$APP_ID".svg; do
        if [ -e "$icon" ]; then rm -f "$icon"; fi
    done
    rm -rf "$TARGET"
    refresh_caches
    echo "Arbor removed from $PREFIX (conversations in ~/.local/share/Arbor are kept)."
}

install() {
    source=$(dirname "$(readlink -f "$0")")
    if [ ! -x "$source/Arbor/Arbor" ] || [ ! -d "$source/share" ]; then
        echo "install.sh: run it from the unpacked Arbor folder" >&2
        exit 1
    fi
    if [ "$source" = "$(readlink -f "$TARGET" 2>/dev/null || true)" ]; then
        echo "install.sh: already installed here; to update, run the new one" >&2
        exit 1
    fi
    # Copy beside the old install, then swap: an interrupted copy leaves the
    # working install in place.
    mkdir -p "$PREFIX/opt"
    rm -rf "$TARGET.new"
    cp -a "$source" "$TARGET.new"
    rm -rf "$TARGET"
    mv "$TARGET.new" "$TARGET"

    mkdir -p "$(dirname "$BIN")"
    ln -sfn "$TARGET/arbor" "$BIN"

    mkdir -p "$(dirname "$DESKTOP")" "$(dirname "$METAINFO")"
    # The menu runs the launcher by its full path: ~/.local/bin is not on
    # every desktop session's PATH. Quoted, for a HOME with spaces.
    sed -e "s|^Exec=arbor\$|Exec=\"$TARGET/arbor\"|" \
        -e "s|^TryExec=arbor\$|TryExec=$TARGET/arbor|" \
        "$source/share/applications/$APP_ID.desktop" > "$DESKTOP"
    cp "$source/share/metainfo/$APP_ID.metainfo.xml" "$METAINFO"
    (cd "$source/share/icons/hicolor" && find . -name "$APP_ID.*" -type f) |
        while read -r icon; do
            mkdir -p "$ICONS/$(dirname "$icon")"
            cp "$source/share/icons/hicolor/$icon" "$ICONS/$icon"
        done
    refresh_caches
    echo "Arbor $(cat "$TARGET/VERSION") installed in $TARGET."
    case ":$PATH:" in
        *":$(dirname "$BIN"):"*) ;;
        *) echo "Note: $(dirname "$BIN") is not on your PATH; the menu entry works anyway." ;;
    esac
}

case "${1:-}" in
    "") install ;;
    --uninstall) uninstall ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) echo "usage: install.sh [--uninstall]" >&2; exit 2 ;;
esac
