# eldr: `make demo` and `make test` work on a fresh Debian 12 machine; each
# first installs what is missing (scripts/install-deps.sh: Debian packages,
# then the project's venv, CUDA, Go and Rust tools from their registries into
# $(DEPS_DIR)). The builds after that are offline.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 20
FUZZ_SEED ?= 1
FUZZ_TARGETS ?= npy table json ring capi decode pool
SOAK_SECONDS ?= 120
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
ELDR := $(BUILD)/tools/eldr
# Everything installed from the language registries: scripts/install-deps.sh.
DEPS_DIR ?= $(or $(ELDR_DEPS_DIR),$(CURDIR)/.deps)
export ELDR_DEPS_DIR := $(DEPS_DIR)
# The project's Python: the venv with NumPy, pytest, pybind11 and matplotlib from PyPI.
PYTHON ?= $(DEPS_DIR)/venv/bin/python
WHEEL_DIR ?= $(BUILD)/wheels
# Go and cargo where their installers put them, also when PATH lacks them.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/.cargo/bin

.PHONY: all deps configure build wheel test test-full test-soak test-unit asan-configure test-asan test-tsan test-fuzz lint demo bench bench-epp bench-pool bench-cluster sim-table sim-matrix sim-routers clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The Python package as a manylinux wheel in $(WHEEL_DIR), for engine hosts
# without a compiler: for $(PYTHON) (PYTHON=/path/to/venv/bin/python picks
# another CPython), over this build's libeldr, with the libraries it needs
# (auditwheel repair). The build backend comes from the wheelhouse, else PyPI.
wheel: configure
	cmake --build $(BUILD) -j $(JOBS) --target eldr_capi
	rm -rf $(WHEEL_DIR)/linux
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PYTHON) -m pip wheel -q --no-deps \
	  --find-links $(DEPS_DIR)/wheelhouse -w $(WHEEL_DIR)/linux ./bindings/python \
	  --config-settings=build-dir=$(BUILD)/wheel-build --config-settings=cmake.define.ELDR_LIBRARY=$(abspath $(BUILD))/lib/libeldr.so
	PATH=$(DEPS_DIR)/venv/bin:$$PATH auditwheel repair -w $(WHEEL_DIR) $(WHEEL_DIR)/linux/eldr-*.whl

# Every suite: the tests under ASan+UBSan and under TSan, each fuzzer for
# FUZZ_SECONDS from its seed corpus (fixed FUZZ_SEED: CI runs repeat; vary it
# locally to explore), then the normal build's tests (last, so
# that a run ends on ctest's summary line).
test: test-asan test-tsan test-fuzz test-unit

# make test plus the soak test (minutes of SIGKILLs, reloads and worker churn
# against one eldrd).
test-full: test test-soak

test-soak: build
	$(BUILD)/tests/soak/eldr_soak --eldrd $(BUILD)/sidecar/eldrd --duration $(SOAK_SECONDS)

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Sanitizer and fuzz builds at -O1: a third of the -O3 compile time on CI's 2 cores.
SAN_FLAGS := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
	-DELDR_BUILD_TOOLS=OFF -DELDR_BUILD_BENCH=OFF -DELDR_BUILD_BINDINGS=OFF -DELDR_BUILD_EXAMPLES=OFF \
	-DELDR_ENABLE_CUDA=OFF

# ASan+UBSan and the fuzzers share one clang build: the tests run fine with
# the fuzzers' coverage instrumentation, and CI's 2 cores compile once, not twice.
ASAN_FLAGS := $(SAN_FLAGS) -DELDR_SANITIZE=address,undefined -DELDR_FUZZ=ON
asan-configure: deps
	@test -f $(ASAN_BUILD)/CMakeCache.txt || CC=clang CXX=clang++ cmake -S . -B $(ASAN_BUILD) $(ASAN_FLAGS)

test-asan: asan-configure
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

test-tsan: deps
	@test -f $(TSAN_BUILD)/CMakeCache.txt || cmake -S . -B $(TSAN_BUILD) $(SAN_FLAGS) -DELDR_SANITIZE=thread
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS)

test-fuzz: asan-configure
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS:%=%_fuzz)
	@for f in $(FUZZ_TARGETS); do \
	  mkdir -p $(ASAN_BUILD)/corpus/$$f $(ASAN_BUILD)/artifacts; \
	  echo "fuzz $$f: $(FUZZ_SECONDS) s"; \
	  $(ASAN_BUILD)/tests/fuzz/$${f}_fuzz -max_total_time=$(FUZZ_SECONDS) -seed=$(FUZZ_SEED) -print_final_stats=1 \
	    -artifact_prefix=$(ASAN_BUILD)/artifacts/ $(ASAN_BUILD)/corpus/$$f tests/fuzz/corpus/$$f \
	    2> $(ASAN_BUILD)/$$f.log || { tail -40 $(ASAN_BUILD)/$$f.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|Done" $(ASAN_BUILD)/$$f.log; \
	done

# Lint, no build needed: clang-format on the C/C++/CUDA files changed since
# LINT_BASE (default: all tracked files); go vet and staticcheck on each Go
# module; cargo fmt, clippy -D warnings and doc -D warnings on each Cargo
# workspace. CI runs it on every change.
LINT_BASE ?=
GO_MODULES := bindings/go examples/go-gateway epp
CARGO_MANIFESTS := bindings/rust/Cargo.toml examples/rust-engine/Cargo.toml tests/package/rust_consumer/Cargo.toml
lint: deps
	@files=$$(if [ -n "$(LINT_BASE)" ]; then git diff --name-only --diff-filter=ACMR $(LINT_BASE); \
	  else git ls-files; fi | grep -E '\.(c|cc|cpp|h|hpp|cu|cuh)$$' || true); \
	if [ -n "$$files" ]; then clang-format --dry-run -Werror $$files && echo "lint: $$(echo $$files | wc -w) files clean"; \
	else echo "lint: no C/C++ files changed"; fi
	@for m in $(GO_MODULES); do \
	  (cd $$m && GOFLAGS=-mod=readonly GOPROXY=off go vet ./... && \
	   GOFLAGS=-mod=readonly GOPROXY=off $(DEPS_DIR)/bin/staticcheck ./...) || exit 1; \
	  echo "lint: go vet and staticcheck clean in $$m"; \
	done
	@for m in $(CARGO_MANIFESTS); do \
	  export ELDR_LIB_DIR=$(abspath $(BUILD))/lib CARGO_TARGET_DIR=$(abspath $(BUILD))/cargo-lint; \
	  cargo fmt --all --check --manifest-path $$m && \
	  cargo clippy -q --offline --locked --workspace --all-targets --manifest-path $$m -- -D warnings && \
	  RUSTDOCFLAGS="-D warnings" cargo doc -q --offline --locked --workspace --no-deps --manifest-path $$m \
	  || exit 1; \
	  echo "lint: cargo fmt, clippy and doc clean in $$(dirname $$m)"; \
	done

# The main job three ways: embedded (fit, then every policy), the sidecar
# (eldrd + an engine through shared memory), and the whole serving chain
# (eldrd + Python engines + Go gateway + load).
demo: build
	$(ELDR) demo --out-dir $(BUILD)/demo
	scripts/demo-sidecar.sh $(BUILD)
	$(PYTHON) scripts/demo_chain.py $(BUILD)
	@if [ -x $(BUILD)/epp/eldr-epp ]; then $(BUILD)/epp/eldr-epp demo; fi

bench: build
	$(ELDR) bench route --layers 48 --experts 128 --workers 16 --json
	$(ELDR) bench fit --requests 1000 --layers 48 --experts 128 --workers 16 --json
	$(ELDR) bench decode --json
	$(BUILD)/tools/eldr_benchmarks --benchmark_min_time=0.2
	@inst=bench-$$$$; $(BUILD)/sidecar/eldrd --instance $$inst 2>/dev/null & pid=$$!; \
	  for i in $$(seq 100); do $(ELDR) status --instance $$inst >/dev/null 2>&1 && break; sleep 0.1; done; \
	  $(ELDR) bench ring --instance $$inst --requests 20000 --json && \
	  $(ELDR) bench ring-throughput --instance $$inst --seconds 10 --json; rc=$$?; kill $$pid; wait $$pid; exit $$rc
	PYTHONPATH=$(BUILD)/python $(PYTHON) bindings/python/bench_route.py

# eldr-epp's pick latency, eldr beside least-loaded in one run (docs/benchmarks.md).
bench-epp: build
	$(BUILD)/epp/eldr-epp bench --requests 20000 --streams 256 --tokens 2000

# The README's paper-shaped table (simulated; about two minutes here).
sim-table: build
	$(PYTHON) tools/sim_paper_table.py $(ELDR) 200 20000

# The simulator matrix (issue 16): every policy x presets/workloads/the dev
# trace x utilization x expert share, pools, model error, drift; 3 seeds,
# 2 processes. Writes docs/sim_matrix.md, docs/sim_matrix.json and
# docs/sim_matrix_{p50,p99}.png (under 20 minutes on 2 cores). Without
# ../shared/data the trace rows are skipped.
sim-matrix: configure
	cmake --build $(BUILD) -j $(JOBS) --target eldr_cli
	$(PYTHON) tools/sim_matrix.py $(ELDR) --out-dir docs --jobs 2

# Multi-node mode on loopback: a booking at one node counted at another, and NATS
# stopped for 10 s under load (scripts/bench-pool.py; needs nats-server).
bench-pool: build
	$(PYTHON) scripts/bench-pool.py --build $(BUILD)

# A pool of 2, 4, 8 and 16 eldrd nodes on loopback, on one NATS server and on a
# cluster of three: per node, messages, bytes and CPU per routed request and
# booking visibility; then a NATS server and a node killed under load
# (scripts/bench-cluster.py; needs nats-server; about 4 minutes here).
bench-cluster: build
	$(PYTHON) scripts/bench-cluster.py --build $(BUILD)

# Several routers sharing the pool with stale views (issue 18): every policy
# x 2 workloads x utilization 50/75 % x 1/2/4/8 routers x 0/10/50/200 ms.
# Writes docs/sim_routers.{md,json} (about 2 minutes here).
sim-routers: configure
	cmake --build $(BUILD) -j $(JOBS) --target eldr_cli
	$(PYTHON) tools/sim_routers.py $(ELDR) docs/sim_routers 10000 2

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
