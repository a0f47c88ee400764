# sdb: two commands on a fresh Debian machine.
#   make demo   set everything up, profile the bundled example app, print its top stacks
#   make test   set everything up, run the whole test suite
# Everything is idempotent: a second run only rebuilds what changed.

SHELL := /bin/bash
MAKEFLAGS += --no-builtin-rules
.SUFFIXES:
VENV := .venv
PY := $(VENV)/bin/python
RUBY ?= /usr/bin/ruby
BUILD := build
STAMPS := $(BUILD)/stamps
# the demo's gem, installed as `gem install` would, into a GEM_HOME of the project's own
GEM_HOME_DIR = $(CURDIR)/$(BUILD)/gem-home
SYSTEM_PYTHON := /usr/bin/python3
GEM_SOURCES := $(wildcard gem/ext/sdb/*.c gem/ext/sdb/*.h gem/ext/sdb/*.rb gem/lib/*.rb gem/lib/sdb/*.rb) gem/sdb.gemspec

.PHONY: setup demo test real-check bench clean help
help:
	@echo "make demo    - set up, record the example app, print its top stacks"
	@echo "make test    - set up, run the test suite"
	@echo "make real-check - sdb beside Ruby's own frames and stackprof on rubocop and asciidoctor (also in make test)"
	@echo "make bench   - run the benchmarks (writes benchmarks/results/)"
	@echo "make rubies  - build the Rubies under test (cached in /var/cache/sdb) and install the gem in each"
	@echo "make layouts - regenerate gem/ext/sdb/sdb_layouts.h from the Rubies' source trees, and the sidecar's declarations of sdb_registry.h (scripts/gen-layouts)"

setup: $(STAMPS)/machine $(STAMPS)/venv sampler $(STAMPS)/gem

$(STAMPS)/machine: scripts/setup-machine
	@mkdir -p $(STAMPS)
	scripts/setup-machine
	@touch $@

# The virtualenv uses Debian's python3, whose bcc module (python3-bpfcc) it reaches by path.
$(STAMPS)/venv: pyproject.toml setup.py Makefile $(STAMPS)/machine
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
	$(PY) -m pip install -q --disable-pip-version-check "cython>=3.0" "msgpack>=1.0" "pytest>=7" "pyelftools>=0.29" "protobuf>=4.21" "hypothesis>=6.100" "zstandard>=0.20" "opentelemetry-proto==1.45.2" "pyroscope-io==1.4.0"
	echo /usr/lib/python3/dist-packages > $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-debian-bcc.pth
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . > $(BUILD)/pip-install.log 2>&1 || { cat $(BUILD)/pip-install.log; exit 1; }
	@touch $@

# The Cython sampler, built in place; cythonize and build_ext skip what is up to date. Then the
# sources' bytecode, as a wheel's install writes it (Python reads it even under
# PYTHONDONTWRITEBYTECODE, and recompiles what changed): each command starts ~30 ms sooner.
.PHONY: sampler
sampler: $(STAMPS)/venv
	@$(PY) setup.py -q build_ext --inplace > $(BUILD)/sampler-build.log 2>&1 || { cat $(BUILD)/sampler-build.log; exit 1; }
	@$(PY) -m compileall -q sidecar symbolizer

# The gem, built and installed into a project-local GEM_HOME the way a user's `gem install` would.
$(STAMPS)/gem: $(GEM_SOURCES) Rakefile $(STAMPS)/machine
	@mkdir -p $(STAMPS)
	RUBY=$(RUBY) rake -f Rakefile compile gem install GEM_HOME=$(GEM_HOME_DIR) >/dev/null
	@touch $@

# What the output-format tests open in headless Chromium (/usr/bin/chromium, from setup-machine):
# the speedscope app, and playwright-core to drive the browser; pprof-format, an independent pprof
# decoder. Pinned, from the npm registry.
NPM_PACKAGES := speedscope@1.25.0 playwright-core@1.65.1 pprof-format@2.3.2
$(STAMPS)/npm: Makefile $(STAMPS)/machine
	@mkdir -p $(STAMPS) $(BUILD)/speedscope
	npm install --prefix $(BUILD)/speedscope --no-audit --no-fund --loglevel=error $(NPM_PACKAGES) >/dev/null
	@echo "$(NPM_PACKAGES)" > $@

demo: setup
	$(PY) examples/demo.py --ruby $(RUBY) --gem-home $(GEM_HOME_DIR)

# The Rubies under test: Debian's 3.1, 3.3/3.4 built from Debian's sources and 4.0.5 from its tarball
# (cached in /var/cache/sdb), each with the gem installed as a user installs it. One line each:
# version path.
# Also the configured source tree of Debian's 3.1 (not built) that scripts/gen-layouts reads.
RUBIES_LIST := $(BUILD)/rubies.txt
.PHONY: rubies check-ruby-build-env
rubies: $(STAMPS)/machine check-ruby-build-env
	@mkdir -p $(BUILD)
	scripts/rubies > $(RUBIES_LIST)

# The layout table, from the Rubies' source trees (docs/new-ruby-version.md); the trees are the ones
# `make rubies` leaves in /var/cache/sdb/src. tests/integration/test_layout_rows_generated.py checks it.
.PHONY: layouts
layouts:
	scripts/rubies --sources
	scripts/gen-layouts

# Ruby's build must not inherit this make's environment (MAKEFLAGS has --no-builtin-rules): built here,
# under this make, as scripts/rubies builds a Ruby. CI has the Rubies cached and sees no cold build.
check-ruby-build-env:
	scripts/rubies --check-make-env

# Which tests run on which Ruby (the matrix: benchmarks/RESULTS.md, "make test: which suite on which
# Ruby"). The gem's own tests run on every Ruby. The whole suite runs on the newest tested Ruby; the
# tests marked `every_ruby` (what changes with the Ruby version: names, lines, threads, GC, JIT frames,
# eBPF probes) run on every other Ruby and on the newest again with --yjit (test_yjit.py records
# each Ruby's program with and without YJIT). Tests marked `once` (outputs, commands, the benchmark
# smoke run, the real-program check: nothing Ruby-version-specific) run once, with Debian's Ruby.
# Each suite's wall time is printed ("== ... took N s").
test: setup rubies $(STAMPS)/npm
	@set -e; newest=$$(cut -d' ' -f1 $(RUBIES_LIST) | sort -V | tail -1); \
	suite() { start=$$(date +%s); echo "== suite, Ruby $$1 $$3 ($$2)"; \
	  SDB_RUBY=$$4 SDB_RUBY_ARGS="$$3" SDB_GEM_HOME= $(PY) -m pytest -q -rs -m "$$2" tests </dev/null; \
	  echo "== suite, Ruby $$1 $$3 ($$2) took $$(( $$(date +%s) - start )) s"; }; \
	while read -r version ruby; do \
	  echo "== gem tests, Ruby $$version ($$ruby)"; \
	  RUBY=$$ruby rake -f Rakefile test; \
	  if [ "$$version" = "$$newest" ]; then \
	    suite $$version "not once" "" $$ruby; \
	    if $$ruby --yjit -e 'exit(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? 0 : 1)' 2>/dev/null; then \
	      suite $$version "every_ruby and not once" "--yjit" $$ruby; fi; \
	  else \
	    suite $$version "every_ruby and not once" "" $$ruby; \
	  fi; \
	done < $(RUBIES_LIST)
	@echo "== suite, Ruby-independent tests (once, Debian's Ruby)"
	SDB_RUBY=$(RUBY) SDB_GEM_HOME= $(PY) -m pytest -q -rs -m once tests </dev/null

# The real-program check alone (tests marked real_check, also in `make test`: ~1 min, ~2 on a busy
# machine): sdb beside Ruby's own frames and stackprof on rubocop and asciidoctor
# (tests/integration/test_real_programs.py).
real-check: setup
	SDB_RUBY=$(RUBY) SDB_GEM_HOME= $(PY) -m pytest -q -rs -m real_check tests </dev/null

# All benchmarks (benchmarks/RESULTS.md). BENCH_ARGS narrows it, e.g. the Rails overhead benchmark
# and the CPU microbenchmark only (~18 min):  make bench BENCH_ARGS="--only rails_overhead --only cpu_micro"
BENCH_ARGS ?=
bench: setup
	$(PY) benchmarks/run.py --ruby $(RUBY) --gem-home $(GEM_HOME_DIR) $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) pkg sidecar/sdb_sidecar/sampler/_*.c sidecar/sdb_sidecar/sampler/*.so gem/lib/sdb/sdb_ext.so
