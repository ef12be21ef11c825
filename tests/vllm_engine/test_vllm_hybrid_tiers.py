"""The secondary tiers under KV cache groups (``make check-vllm-tiers``): the tiny Gemma 3 of
``test_vllm_hybrid.py`` (sliding window 64 and full attention alternating, a 192-token shared
prefix, a flood, second turns) with a 16-chunk CPU tier that the flood empties, so the second
turns can only come back from the file tier.

- Each integration over a file tier, then a Redis tier: token for token equal to the run without
  offloading, the second turns served from the file, every chunk cascaded to Redis too.
- The same model with another sliding window (32, through vLLM's ``hf_overrides``: same model
  name, so only the layout tells the two apart), behind the same integration on the same Redis
  database: its lookups find none of the first engine's chunks and its outputs equal its own run
  without offloading. With a namespace that leaves the groups' kinds out
  (``NoGroupLayoutConnector``, ``NoGroupKindsSpec``) it reads the other window's chunks, and that
  check fails.

A file tier is never read across engines (it starts empty at every start, and refuses a file of
another layout: ``tests/test_vllm_group_namespaces.py``), so Redis is the tier another layout
could read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")
pytest.importorskip("redis", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from file_tier import assert_loaded_from_file_tier, file_tier_config
from test_vllm_hybrid import BLOCK_SIZE, PREFIX_TOKENS, WORKLOAD, baseline, model_dir, run_gemma3

from kvoffload_lab.redis_server import RedisServer
from kvoffload_lab.vllm.common.engine import EngineReport
from redis_servers import running_server

# The model and the run without offloading, shared with test_vllm_hybrid.py.
__all__ = ["baseline", "model_dir"]

CPU_CHUNKS = 16
PREFIX_CHUNKS = PREFIX_TOKENS // BLOCK_SIZE
OTHER_WINDOW = {"sliding_window": 32}
# The first turns alone: two prompts sharing the prefix, longer than either window.
FIRST_TURNS = WORKLOAD[:1]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from running_server(maxmemory="128mb")


# A Redis database per integration, and per mutant: each reader finds only its own writer's chunks.
DATABASES = {("connector", False): 0, ("spec", False): 1, ("connector", True): 2, ("spec", True): 3}
MUTANTS = {
    "connector": {"connector_module": "vllm_group_mutants", "connector_name": "NoGroupLayoutConnector"},
    "spec": {"spec_module": "vllm_group_mutants", "spec_name": "NoGroupKindsSpec"},
}


def _config(integration: str, server: RedisServer, file_dir: Path | None = None, mutant: bool = False) -> dict:
    """``integration`` (``mutant``: its mutant) over a file tier in ``file_dir`` (None: none), then
    its Redis database."""
    redis = {"redis_tier": {"url": f"redis://127.0.0.1:{server.port}/{DATABASES[integration, mutant]}"}}
    return file_tier_config(integration, CPU_CHUNKS, file_dir, redis, **(MUTANTS[integration] if mutant else {}))


@pytest.fixture(scope="module", params=["connector", "spec"])
def integration(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def writer(
    integration: str, model_dir: Path, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> EngineReport:
    """The whole workload through ``integration`` over a file tier and Redis."""
    config = _config(integration, redis_server, tmp_path_factory.mktemp(f"{integration}-file"))
    report, hybrid = run_gemma3(model_dir, config)
    assert hybrid == (True, 2), "vLLM's hybrid KV cache manager must stay on"
    return report


def test_second_turns_come_from_the_file_tier(writer: EngineReport, baseline: EngineReport) -> None:
    assert writer.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    for served in writer.cached_tokens[2]:
        assert served >= PREFIX_TOKENS, f"second turns served {writer.cached_tokens[2]} tokens from cache"
    assert_loaded_from_file_tier(writer, PREFIX_CHUNKS)
    assert writer.kvoffload["tiers"]["redis"]["cascaded_keys"] >= PREFIX_CHUNKS
    assert writer.violations == [], "kvoffload recorded lifecycle violations"
    assert writer.leaks == [], "kvoffload state left behind after the engine drained"


@pytest.fixture(scope="module")
def other_window_baseline(model_dir: Path, baseline: EngineReport) -> EngineReport:
    report, hybrid = run_gemma3(model_dir, None, FIRST_TURNS, OTHER_WINDOW)
    assert hybrid == (True, 2)
    # Otherwise a read of the first window's chunks could not show in the outputs.
    assert report.outputs != baseline.outputs[:2], "the window does not change these prompts' outputs"
    return report


def _cross_window_reads(reader: EngineReport, other_window_baseline: EngineReport) -> list[str]:
    """What shows that the reader used chunks of the first window's engine (empty: nothing)."""
    redis = reader.kvoffload["tiers"]["redis"]
    found = []
    if redis["probe_hits"] or redis["promoted_keys"]:
        found.append(f"Redis served another layout's chunks: {redis['promoted_keys']} promoted, "
                     f"{redis['probe_hits']} probe hits")
    if reader.outputs != other_window_baseline.outputs:
        found.append("greedy token ids differ from the run without offloading")
    return found


def test_another_window_reads_none_of_these_chunks(
    integration: str, writer: EngineReport, model_dir: Path, redis_server: RedisServer,
    other_window_baseline: EngineReport,
) -> None:
    reader, _ = run_gemma3(model_dir, _config(integration, redis_server), FIRST_TURNS, OTHER_WINDOW)
    assert _cross_window_reads(reader, other_window_baseline) == []
    # It did ask Redis for the shared prefix: a miss, counted.
    assert reader.kvoffload["tiers"]["redis"]["probes"] >= 1
    assert reader.violations == [] and reader.leaks == []


def test_mutant_namespace_without_the_group_kinds_is_caught(
    integration: str, model_dir: Path, redis_server: RedisServer, other_window_baseline: EngineReport
) -> None:
    config = _config(integration, redis_server, mutant=True)
    run_gemma3(model_dir, config, FIRST_TURNS)
    reader, _ = run_gemma3(model_dir, config, FIRST_TURNS, OTHER_WINDOW)
    found = _cross_window_reads(reader, other_window_baseline)
    assert found, "an engine of another window read nothing through the mutant's namespace"
    assert reader.kvoffload["tiers"]["redis"]["promoted_keys"] >= 1
