"""``vllm serve`` under test (``make check-vllm-serve``): vLLM's OpenAI server as a user starts it,
spoken to over HTTP, with a tiny random-weight Llama and a real BPE tokenizer built here.

One server at a time, each in its own process group: without offloading, with
``KVOffloadConnector``, with ``KVOffloadSpec`` (vLLM's OffloadingConnector), and with
``KVOffloadConnector`` over a file tier below a CPU tier too small to keep anything through a flood.
Each gets the same multi-turn chat: users sharing a system prompt, three turns, and before turns 2
and 3 a flood of unrelated prompts that evicts the small GPU prefix cache, so a later turn's
history can only come back from the offload tiers. Every completion (text and token ids) must equal
the server's without offloading, and the servers' ``/metrics`` must show the offload tiers serving
the later turns, with no failure and no lifecycle violation.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-serve` installs it in .venv-vllm")
pytest.importorskip("httpx", reason="httpx (a dependency of vLLM) is missing: `make check-vllm-serve`")

import httpx

from kvoffload_lab.benchmarks.serving import configs
from kvoffload_lab.benchmarks.serving.model import build_model, text
from kvoffload_lab.benchmarks.serving.prom import metric
from kvoffload_lab.benchmarks.serving.server import MODEL_NAME, Server, ServerShape, running, server_env
from kvoffload_lab.vllm.common.engine import TINY_MODEL, WEIGHT_SCALE

ROOT = Path(__file__).resolve().parents[2]
BLOCK_SIZE = 32  # vLLM's CPU attention takes multiples of 32 only
GPU_BLOCKS = 96
MAX_MODEL_LEN = 2048
CPU_CHUNKS = 512
USERS = 4
TURNS = 3
MAX_TOKENS = 12
FLOOD_PROMPTS = 12
FLOOD_WORDS = 320
START_TIMEOUT_S = float(os.environ.get("KVOFFLOAD_SERVE_START_TIMEOUT", "300"))
REQUEST_TIMEOUT_S = 300.0


# ---------------------------------------------------------------------------------------- workload
@dataclass
class Completion:
    """One chat completion as the server returned it."""

    user: int
    turn: int
    text: str
    token_ids: list[int]
    prompt_tokens: int
    cached_tokens: int | None


@dataclass
class Run:
    """What one server did: every completion, in (turn, user) order, and its /metrics per turn."""

    completions: list[Completion] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)


WORKLOAD_RNG = random.Random(11)
SYSTEM_PROMPT = text(WORKLOAD_RNG, 200)
FIRST_MESSAGES = [text(WORKLOAD_RNG, 40) for _ in range(USERS)]
LATER_MESSAGES = [[text(WORKLOAD_RNG, 15) for _ in range(USERS)] for _ in range(TURNS - 1)]
FLOODS = [[text(WORKLOAD_RNG, FLOOD_WORDS) for _ in range(FLOOD_PROMPTS)] for _ in range(TURNS - 1)]


def _post(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body, timeout=REQUEST_TIMEOUT_S)
    if response.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:500]}")
    return response.json()


def _chat(client: Any, user: int, turn: int, messages: list[dict[str, str]]) -> Completion:
    body = {
        "model": MODEL_NAME, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0.0, "seed": 0,
        # vLLM's extensions: a fixed length, the token ids, and the prompt's cached tokens.
        "ignore_eos": True, "return_token_ids": True,
    }
    reply = _post(client, "/v1/chat/completions", body)
    choice = reply["choices"][0]
    details = reply["usage"].get("prompt_tokens_details") or {}
    return Completion(
        user, turn, choice["message"]["content"], list(choice.get("token_ids") or []),
        int(reply["usage"]["prompt_tokens"]), details.get("cached_tokens"),
    )


def _flood(client: Any, pool: ThreadPoolExecutor, prompts: list[str]) -> None:
    body = {"model": MODEL_NAME, "max_tokens": 1, "temperature": 0.0, "ignore_eos": True}
    list(pool.map(lambda prompt: _post(client, "/v1/completions", {**body, "prompt": prompt}), prompts))


def run_chat(server: Server) -> Run:
    """The multi-turn chat: each turn's users at once, a flood before turns 2 and 3; /metrics
    read after every turn."""
    run = Run()
    histories = [
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": FIRST_MESSAGES[user]}]
        for user in range(USERS)
    ]
    with httpx.Client(base_url=server.url) as client, ThreadPoolExecutor(max_workers=USERS) as pool:
        for turn in range(TURNS):
            if turn:
                _flood(client, pool, FLOODS[turn - 1])
                for user in range(USERS):
                    histories[user].append({"role": "user", "content": LATER_MESSAGES[turn - 1][user]})
            requests = [(user, turn, list(histories[user])) for user in range(USERS)]
            done = list(pool.map(lambda request: _chat(client, *request), requests))
            for completion in done:
                histories[completion.user].append({"role": "assistant", "content": completion.text})
            run.completions += done
            run.metrics.append(server.metrics())
    return run


# ---------------------------------------------------------------------------------------- metrics
def must(text: str, name: str, **labels: str) -> float:
    value = metric(text, name, **labels)
    assert value is not None, f"{name}{labels or ''} is not in /metrics"
    return value


# ---------------------------------------------------------------------------------------- configs
def connector_config(**extra: Any) -> dict[str, Any]:
    return configs.connector_config(CPU_CHUNKS, "lru", **extra)


def spec_config(**extra: Any) -> dict[str, Any]:
    return configs.spec_config(CPU_CHUNKS, "lru", **extra)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The end-to-end tests' tiny model (hidden 128, 2 layers, head_dim 32) with the BPE's vocabulary.
    return build_model(tmp_path_factory.mktemp("tiny-llama-chat"), TINY_MODEL, WEIGHT_SCALE)


@pytest.fixture(scope="module")
def serve(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Runs the chat on a server with ``transfer`` and stops it (also on failure); one at a time."""
    logs = tmp_path_factory.mktemp("serve-logs")

    shape = ServerShape(model_dir, BLOCK_SIZE, GPU_BLOCKS, MAX_MODEL_LEN, max_num_seqs=8,
                        start_timeout_s=START_TIMEOUT_S)

    def run(name: str, transfer: dict[str, Any] | None) -> Run:
        with running(shape, logs / f"{name}.log", transfer, server_env(ROOT)) as server:
            return run_chat(server)

    yield run


@pytest.fixture(scope="module")
def baseline(serve: Any) -> Run:
    run = serve("baseline", None)
    # The flood must have evicted the shared history from the GPU prefix cache: without offloading
    # some later turns are recomputed beyond the system prompt (else this test proves nothing).
    offload_hits_by_turn(run, "baseline")
    assert all(c.cached_tokens is not None for c in run.completions), "vLLM reported no cached tokens"
    # The flood evicted every user's own history from the GPU prefix cache: a later turn finds at
    # most the shared system prompt there (which the turn's first request computes again), so
    # whatever more an offloading server serves came from its offload tiers.
    shared = max(c.cached_tokens or 0 for c in run.completions if c.turn == 0)
    assert shared > 0, "the users' shared system prompt was never served from the GPU prefix cache"
    assert all((c.cached_tokens or 0) <= shared for c in run.completions if c.turn), "the flood evicted nothing"
    assert metric(run.metrics[-1], "vllm:kvoffload_lookups_total") is None, "kvoffload metrics without kvoffload"
    return run


def assert_same_completions(baseline: Run, run: Run) -> None:
    assert len(run.completions) == len(baseline.completions) == USERS * TURNS
    for base, got in zip(baseline.completions, run.completions, strict=True):
        where = f"user {got.user}, turn {got.turn + 1}"
        assert got.token_ids == base.token_ids, f"{where}: token ids differ from the server without offloading"
        assert got.text == base.text, f"{where}: text differs from the server without offloading"
        assert got.prompt_tokens == base.prompt_tokens, f"{where}: the prompts differ"
    assert all(len(c.token_ids) == MAX_TOKENS for c in baseline.completions), "token ids not returned"


def offload_hits_by_turn(run: Run, name: str) -> list[float]:
    """vLLM's own count of prompt tokens served by the connector, per turn (printed: pytest -s
    shows them)."""
    totals = [must(text, "vllm:external_prefix_cache_hits_total") for text in run.metrics]
    hits = [totals[0]] + [b - a for a, b in itertools.pairwise(totals)]
    cached = [sum(c.cached_tokens or 0 for c in run.completions if c.turn == turn) for turn in range(TURNS)]
    print(f"\n{name}: offload hit tokens per turn {hits}, cached prompt tokens per turn {cached}")
    return hits


def assert_no_failures(text: str) -> None:
    for name in ("load_failures", "store_failures", "lifecycle_violations"):
        assert must(text, f"vllm:kvoffload_{name}_total") == 0, name


# ---------------------------------------------------------------------------------------- tests
def test_connector_serves_the_later_turns_with_the_same_completions(serve: Any, baseline: Run) -> None:
    run = serve("connector", connector_config())
    assert_same_completions(baseline, run)
    hits = offload_hits_by_turn(run, "connector")
    assert hits[1] > 0 and hits[2] > 0, f"no offload hits on later turns: {hits}"
    final = run.metrics[-1]
    # kvoffload's own counters agree with vLLM's.
    assert must(final, "vllm:kvoffload_hit_tokens_total") == sum(hits)
    assert must(final, "vllm:kvoffload_lookups_total") >= USERS * TURNS
    assert must(final, "vllm:kvoffload_loaded_chunks_total") * BLOCK_SIZE == sum(hits)
    assert must(final, "vllm:kvoffload_stored_chunks_total") > 0
    assert must(final, "vllm:kv_offload_load_bytes_total") > 0 and must(final, "vllm:kv_offload_load_time_total") > 0
    assert must(final, "vllm:kv_offload_store_bytes_total") > 0
    assert must(final, "vllm:kvoffload_admissions_total", policy="lru") > 0
    assert_no_failures(final)


def test_spec_serves_the_later_turns_with_the_same_completions(serve: Any, baseline: Run) -> None:
    run = serve("spec", spec_config())
    assert_same_completions(baseline, run)
    hits = offload_hits_by_turn(run, "spec")
    assert hits[1] > 0 and hits[2] > 0, f"no offload hits on later turns: {hits}"
    final = run.metrics[-1]
    # vLLM's own OffloadingConnector counters, and what KVOffloadSpec adds to them.
    assert must(final, "vllm:kv_offload_load_bytes_total") > 0
    assert must(final, "vllm:kv_offload_store_bytes_total") > 0
    assert must(final, "vllm:kvoffload_admissions_total", policy="lru") > 0
    assert metric(final, "vllm:kvoffload_lifecycle_violations_total") in (None, 0.0)
    # vLLM's default offload_prompt_only never stores the block where an answer starts, which the
    # next turn's prompt holds: with it off, the spec serves more of every later turn's history.
    full = serve("spec-all-blocks", spec_config(offload_prompt_only=False))
    assert_same_completions(baseline, full)
    full_hits = offload_hits_by_turn(full, "spec-all-blocks")
    assert sum(full_hits) > sum(hits), f"offload_prompt_only false served {full_hits}, the default {hits}"


def test_connector_with_a_file_tier_serves_the_later_turns_from_the_file(
    serve: Any, baseline: Run, tmp_path: Path
) -> None:
    # A CPU tier of 16 chunks keeps nothing through a flood of 120 blocks: the file tier must serve.
    tier = {"path": str(tmp_path / "kvoffload.tier"), "size_bytes": 64 << 20}
    transfer = connector_config(file_tier=tier)
    transfer["kv_connector_extra_config"]["num_cpu_blocks"] = 16
    run = serve("connector-file", transfer)
    assert_same_completions(baseline, run)
    hits = offload_hits_by_turn(run, "connector-file")
    assert hits[1] > 0 and hits[2] > 0, f"no offload hits on later turns: {hits}"
    final = run.metrics[-1]
    assert must(final, "vllm:kvoffload_tier_cascaded_chunks_total", tier="file") > 0
    assert must(final, "vllm:kvoffload_tier_promoted_chunks_total", tier="file") > 0
    assert must(final, "vllm:kvoffload_tier_loaded_chunks_total", tier="file") > 0
    for name in ("checksum_failures", "faults", "outages"):
        assert must(final, f"vllm:kvoffload_tier_{name}_total", tier="file") == 0, name
    assert_no_failures(final)
