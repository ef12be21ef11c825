# Every target creates .venv and installs what it needs, so a fresh clone only needs `make demo`
# or `make test`. torch is pinned to the CPU build that installs from local disk; GPU users
# install their own torch first and the package's `torch>=2.4` accepts it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-thorough lint tla bench clean check-vllm

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

# vLLM's own offloading connector through kvoffload's checkers (README, "For vLLM developers"):
# pinned release wheels (only their .py files) in an ignored cache; xgrammar without its
# dependencies (it would pull ~1 GB of triton the check never uses).
VLLM_CACHE := .cache/vllm
check-vllm: $(STAMP)
	$(PY) -m pip install -q -e '.[vllm]'
	$(PY) -m pip install -q --no-deps 'xgrammar<1' apache-tvm-ffi
	$(PY) -m kvoffload.vllm.check.release $(VLLM_CACHE)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis
