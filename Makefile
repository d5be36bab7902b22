# attnd - one Makefile for the engine (lib/), the daemon (server/), tests and benchmarks.
#
#   make            build build/attnd (installs missing Debian packages first)
#   make run        build, then serve a demo layer on 127.0.0.1:8080 (ATTND_* variables honoured)
#   make test       build and run every test; ends with "N passed, N failed"
#   make asan       the whole suite under AddressSanitizer + UBSan (in build-asan/)
#   make tsan       the whole suite under ThreadSanitizer (in build-tsan/; the pool, workers, deadlines)
#   make bench      attnd against the FMA peak, OpenBLAS, torch and ONNX Runtime, then the HTTP
#                   benchmarks (bench/; installs the peers when missing); never part of the tests
#   make bench-long the same for L = S = 1024 ... 16384 (N=1, E=1024, H=16): engine and fused ORT
#   make fuzz       build the libFuzzer harnesses in build-fuzz/ (clang; fuzz/run.sh NAME SECONDS runs one)
#   make fuzz-check every harness on its committed corpus, then a short run each (CI; fuzz/check.sh)
#   make soak       SOAK_MINUTES (10) of mixed load on one daemon: errors, latency, RSS each minute
#   make golden     regenerate tests/golden/ and tests/golden_select/ from torch (needs /usr/bin/python3 with torch)
#   make test-ui    the viewer (/ui) in headless Chromium (tests/ui/run_browser.sh; installs chromium, playwright-core)
#   make test-examples   examples/client.py, client.mjs and openapi_check.py against a daemon (installs python3-numpy,
#                        python3-requests, python3-yaml, nodejs when missing)
#   make test-container  build the Docker image with podman and check it (root; scripts/test_container.sh)
#   make test-scale      three replicas + nginx on loopback, --watch, a replica killed (scripts/test_scale.sh)
#   make bench-scale     wrk: one replica vs three behind nginx (scripts/bench_scale.sh)
#   make install    copy build/attnd to $(PREFIX)/bin (PREFIX=/usr/local; DESTDIR honoured), so that
#                   `attnd ...` and `attnd import ...` run from anywhere; make uninstall removes it
#   make clean
#
# Sources are found by wildcard: lib/*.c -> libmha.a, server/*/*.c (but cmd/main.c) -> libsrv.a,
# tests/*/test_*.c -> one executable each (tests/support/*.c linked into every one), and
# tests/*/test_*.sh run as they are. The folders are layers (docs/design.md, "Project layout"):
# scripts/check_layers.sh, run by make test (tests/repo/test_layers.sh), keeps them so.
# BUILD=dir puts every object elsewhere (make asan uses build-asan).

BUILD    ?= build
CC       ?= gcc
OPT      ?= -O2
SAN      ?=
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror=implicit-function-declaration \
            -pthread -MMD -MP \
            -Ilib -Iserver -Itests/support
ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SAN)
endif
LIBS      = -lmicrohttpd -ljansson -lopenblas -lm -lpthread
# The engine's JIT GEMM kernels come from libxsmm's code generator (lib/mha_jit.c; Debian ships it as
# a static library only, for amd64). XSMM=0 builds without it: the hand-written kernels run instead.
# Unset, XSMM is 1 on x86-64 when libxsmm-dev is installed or the deps step can install it (root),
# else 0 (the deps step says so).
ifeq ($(origin XSMM),undefined)
XSMM_AUTO := 1
ifneq ($(filter x86_64-%,$(shell $(CC) -dumpmachine 2>/dev/null)),)
XSMM     := $(if $(wildcard /usr/include/libxsmm_generator.h),1,$(if $(filter 0,$(shell id -u)),1,0))
else
XSMM     := 0
endif
endif
ifeq ($(XSMM),1)
CFLAGS   += -DATTND_HAVE_LIBXSMM
LIBS     += -lxsmmgen -ldl
endif
TEST_LIBS = -lcurl

VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CFLAGS   += -DATTND_VERSION='"$(VERSION)"' -DATTND_GIT_REV='"$(GIT_REV)"'
# The files that print the version or the commit depend on a stamp rewritten when either changes,
# so that --version and /metrics' attnd_build_info name the commit built (an object left from an
# older build kept its commit, and the two could name different ones).
VERSION_STAMP := $(BUILD)/version.stamp
$(shell mkdir -p $(BUILD) && { printf '%s %s\n' '$(VERSION)' '$(GIT_REV)' | cmp -s - $(VERSION_STAMP) || \
    printf '%s %s\n' '$(VERSION)' '$(GIT_REV)' > $(VERSION_STAMP); })

LIB_SRC   := $(wildcard lib/*.c)
SRV_SRC   := $(filter-out server/cmd/main.c,$(wildcard server/*/*.c))
SUP_SRC   := $(wildcard tests/support/*.c)
TEST_SRC  := $(wildcard tests/*/test_*.c)
TEST_SH   := $(wildcard tests/*/test_*.sh)
BENCH_SRC := $(wildcard bench/*.c)

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
SRV_OBJ   := $(SRV_SRC:%.c=$(BUILD)/%.o)
SUP_OBJ   := $(SUP_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# Debian packages the build and tests need; `make` installs the missing ones (as root).
DEB_PKGS  := gcc make libmicrohttpd-dev libjansson-dev libopenblas-dev libcurl4-openssl-dev curl
ifeq ($(XSMM),1)
DEB_PKGS  += libxsmm-dev
endif
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all deps run install uninstall test asan ubsan tsan bench bench-long golden clean format fuzz fuzz-bins fuzz-check soak test-ui test-examples test-container test-scale bench-scale
all: $(BUILD)/attnd

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@missing=""; for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing missing Debian packages:$$missing"; \
	    if [ "$$(id -u)" != 0 ]; then echo "run as root, or: sudo apt-get install$$missing" >&2; exit 1; fi; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing || exit 1; \
	fi
	@if [ "$(XSMM)" != 1 ] && [ -n "$(XSMM_AUTO)" ]; then \
	    echo "note: building without libxsmm's code generator (libxsmm-dev is for x86-64, as root:" \
	         "apt-get install libxsmm-dev): the engine's hand-written kernels run instead"; \
	fi
	@mkdir -p $(@D) && touch $@

# Commands are shown as "CC file" (V=1 shows them whole).
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @echo "  $(1) $(2)"
endif

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(patsubst %.c,$(BUILD)/%.o,$(shell grep -l 'ATTND_VERSION\|ATTND_GIT_REV' server/*/*.c tests/*/*.c)): \
    $(VERSION_STAMP)

# /openapi.yaml is served from a copy built into the binary (server/api/openapi_embed.c uses .incbin)
$(BUILD)/server/api/openapi_embed.o: openapi.yaml
# and so are the viewer's files under /ui (server/api/ui_assets.c)
$(BUILD)/server/api/ui_assets.o: $(wildcard web/*.html web/*.js web/*.css)

$(BUILD)/libmha.a: $(LIB_OBJ)
	@rm -f $@ && ar rcs $@ $^
$(BUILD)/libsrv.a: $(SRV_OBJ)
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/attnd: $(BUILD)/server/cmd/main.o $(BUILD)/libsrv.a $(BUILD)/libmha.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(SUP_OBJ) $(BUILD)/libsrv.a $(BUILD)/libmha.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS) $(TEST_LIBS)

# Test seam: test_app_errors makes start-up steps fail by standing in for the functions they call.
$(BUILD)/tests/app/test_app_errors: LDFLAGS += -Wl,--wrap=srv_registry_create -Wl,--wrap=mha_pool_create

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libsrv.a $(BUILD)/libmha.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS) $(TEST_LIBS)

# libFuzzer harnesses: fuzz/build.sh builds them with BUILD=build-fuzz CC=clang FUZZ=1 (every object
# instrumented for coverage; each harness linked with libFuzzer's main)
FUZZ_BIN := $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard fuzz/fuzz_*.c))
ifneq ($(FUZZ),)
# ... and bodies of 16 KiB already go to a worker and the base64 predecoder (64 KiB and 1 MiB in
# the daemon), so that fuzz_http reaches both with inputs that cost a millisecond, not a hundred
CFLAGS   += -fsanitize=fuzzer-no-link -DSRV_OFFLOAD_MIN_BODY=16384 -DSRV_PREDECODE_MIN_BODY=16384
endif
$(BUILD)/fuzz/%: $(BUILD)/fuzz/%.o $(BUILD)/libsrv.a $(BUILD)/libmha.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LIBS)
fuzz-bins: $(FUZZ_BIN)
# fuzz_datadir_tree changes files while the data dir code reads them: its read() and fstatat() calls
# pass through the harness
$(BUILD)/fuzz/fuzz_datadir_tree: LDFLAGS += -Wl,--wrap=read,--wrap=fstatat

# bench_engine times the attention core by wrapping the pool's parallel-for (see its header)
$(BUILD)/bench/bench_engine: LDFLAGS += -Wl,--wrap=mha_pool_run,--wrap=mha_pool_run_limit

run: $(BUILD)/attnd
	./$(BUILD)/attnd --demo

PREFIX ?= /usr/local
install: $(BUILD)/attnd
	install -D -m 0755 $(BUILD)/attnd $(DESTDIR)$(PREFIX)/bin/attnd

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/attnd

test: $(BUILD)/attnd $(TEST_BIN)
	@BUILD=$(BUILD) tests/run_tests.sh $(TEST_BIN) $(TEST_SH)

asan:
	$(MAKE) BUILD=build-asan SAN=address,undefined OPT=-O1 test

ubsan:
	$(MAKE) BUILD=build-ubsan SAN=undefined test

tsan:
	$(MAKE) BUILD=build-tsan SAN=thread OPT=-O1 test

bench: $(BUILD)/attnd $(BENCH_BIN)
	@BUILD=$(BUILD) scripts/bench_deps.sh
	@BUILD=$(BUILD) bench/run.sh

bench-long: $(BUILD)/bench/bench_engine $(BUILD)/bench/fma_peak
	@BUILD=$(BUILD) scripts/bench_deps.sh
	@BUILD=$(BUILD) python3 bench/compare.py --long $(LONG_ARGS)

# the viewer in headless Chromium (installs chromium, nodejs and playwright-core when missing)
test-ui: $(BUILD)/attnd
	@BUILD=$(BUILD) tests/ui/run_browser.sh

test-examples: $(BUILD)/attnd
	@BUILD=$(BUILD) examples/run.sh

test-container:
	bash scripts/test_container.sh

test-scale: $(BUILD)/attnd
	ATTND_BIN=$(BUILD)/attnd bash scripts/test_scale.sh

bench-scale: $(BUILD)/attnd
	ATTND_BIN=$(BUILD)/attnd bash scripts/bench_scale.sh

fuzz:
	fuzz/build.sh

fuzz-check:
	fuzz/check.sh

soak: $(BUILD)/attnd
	python3 scripts/soak.py --attnd $(BUILD)/attnd --dir $(BUILD)/soak

golden:
	/usr/bin/python3 tests/torch/gen_golden.py
	/usr/bin/python3 tests/torch/gen_half.py
	/usr/bin/python3 tests/torch/gen_select_golden.py

format:
	clang-format -i lib/*.[ch] server/*/*.[ch] tests/*/*.[ch] bench/*.c

clean:
	rm -rf build build-asan build-ubsan build-tsan build-fuzz

.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
