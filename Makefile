# Everything starts from nothing: each target creates .venv when it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   ?= fixtures/caches
# Where the CPU build of torch comes from. This project's machines carry it locally (pip finds
# it); elsewhere run `make TORCH_INDEX=https://download.pytorch.org/whl/cpu test`.
TORCH_INDEX ?=
TORCH_FLAGS := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple,)

.PHONY: all install demo test bench fixtures clean dist install-check

all: test

$(STAMP): pyproject.toml constraints-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing cachedoctor and its pinned development set into $(VENV) ..."
	@# torch first and alone, pinned to the CPU build: an unpinned torch pulls GBs of CUDA wheels.
	@# Then the package with its [repair] extra (torch, the encoder libraries), which users opt into.
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_FLAGS) -c constraints-dev.txt torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -c constraints-dev.txt -e '.[repair,test,lint]'
	@touch $(STAMP)

install: $(STAMP)

# The main job on the shipped fixtures: a deep scan of the caches, a SimpleTuner cache compared
# with its dataset through its multidatabackend.json, and a repair of a copy of the caches (exit 1
# is expected each time: defects are planted). git keeps no file times, so touch.py first sets
# the recorded ones. `make demo DEMO=/path` is a user's cache: it is deep-scanned and its repair
# planned (--dry-run), never copied (it may be hundreds of GB) and never changed (--no-state: not
# even the state database is written into it).
DEMO_FIXTURES := fixtures/caches
demo: $(STAMP) bytecode
ifeq ($(DEMO),$(DEMO_FIXTURES))
	@$(VENV)/bin/cachedoctor scan --deep "$(DEMO)"; code=$$?; \
	  echo; echo "cachedoctor exited with $$code (0 clean, 1 findings at or above --fail-on, 2 could not run)"; \
	  test $$code -le 1
	@echo; $(PY) fixtures/touch.py >/dev/null
	@$(VENV)/bin/cachedoctor scan --config fixtures/datasets/simpletuner/config/multidatabackend.json; code=$$?; \
	  echo; echo "cachedoctor exited with $$code"; test $$code -le 1
	@# Then repair a copy of the caches (the shipped fixtures stay as they are): lossless fixes and
	@# quarantine; the corrupt files have no dataset to be recomputed from, so exit 1 is expected.
	@echo; demo=$$(mktemp -d); cp -r $(DEMO) $$demo/caches; \
	  $(VENV)/bin/cachedoctor repair --deep $$demo/caches --yes; code=$$?; \
	  echo; echo "cachedoctor repair exited with $$code; the repaired copy is in $$demo/caches"; test $$code -le 1
else
	@echo "$(DEMO) is your cache: it is scanned and its repair planned (--dry-run); nothing is copied or changed."
	@echo "(The repair of a copy is for the shipped fixtures: \`make demo\` without DEMO.)"; echo
	@$(VENV)/bin/cachedoctor scan --deep --no-state "$(DEMO)"; code=$$?; \
	  echo; echo "cachedoctor exited with $$code (0 clean, 1 findings at or above --fail-on, 2 could not run)"; \
	  test $$code -le 1
	@echo; $(VENV)/bin/cachedoctor repair --deep --no-state --dry-run "$(DEMO)"; code=$$?; \
	  echo; echo "cachedoctor repair --dry-run exited with $$code; nothing was changed. To carry the plan out:"; \
	  echo "  $(VENV)/bin/cachedoctor repair --deep \"$(DEMO)\""; test $$code -le 1
endif

# Compiled bytecode for the package and the tests' helpers, written explicitly: where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python never caches it, and each
# of the suite's hundreds of subprocesses would compile cachedoctor again (half a second each).
# Only files changed since the last run are compiled.
.PHONY: bytecode
bytecode: $(STAMP)
	@$(PY) -m compileall -q cachedoctor tests >/dev/null

# The suite runs on TEST_JOBS processes (pytest-xdist), a file per process at a time: most of its
# time is real subprocesses, servers and disk, so two processes keep a 2-core machine busy.
# `make TEST_JOBS=0 test` runs it in this process (pdb, profiling).
TEST_JOBS ?= 2
test: $(STAMP) bytecode
	$(PY) -m pytest $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

# Test tiers. `make check`: the edit loop, tests/unit, tests/stores and tests/e2e less the tests marked `slow`
# (crash tests, real subprocess sweeps, the golden recomputes); about 2.5 minutes on an idle
# 2-core machine. `make test`: the whole suite, tests/crash included, what .ci/run runs; about
# 5 minutes there. Mark a test that starts many processes or takes seconds with @pytest.mark.slow.
.PHONY: check
check: $(STAMP) bytecode
	$(PY) -m pytest -q -m "not slow" $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile) tests/unit tests/stores tests/e2e

# The lint and type gate: ruff's rules, ruff's formatting (check only), mypy (its files and
# options are in pyproject.toml). All three run, so one report shows every failure.
LINT_PATHS := cachedoctor tests bench fixtures
.PHONY: lint
lint: $(STAMP)
	@rc=0; \
	$(VENV)/bin/ruff check $(LINT_PATHS) || rc=1; \
	$(VENV)/bin/ruff format --check $(LINT_PATHS) || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	exit $$rc

# Every benchmark, each run even when an earlier one missed a goal; exits 1 if any goal was missed
# (2 if one could not run). BENCH_ARGS=--quick for a small check that they all work; --keep to
# reuse the large sets (the matrix's 14 GB, the million-file rescan's 2 GB) from bench/out/.
# Each bench's figures go to bench/out/final/<bench>.json; `make bench-docs` writes them into
# docs/performance.md.
BENCHES := scan dataset repair memory rescan rescan_million bomb safety matrix rank_sim shard s3_scan startup
bench: $(STAMP)
	@status=0; for b in $(BENCHES); do \
	  echo "== bench/$${b}_bench.py $(BENCH_ARGS)"; \
	  $(PY) bench/$${b}_bench.py --json bench/out/final/$${b}.json $(BENCH_ARGS); code=$$?; \
	  test $$code -le $$status || status=$$code; echo; done; exit $$status

# The last `make bench`'s goals (and the matrix's tables) written into docs/performance.md.
.PHONY: bench-docs
bench-docs: $(STAMP)
	$(PY) bench/goals_docs.py $(wildcard bench/out/final/*.json)
	test ! -f bench/out/final/matrix.json || $(PY) bench/matrix_docs.py bench/out/final/matrix.json

# The benchmark matrix at default sizes (about 15 minutes, 14 GB kept in bench/out/matrix), then
# its figures written into docs/performance.md (the documented figures come from this run).
.PHONY: bench-matrix
bench-matrix: $(STAMP)
	@$(PY) bench/matrix_bench.py --keep --json bench/out/matrix.json $(BENCH_ARGS); code=$$?; \
	  test $$code -le 1 && $(PY) bench/matrix_docs.py bench/out/matrix.json; exit $$code

# The differential fuzz test, long: FUZZ_N mutants of healthy caches and exploit files, drawn from
# FUZZ_SEED, run through the real loaders in a forked sandbox and through the scan (quick and
# deep); every mutant that a loader runs into a foreign global or an object array must be
# unsafe-pickle. Prints one line per failure, then counts by mutator and by verdict, and copies
# the failing mutants into FUZZ_OUT; exits 1 on any failure. The suite runs 250 of them
# (tests/unit/formats/test_differential_fuzz.py).
FUZZ_N    ?= 5000
FUZZ_SEED ?= 27
FUZZ_OUT  ?= bench/out/fuzz-failures
.PHONY: fuzz
fuzz: $(STAMP) bytecode
	$(PY) tests/differential.py --n $(FUZZ_N) --seed $(FUZZ_SEED) --out $(FUZZ_OUT)

# The sdist and the wheel, into dist/ (emptied first): `python -m build` when the venv has it (the
# [lint] extra), which builds the wheel from the sdist, so a file the sdist lacks fails the build;
# otherwise the same two steps through setuptools' own PEP 517 hooks and pip. No build isolation:
# the venv's setuptools builds, and nothing is fetched. Only needs the venv to exist (`| $(STAMP)`).
dist: | $(STAMP)
	@rm -rf dist build
	@if $(PY) -c "import build" 2>/dev/null; then \
	  $(PY) -m build --no-isolation --outdir dist . ; \
	else \
	  $(PY) -c "from setuptools import build_meta as b; b.build_sdist('dist')" >/dev/null && \
	  tmp=$$(mktemp -d) && tar -xzf dist/cachedoctor-*.tar.gz -C $$tmp && \
	  $(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist $$tmp/cachedoctor-* ; \
	  code=$$?; rm -rf $$tmp; exit $$code; \
	fi
	@rm -rf build
	@ls dist

# README.md's install lines, run verbatim from a fresh clone of this repository's HEAD (the
# placeholder URL swapped for this folder): a fresh venv (`pip install .`: no torch) and a venv
# with an older torch that the extras must leave alone, then the pipx, uv and git-URL lines where
# they can run. Uses pip's configured index; a few minutes, so not part of `make test`. Needs no
# .venv: the script is standard-library Python and makes its own venvs in a temp folder.
install-check:
	$(PYTHON) tests/readme_install.py

# Rebuild the shipped fixtures (deterministic); commit the result.
fixtures: $(STAMP)
	$(PY) fixtures/make_fixtures.py
	$(PY) fixtures/make_datasets.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info
