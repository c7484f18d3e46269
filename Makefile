# Thin wrapper over CMake: make, make test, make bench, make install.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all configure test bench bench-quick install clean test-real stress fuzz
all: configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: all
	bench/run.sh --full $(BENCH_ARGS)

bench-quick: all
	bench/run.sh --quick

install: all
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

clean:
	rm -rf $(BUILD)

# Real programs under LD_PRELOAD, output compared (tests/real/run.sh).
test-real: all
	bash tests/real/run.sh $(BUILD)/libhakmem.so

# larson and test_stress, STRESS_RUNS (default 20) runs each (tests/stress.sh).
stress: all
	bash tests/stress.sh $(BUILD)

# libFuzzer target with clang for FUZZ_SECONDS (default 60) seconds.
FUZZ_SECONDS ?= 60
fuzz:
	bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(BUILD)/fuzz
