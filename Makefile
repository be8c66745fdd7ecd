# Thin wrapper over scripts/setup.sh, CMake and CTest.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: setup venv build run test interop interop-latest bench bench-venv sanitize clean
setup:
	scripts/setup.sh
venv:
	scripts/setup.sh venv
build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $(BUILD) -j $(JOBS)
run: setup
	$(BUILD)/loom train
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
# GPT-2 (configs/tiny.toml) and LLaMA (configs/llama-tiny.toml) trained a few
# steps, exported, loaded by transformers from .venv: logits and greedy
# generations against loom's (tests/checkpoint/hf_interop_test.cpp); LoRA
# adapters both ways with peft (tests/checkpoint/peft_interop_test.cpp).
interop: build venv
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2 LOOM_REQUIRE_HF_INTEROP=1 \
	  $(BUILD)/tests/loom_tests --gtest_filter='HfInterop.*:HfExport*:PeftInterop.*'
# The same interop checks, and HfImport's conversions, against current
# releases: PyTorch 2.x and transformers 5.x from PyPI in .venv-latest (about
# 3 GB with PyTorch's CUDA wheels; made here on first use, never by setup.sh
# or CI). Last run: the pins below, every test passing.
LATEST_PINS = torch==2.7.1 transformers==5.25.0 peft==0.21.2 safetensors==0.8.0 sentencepiece==0.2.3
interop-latest: build
	test -x .venv-latest/bin/python || (/usr/bin/python3 -m venv .venv-latest && \
	  .venv-latest/bin/pip install -q $(LATEST_PINS))
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2 LOOM_REQUIRE_HF_INTEROP=1 \
	  LOOM_HF_PYTHON=$(CURDIR)/.venv-latest/bin/python \
	  $(BUILD)/tests/loom_tests --gtest_filter='HfInterop.*:HfExport*:HfImport.*:PeftInterop.*'
bench: build
	$(BUILD)/loom bench step
# PyTorch 2.x for `loom bench step --torch .venv-latest/bin/python [--torch-compile]`
# (the same environment as interop-latest; never made by setup.sh or CI).
bench-venv:
	test -x .venv-latest/bin/python || (/usr/bin/python3 -m venv .venv-latest && \
	  .venv-latest/bin/pip install -q $(LATEST_PINS))
# AddressSanitizer + UndefinedBehaviorSanitizer build in build-sanitize/, then
# the single-process tests (every test but tests/comm's MPI ones), the
# bad-input fuzz test among them; the first report stops the run.
SANITIZE_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize:
	cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE_FLAGS)" -DCMAKE_C_FLAGS="$(SANITIZE_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
	cmake --build build-sanitize -j $(JOBS) --target loom loom_tests
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2 \
	  build-sanitize/tests/loom_tests $(SANITIZE_TESTS)
clean:
	rm -rf $(BUILD)
