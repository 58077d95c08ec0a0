#!/usr/bin/env bash
# Build the llama-cpp-python wheel Arbor runs on, from its source distribution,
# with our patches to the vendored llama.cpp (packaging/llama/README.md).
#   build_wheel.sh SDIST WHEEL_DIR PIP   (CMake flags in $CMAKE_ARGS)
set -euo pipefail
sdist=$1 wheel_dir=$2 pip=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$sdist" -C "$work"
src=$(echo "$work"/llama_cpp_python-*)
for patch_file in "$here"/*.patch; do
    patch -d "$src/vendor/llama.cpp" -p1 -s < "$patch_file"
done
"$pip" wheel --no-deps --no-cache-dir -w "$wheel_dir" "$src"
