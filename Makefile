# eldr: `make demo` and `make test` work on a fresh Debian 12 machine; each
# installs whatever Debian packages are missing first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
ELDR := $(BUILD)/tools/eldr

.PHONY: all deps configure build test demo bench sim-table clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	$(ELDR) demo --out-dir $(BUILD)/demo

bench: build
	$(ELDR) bench route --layers 48 --experts 128 --workers 16 --json
	$(ELDR) bench fit --requests 1000 --layers 48 --experts 128 --workers 16 --json
	$(BUILD)/tools/eldr_benchmarks --benchmark_min_time=0.2

# The README's paper-shaped table (simulated; about two minutes here).
sim-table: build
	/usr/bin/python3 tools/sim_paper_table.py $(ELDR) 200 20000

clean:
	rm -rf $(BUILD)
