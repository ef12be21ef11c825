# Every target creates .venv and installs what it needs, so a fresh clone only needs `make demo`
# or `make test`. torch is pinned to the CPU build that installs from local disk; GPU users
# install their own torch first and the package's `torch>=2.4` accepts it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-thorough lint tla tla-corpus bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e '.[test,plot,fast-cpu]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvoffload simulate

test: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(PY) -m pytest -q

test-thorough: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

tla: $(STAMP)
	$(VENV)/bin/kvoffload tla check-all tla

bench: $(STAMP)
	$(VENV)/bin/kvoffload bench scheduler --json
	$(VENV)/bin/kvoffload bench mover --json
	$(VENV)/bin/kvoffload bench tla --json

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis

# Every model of the public TLA+ corpus (tests/tlaplus/corpus) against TLC's recorded answers;
# `make test` runs only the fast ones.
tla-corpus: $(STAMP)
	TLA_CORPUS_ALL=1 $(PY) -m pytest -q tests/tlaplus/test_tla_corpus.py
