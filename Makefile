# Thin wrapper over scripts/setup.sh, CMake and CTest.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: setup build run test bench clean
setup:
	scripts/setup.sh
build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $(BUILD) -j $(JOBS)
run: setup
	$(BUILD)/loom train
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
bench: build
	$(BUILD)/loom bench step
clean:
	rm -rf $(BUILD)
