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

import contextlib
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-serve` installs it in .venv-vllm")
pytest.importorskip("httpx", reason="httpx (a dependency of vLLM) is missing: `make check-vllm-serve`")

import httpx

from kvoffload.vllm.harness import TINY_MODEL, TORCH_COPIES, WEIGHT_SCALE

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
MODEL_NAME = "tiny-llama"

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]


# ---------------------------------------------------------------------------------------- model
def _words(rng: random.Random, count: int) -> list[str]:
    """Pronounceable pseudo-words: a corpus the BPE learns merges from, and the prompts' text."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    return [
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) for _ in range(count)
    ]


def build_tokenizer(directory: Path) -> int:
    """A byte-level BPE trained here on a seeded corpus (no download), saved with a chat template;
    returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(7)
    corpus = [" ".join(_words(rng, 40)) + "." for _ in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=768, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(directory)
    return len(wrapped)


def build_model(directory: Path) -> Path:
    """The tokenizer and a seeded random-weight Llama of that vocabulary (the end-to-end tests'
    tiny model otherwise: hidden 128, 2 layers, head_dim 32, weights scaled up)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = build_tokenizer(directory)
    torch.manual_seed(0)
    config = LlamaConfig(**{**TINY_MODEL, "vocab_size": vocab}, bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(WEIGHT_SCALE)
    model.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------------------------------- servers
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_env() -> dict[str, str]:
    """The servers' environment: this checkout's kvoffload first, nothing downloaded, and one core
    reserved whether or not a connector is configured (vLLM reserves one for a connector's thread
    on its own), so every server computes on the same threads."""
    env = dict(os.environ)
    # kvoffload.vllm.harness (imported here) turns vLLM's multiprocessing off for in-process
    # engines; a server runs as users run it, its engine core in a process of its own.
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    paths = [str(ROOT / "src"), str(ROOT / "packages" / "tlacheck" / "src"), env.get("PYTHONPATH", "")]
    env.update({
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    })
    return env


class Server:
    """``python -m kvoffload.vllm.cpu_cli serve`` (vLLM's CLI) in a process group of its own,
    stopped by that group: SIGTERM, then SIGKILL, then checked gone."""

    def __init__(self, model_dir: Path, log: Path, transfer: dict[str, Any] | None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        command = [
            sys.executable, "-m", "kvoffload.vllm.cpu_cli", "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", MODEL_NAME,
            "--dtype", "float32", "--block-size", str(BLOCK_SIZE), "--num-gpu-blocks-override", str(GPU_BLOCKS),
            "--max-model-len", str(MAX_MODEL_LEN), "--enable-prefix-caching", "--enforce-eager", "--seed", "0",
            "--max-num-seqs", "8", "--disable-uvicorn-access-log", "--enable-prompt-tokens-details",
        ]
        if transfer is not None:
            command += ["--kv-transfer-config", json.dumps(transfer)]
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=server_env(), cwd=ROOT, start_new_session=True
        )
        self.pgid = self.process.pid  # start_new_session: the server leads its own group

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode} at start:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"server not ready after {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=30).text

    def stop(self) -> None:
        """Stop every process of the server's group; raises if one survives."""
        for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(self.pgid):
                if self.process.poll() is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.process.wait(timeout=0.5)
                else:
                    time.sleep(0.2)
            if not _group_alive(self.pgid):
                break
        self.process.poll()
        self._log.close()
        if _group_alive(self.pgid):
            raise RuntimeError(f"processes of server group {self.pgid} survived SIGKILL")


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies reaped or not count as gone)."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command's ")": state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


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


def _text(rng: random.Random, words: int) -> str:
    return " ".join(_words(rng, words)) + "."


WORKLOAD_RNG = random.Random(11)
SYSTEM_PROMPT = _text(WORKLOAD_RNG, 200)
FIRST_MESSAGES = [_text(WORKLOAD_RNG, 40) for _ in range(USERS)]
LATER_MESSAGES = [[_text(WORKLOAD_RNG, 15) for _ in range(USERS)] for _ in range(TURNS - 1)]
FLOODS = [[_text(WORKLOAD_RNG, FLOOD_WORDS) for _ in range(FLOOD_PROMPTS)] for _ in range(TURNS - 1)]


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
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples in a /metrics text whose labels include ``labels`` (None
    when the metric has no such sample)."""
    total = None
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total = (total or 0.0) + float(match.group(3))
    return total


def must(text: str, name: str, **labels: str) -> float:
    value = metric(text, name, **labels)
    assert value is not None, f"{name}{labels or ''} is not in /metrics"
    return value


# ---------------------------------------------------------------------------------------- configs
def connector_config(**extra: Any) -> dict[str, Any]:
    return {
        "kv_connector": "KVOffloadConnector", "kv_connector_module_path": "kvoffload.vllm.connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"num_cpu_blocks": CPU_CHUNKS, "eviction_policy": "lru", **TORCH_COPIES, **extra},
    }


def spec_config(**extra: Any) -> dict[str, Any]:
    return {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_module_path": "kvoffload.vllm.offloading_spec", "spec_name": "KVOffloadSpec",
            "num_cpu_blocks": CPU_CHUNKS, "eviction_policy": "lru", **TORCH_COPIES, **extra,
        },
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("tiny-llama-chat"))


@pytest.fixture(scope="module")
def serve(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Runs the chat on a server with ``transfer`` and stops it (also on failure); one at a time."""
    logs = tmp_path_factory.mktemp("serve-logs")

    def run(name: str, transfer: dict[str, Any] | None) -> Run:
        server = Server(model_dir, logs / f"{name}.log", transfer)
        try:
            server.wait_ready()
            return run_chat(server)
        except BaseException as error:
            error.add_note(f"server {name} log tail:\n{server.log_tail()}")
            raise
        finally:
            server.stop()

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
