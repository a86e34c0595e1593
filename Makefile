# Convenience front end over CMake. The two README commands are `make demo` and `make test`.
# `make demo` runs on a real Apache Kafka 3.9.2 cluster (Java 17 and Maven: deploy/install-deps.sh);
# `make demo-embedded` is the synthetic one (no Java); `make demo-kafka21062` replays KAFKA-21062.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
# Warnings are errors where the project controls the compiler (`make test`, .ci/run); a user's or
# packager's `make`/`make demo`/`make package` with another compiler still gets its binary.
WERROR     ?= OFF
test test-plain test-asan roundtrip-corpus: WERROR = ON

.PHONY: all deps test-deps build demo demo-embedded demo-kafka21062 test test-plain test-asan roundtrip-corpus bench fuzz docs package clean

all: build

# deps: what `make`, `make package` and `make demo` need; test-deps: the test toolchain on top (README)
deps:
	bash deploy/install-deps.sh

test-deps:
	bash deploy/install-test-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKM_WERROR=$(WERROR) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The real cluster (tests/realcluster/demo.py, docs/commands.md "The demo"): ZooKeeper, 3 ZK-mode brokers and a
# KRaft controller in migration from Kafka's jars (Maven Central, cached), kmproxy deployed beside the controller.
demo: build
	python3 tests/realcluster/demo.py --kmproxy $(BUILD)/kmproxy

# The embedded synthetic cluster (simulated brokers, a test KRaft leader): no Java needed.
demo-embedded: build
	$(BUILD)/kmproxy demo --quorum

# KAFKA-21062 replayed without and with kmproxy (docs/kafka21062.md): acknowledged and lost records of each.
demo-kafka21062: build
	python3 tests/realcluster/demo.py --kafka21062 --tests-dir $(BUILD)/tests

test-plain: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: test-deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKM_SANITIZE=ON -DKM_WERROR=$(WERROR) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

test: test-plain test-asan

# Every corpus file whose log carries a migration state through its own fresh real KRaft controller
# (docs/realcluster.md "Round trip"): one line per file (equal / DIFFERENCES / FAILED, its counts), the totals, and
# a non-zero exit on any difference or file it could not run. Needs ../shared (KM_SHARED_DIR), Java 17 and Maven.
roundtrip-corpus: test-deps build
	cmake --build $(BUILD) -j $(JOBS) --target test_roundtrip_controller
	KM_ROUNDTRIP_CORPUS=all KM_REQUIRE_REALKAFKA=1 $(BUILD)/tests/test_roundtrip_controller --jobs 1 \
	  --filter 'roundtrip_controller/every_corpus_image_with_a_migration_state'

# Regenerates docs/configuration.md (from the key registry), docs/commands.md (from every command's
# --help, its hand-written part kept) and docs/metrics.md (from what a running daemon and proxy export);
# the test_docs_* tests fail while the committed files are stale.
docs: test-deps build
	$(BUILD)/kmproxy config docs > docs/configuration.md.new && mv docs/configuration.md.new docs/configuration.md
	python3 tests/docs/commands_md.py $(BUILD)/kmproxy docs/commands.md > docs/commands.md.new && mv docs/commands.md.new docs/commands.md
	cmake --build $(BUILD) -j $(JOBS) --target test_docs_metrics
	rm -f $(BUILD)/generated-docs/metrics.md
	$(BUILD)/tests/test_docs_metrics --filter 'docs_metrics/metrics_md*' >/dev/null 2>&1 || true
	@test -s $(BUILD)/generated-docs/metrics.md || { echo "make docs: no metrics scrape: run $(BUILD)/tests/test_docs_metrics to see why"; exit 1; }
	cp $(BUILD)/generated-docs/metrics.md docs/metrics.md

bench: test-deps build
	cmake --build $(BUILD) -j $(JOBS) --target benches
	$(BUILD)/bench/run-benches

# The Debian package (CPack): build/kmproxy_<version>_<arch>.deb
package: build
	cmake --build $(BUILD) -j $(JOBS) --target package

# Each libFuzzer target for FUZZ_SECONDS, seeded from ../shared/corpus when it is there.
FUZZ_SECONDS ?= 60
fuzz: test-deps
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DKM_FUZZ=ON -DKM_SANITIZE=ON >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzz_codec fuzz_metalog
	mkdir -p build-fuzz/corpus-codec build-fuzz/corpus-metalog
	build-fuzz/fuzz/fuzz_codec -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus-codec
	build-fuzz/fuzz/fuzz_metalog -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus-metalog \
	  $(wildcard ../shared/corpus/kraft-log) $(wildcard ../shared/corpus/kraft-snapshot)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz build-ci-*
