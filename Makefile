# Thin wrapper over CMake for the README commands. Real build logic lives in CMakeLists.txt.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
MODELS_DIR ?= $(HOME)/.cache/quarrel/models
MODEL      ?= $(MODELS_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
PY         := .venv/bin/python
CMAKE_FLAGS ?=

.PHONY: all setup build run test test-unit test-cuda-host test-asan test-py fuzz clean install

all: build

setup:
	bash scripts/setup.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The main job on the default model.
run: build
	./$(BUILD)/quarrel run -m $(MODEL) --chat -p "Write a haiku about the sea." -n 64

# The whole test suite: setup (idempotent), release build (CUDA compiled when nvcc exists),
# unit tests, the ASan/UBSan build with its unit tests, then the Python reference tests.
test: setup
	$(MAKE) build
	$(MAKE) test-unit
	$(MAKE) test-cuda-host
	$(MAKE) test-asan
	$(MAKE) test-py
	@echo "== all test stages passed =="

test-unit:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The CUDA mat-vec block decoders (quant_dev.cuh), the chunked scan (ssm.cu) and the int8 mma expert kernel
# (matmul_mma.cu) on the host against the CPU oracle: needs the CUDA
# headers (the toolkit, no GPU); without them it says it did not run.
CUDA_HOME ?= /usr/local/cuda
test-cuda-host:
	@if [ -f $(CUDA_HOME)/include/cuda_runtime.h ]; then BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) bash tests/cuda/host/run.sh fast; \
	else echo "test-cuda-host: NOT RUN (no $(CUDA_HOME)/include/cuda_runtime.h)"; fi

test-asan:
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DQUARREL_SANITIZE=ON -DQUARREL_CUDA=OFF >/dev/null
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

test-py:
	QUARREL_BIN=$(abspath $(BUILD))/quarrel QUARREL_MODELS_DIR=$(MODELS_DIR) $(PY) -m pytest -q tests/ref
	QUARREL_BIN=$(abspath $(BUILD))/quarrel $(PY) -m pytest -q tests/integration

fuzz:
	bash tests/fuzz/run.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
