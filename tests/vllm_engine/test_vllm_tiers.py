"""Secondary tiers behind KVOffloadConnector in a real vLLM engine (``make check-vllm-tiers``).

The CPU tier (16 chunks, LRU) is too small to keep a 320-token prompt through a flood of twelve
unrelated prompts, so the prompt's re-run can only come back from the file or Redis tier. Every
output must equal the run without offloading, token for token (greedy outputs do not depend on
what was cached), and the tier must have served the re-run: the connector's promotion counters
and vLLM's ``vllm:external_prefix_cache_hits``. Faults are injected between and during batches
of one engine run; after each the engine keeps serving identical outputs, and hits resume once
the tier is back.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")
pytest.importorskip("redis", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from kvoffload.tiers.record import Namespace
from kvoffload_lab.redis_server import LocalRedisCluster, RedisServer
from kvoffload_lab.vllm.common.engine import (
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    kvoffload_state,
    spec_transfer_config,
)
from redis_servers import running_cluster, running_server

BLOCK_SIZE = 32
GPU_BLOCKS = 48
CPU_CHUNKS = 16
MAX_TOKENS = 16
PROMPT_TOKENS = 320
# kvoffload's scheduler leaves the chunk holding the last prompt token to the engine.
SERVED = (PROMPT_TOKENS - 1) // BLOCK_SIZE * BLOCK_SIZE
SERVED_CHUNKS = SERVED // BLOCK_SIZE
FILE_TIER_BYTES = 16 << 20
PASSWORD_ENV = "KVOFFLOAD_TEST_REDIS_PASSWORD"
PASSWORD = "tier-test-secret"

_rng = random.Random(7)


def _tokens(n: int = PROMPT_TOKENS) -> list[int]:
    return [_rng.randrange(1000) for _ in range(n)]


# Prompts re-run after floods; each flood evicts them from the GPU prefix cache and the CPU tier.
REUSED = [_tokens() for _ in range(4)]
FLOODS = [[_tokens() for _ in range(12)] for _ in range(4)]
EVERY_PROMPT = REUSED + [p for flood in FLOODS for p in flood]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def expected(model_dir: Path) -> dict[tuple[int, ...], list[int]]:
    """Every prompt's greedy output without offloading."""
    engine = InProcessEngine(model_dir, None, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS)
    try:
        outputs, _ = engine.generate(EVERY_PROMPT, MAX_TOKENS)
    finally:
        engine.shutdown()
    return {tuple(p): o for p, o in zip(EVERY_PROMPT, outputs, strict=True)}


def transfer_config(tiers: dict, spec: bool) -> dict:
    """The kv_transfer_config of ``tiers`` behind KVOffloadSpec (``spec``) or KVOffloadConnector."""
    if spec:
        return spec_transfer_config(CPU_CHUNKS, "lru", tiers=tiers)
    return connector_transfer_config(CPU_CHUNKS, "lru", tiers=tiers)


class Run:
    """One engine with tiers behind KVOffloadConnector (or, ``spec``, KVOffloadSpec in vLLM's
    OffloadingConnector); every batch's outputs are checked against ``expected``."""

    def __init__(
        self, model_dir: Path, tiers: dict, expected: dict[tuple[int, ...], list[int]], spec: bool = False
    ) -> None:
        self.engine = InProcessEngine(
            model_dir, transfer_config(tiers, spec), block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS
        )
        self.expected = expected

    def batch(self, prompts: Sequence[Sequence[int]]) -> list[int]:
        outputs, cached = self.engine.generate(prompts, MAX_TOKENS)
        for prompt, output in zip(prompts, outputs, strict=True):
            assert output == self.expected[tuple(prompt)], "greedy token ids differ from the run without offloading"
        return cached

    def rerun(self, prompt: Sequence[int], flood: Sequence[Sequence[int]]) -> int:
        """Run ``prompt``, a flood, then ``prompt`` again: the tokens its re-run got from cache."""
        self.batch([prompt])
        self.batch(flood)
        return self.batch([prompt])[0]

    def tiers(self) -> dict[str, dict[str, int]]:
        return kvoffload_state(self.engine.scheduler_connector)[2]["tiers"]

    def external_hits(self) -> int:
        return self.engine.counters()[1]

    def close(self) -> tuple[list[str], list[str]]:
        """Drain, then the violations and leaks kvoffload recorded."""
        self.engine.drain()
        violations, leaks, _ = kvoffload_state(self.engine.scheduler_connector)
        self.engine.shutdown()
        return violations, leaks


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server that asks for :data:`PASSWORD`; ``kill()`` SIGKILLs it (nothing is
    persisted), ``start()`` brings it back empty on the same port."""
    yield from running_server(maxmemory="256mb", password=PASSWORD)


def _client(server: RedisServer) -> Any:
    """A redis-py client of ``server`` (imported here: the module skips when redis-py is missing)."""
    import redis

    return redis.Redis(host="127.0.0.1", port=server.port, password=server.password)


@pytest.fixture
def redis_password(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    return PASSWORD


def _redis_tiers(server: RedisServer) -> dict:
    # The password comes from the environment: the tier refuses a URL that carries one.
    url = f"redis://127.0.0.1:{server.port}/0"
    return {"redis_tier": {"url": url, "password_env": PASSWORD_ENV, "ttl_s": 600}}


def test_file_tier_serves_and_survives_damage(model_dir: Path, expected: dict, tmp_path: Path) -> None:
    path = tmp_path / "kv.tier"
    run = Run(model_dir, {"file_tier": {"path": str(path), "size_bytes": FILE_TIER_BYTES}}, expected)
    try:
        assert run.rerun(REUSED[0], FLOODS[0]) == SERVED, "the re-run was not served from the file tier"
        served = run.tiers()["file"]["promoted_keys"]
        assert served >= SERVED_CHUNKS
        assert run.external_hits() >= SERVED
        # Overwritten behind the tier's back: every chunk fails its checksum, the prompt is recomputed.
        with open(path, "r+b") as tier_file:
            tier_file.write(os.urandom(os.path.getsize(path)))
        assert run.rerun(REUSED[0], FLOODS[1]) < SERVED
        assert run.tiers()["file"]["checksum_failures"] >= 1
        # Truncated while running (the prompt was stored and cascaded again when it was recomputed):
        # its reads come back short, never served.
        failures = run.tiers()["file"]["checksum_failures"]
        os.truncate(path, 0)
        run.batch(FLOODS[2])
        assert run.batch([REUSED[0]])[0] < SERVED
        assert run.tiers()["file"]["checksum_failures"] > failures
        # Deleted while running: the open file keeps serving (the inode lives on).
        os.unlink(path)
        assert run.rerun(REUSED[2], FLOODS[3]) == SERVED
        assert run.tiers()["file"]["promoted_keys"] >= served + SERVED_CHUNKS
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


def test_engine_restarted_over_an_existing_tier_file(model_dir: Path, expected: dict, tmp_path: Path) -> None:
    tiers = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": FILE_TIER_BYTES}}
    first = Run(model_dir, tiers, expected)
    try:
        first.rerun(REUSED[0], FLOODS[0])
    finally:
        first.close()
    second = Run(model_dir, tiers, expected)
    try:
        # The file tier starts empty after a restart: nothing of the first engine is served.
        assert second.batch([REUSED[0]]) == [0]
        assert second.rerun(REUSED[1], FLOODS[1]) == SERVED
    finally:
        violations, leaks = second.close()
    assert violations == [] and leaks == []


def test_redis_tier_serves_and_survives_faults(
    model_dir: Path, expected: dict, redis_server: RedisServer, redis_password: str
) -> None:
    run = Run(model_dir, _redis_tiers(redis_server), expected)
    client = _client(redis_server)
    try:
        assert run.rerun(REUSED[0], FLOODS[0]) == SERVED, "the re-run was not served from the Redis tier"
        assert run.tiers()["redis"]["promoted_keys"] >= SERVED_CHUNKS
        assert run.external_hits() >= SERVED
        # Values truncated, corrupted and swapped behind the tier's back: never served.
        keys = sorted(client.keys("*"))
        assert keys, "nothing was cascaded to Redis"
        for index, key in enumerate(keys):
            value = client.get(key)
            if index % 3 == 0:
                client.set(key, value[:-7])
            elif index % 3 == 1:
                client.set(key, value[:100] + bytes([value[100] ^ 1]) + value[101:])
        for left, right in zip(keys[2::3], keys[5::3], strict=False):
            left_value, right_value = client.get(left), client.get(right)
            client.set(left, right_value)
            client.set(right, left_value)
        run.batch(FLOODS[1])
        assert run.batch([REUSED[0]])[0] < SERVED
        assert run.tiers()["redis"]["checksum_failures"] + run.tiers()["redis"]["failed_promotions"] >= 1
        # SIGKILLed in the middle of a flood, then restarted empty: misses, then hits resume.
        killer = threading.Timer(1.0, redis_server.kill)
        killer.start()
        run.batch(FLOODS[2])
        killer.join()
        assert run.batch([REUSED[1]]) == [0]
        redis_server.start()
        promoted = run.tiers()["redis"]["promoted_keys"]
        assert run.rerun(REUSED[2], FLOODS[3]) == SERVED
        assert run.tiers()["redis"]["promoted_keys"] >= promoted + SERVED_CHUNKS
        # SIGKILLed and left down: the engine keeps serving.
        redis_server.kill()
        assert run.rerun(REUSED[3], FLOODS[0]) == 0
        assert run.tiers()["redis"]["faults"] >= 1
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


def test_another_tenants_values_and_a_rotated_password(
    model_dir: Path, expected: dict, redis_server: RedisServer, redis_password: str, tmp_path: Path
) -> None:
    another_deployments_values_and_a_rotated_password(model_dir, expected, redis_server, tmp_path, False, SERVED)


def another_deployments_values_and_a_rotated_password(
    model_dir: Path, expected: dict, redis_server: RedisServer, tmp_path: Path, spec: bool, served: int
) -> None:
    """Another deployment (another model: other KV for the same block hashes) shares the server;
    its values copied under this engine's key names are refused. Then the server's password
    changes under the running engine (no hits, same outputs) and changes back (hits resume:
    ``served`` tokens). ``spec``: both engines run KVOffloadSpec instead of KVOffloadConnector."""
    other_model = build_tiny_model(tmp_path / "other-model", seed=1)
    other = InProcessEngine(other_model, transfer_config(_redis_tiers(redis_server), spec),
                   block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS)
    try:
        other.generate([REUSED[0]], MAX_TOKENS)
        other.drain()
        other_scope = redis_scope(other)
    finally:
        other.shutdown()
    client = _client(redis_server)
    run = Run(model_dir, _redis_tiers(redis_server), expected, spec=spec)
    try:
        scope = redis_scope(run.engine)
        assert scope != other_scope
        foreign = [key for key in client.keys("*") if _tag_and_scope(key)[1] == other_scope]
        assert len(foreign) >= served // BLOCK_SIZE, "the other deployment cascaded nothing"
        for key in foreign:
            client.set(_tag_and_scope(key)[0] + scope, client.get(key))
        assert run.batch([REUSED[0]]) == [0], "another deployment's KV was served"
        assert run.tiers()["redis"]["checksum_failures"] >= 1
        # The password rotates under the running engine: its connections are dropped and re-authenticate in vain.
        client.config_set("requirepass", "rotated")
        client.execute_command("AUTH", "rotated")
        client.client_kill_filter(_type="normal", skipme=True)
        faults = run.tiers()["redis"]["faults"]
        assert run.rerun(REUSED[1], FLOODS[1]) == 0
        assert run.tiers()["redis"]["faults"] > faults
        client.config_set("requirepass", PASSWORD)
        assert run.rerun(REUSED[2], FLOODS[2]) == served, "hits did not resume once the password was right again"
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


def redis_scope(engine: InProcessEngine) -> bytes:
    """The scope (model, layout, rank 0, no salt) that starts rank 0's Redis key names in
    ``engine``, behind either integration."""
    connector = engine.scheduler_connector
    if hasattr(connector, "kvoffload_scheduler"):
        return Namespace(connector.model_name, connector.layout).scope("")
    # KVOffloadSpec: the tier I/O runs next to the manager, in the scheduler process.
    return connector.connector_scheduler.manager.io.ranks[0].backends["redis"].namespace.scope("")


def _tag_and_scope(name: bytes) -> tuple[bytes, bytes]:
    """A Redis key name's two parts: its hash tag (the chunk key in hex, in braces), then its scope."""
    tag, _, scope = name.partition(b"}")
    return tag + b"}", scope


def engine_process(model_dir: Path, config: dict, batches: list[list[list[int]]]) -> dict:
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, str(here / "tier_engine_process.py"), str(model_dir), json.dumps(config),
         json.dumps(batches)],
        capture_output=True, text=True, timeout=600, env=os.environ.copy(), check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_engines_in_two_processes_share_redis(
    model_dir: Path, expected: dict, redis_server: RedisServer, redis_password: str
) -> None:
    """Two engines one after the other, each in its own process with vLLM's multiprocessing on
    (frontend, engine core and worker in three processes): the second serves the prefix the
    first computed, through Redis."""
    config = connector_transfer_config(CPU_CHUNKS, "lru", check_invariants=False, tiers=_redis_tiers(redis_server))
    second_engine_served(model_dir, config, redis_server, expected, SERVED)


def second_engine_served(model_dir: Path, config: dict, redis_server: RedisServer, expected: dict, served: int) -> None:
    """Two engine processes on ``config`` run ``REUSED[0]`` in turn: the first computes it, the
    second (its CPU tier empty) gets ``served`` tokens of it from the first's chunks in Redis."""
    first = engine_process(model_dir, config, [[REUSED[0]]])
    assert _client(redis_server).dbsize() >= served // BLOCK_SIZE, "the first engine cascaded nothing to Redis"
    second = engine_process(model_dir, config, [[REUSED[0]]])
    for report in (first, second):
        assert report["outputs"] == [expected[tuple(REUSED[0])]]
    assert first["cached"] == [0]
    assert second["cached"] == [served]
    assert second["external_hit_tokens"] >= served


@pytest.fixture
def cluster() -> Iterator[LocalRedisCluster]:
    yield from running_cluster(maxmemory="128mb")


def test_redis_cluster_with_a_slot_migration_and_a_killed_master(
    model_dir: Path, expected: dict, cluster: LocalRedisCluster
) -> None:
    redis_cluster_with_a_slot_migration_and_a_killed_master(model_dir, expected, cluster, False, SERVED)


def redis_cluster_with_a_slot_migration_and_a_killed_master(
    model_dir: Path, expected: dict, cluster: LocalRedisCluster, spec: bool, served: int
) -> None:
    """Three masters on loopback: the tier serves from the cluster (``served`` tokens), keeps
    serving identical outputs while slots migrate under a batch, and after a master is SIGKILLed:
    misses, never errors. ``spec``: the engine runs KVOffloadSpec instead of KVOffloadConnector."""
    tiers = {"redis_tier": {"url": cluster.url, "cluster": True, "socket_timeout_s": 1.0}}
    run = Run(model_dir, tiers, expected, spec=spec)
    try:
        assert run.rerun(REUSED[0], FLOODS[0]) == served, "the re-run was not served from the cluster"
        assert run.tiers()["redis"]["promoted_keys"] >= served // BLOCK_SIZE
        migrate = cluster.reshard_command(cluster.nodes[0], cluster.nodes[1], 3000)
        migration = threading.Thread(target=subprocess.run, args=(migrate,), kwargs={"check": True, "timeout": 120})
        migration.start()
        run.batch(FLOODS[1])
        migration.join()
        promoted = run.tiers()["redis"]["promoted_keys"]
        # The migrated slots' chunks are still found (redirections are followed).
        assert run.batch([REUSED[0]]) == [served]
        assert run.tiers()["redis"]["promoted_keys"] >= promoted + served // BLOCK_SIZE
        cluster.nodes[2].kill()
        run.rerun(REUSED[1], FLOODS[2])
        run.rerun(REUSED[2], FLOODS[3])
        assert run.tiers()["redis"]["faults"] >= 1
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


BAD_URL = "http://127.0.0.1:6379/0"
BAD_URL_LINE = f"kv_connector_extra_config['redis_tier']['url'] must be a redis:// or rediss:// URL, got {BAD_URL!r}"
START_ENGINE = (
    "import json, sys; from pathlib import Path; from kvoffload_lab.vllm.common.engine import InProcessEngine; "
    "InProcessEngine(Path(sys.argv[1]), json.loads(sys.argv[2]), block_size=32, num_gpu_blocks=48)"
)


def _failed_start(model_dir: Path, multiprocessing: bool) -> tuple[str, str]:
    """Start an engine whose Redis tier URL is bad, in a process of its own; its stdout (vLLM's
    log) and stderr. The start must fail with status 1."""
    config = connector_transfer_config(CPU_CHUNKS, "lru", tiers={"redis_tier": {"url": BAD_URL}})
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if multiprocessing else "0"}
    done = subprocess.run(
        [sys.executable, "-c", START_ENGINE, str(model_dir), json.dumps(config)],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    return done.stdout, done.stderr


def _exceptions(stderr: str) -> list[str]:
    """The lines of ``stderr`` that end a traceback (``module.Type: message``), without the
    ``[rank0]: `` that torch.distributed puts before every stderr line of a process in a group."""
    lines = [re.sub(r"^\[rank\d+\]: ", "", line) for line in stderr.splitlines()]
    return [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]


def test_a_bad_tier_setting_stops_the_engine_start_with_its_line(model_dir: Path) -> None:
    """In process (``LLM(...)`` with vLLM's multiprocessing off) the setting's line ends the
    traceback. With multiprocessing (``vllm serve``; on the CPU platform the worker then runs in a
    process of its own) the worker raises it, the engine core repeats it in its own error, and
    vLLM's frontend ends with its own 'See root cause above'."""
    _, stderr = _failed_start(model_dir, multiprocessing=False)
    assert _exceptions(stderr)[-1] == f"kvoffload.vllm.settings.ConfigError: {BAD_URL_LINE}"
    stdout, stderr = _failed_start(model_dir, multiprocessing=True)
    assert f"kvoffload.vllm.settings.ConfigError: {BAD_URL_LINE}" in stdout + stderr
    engine_core, frontend = _exceptions(stderr)[-2:]
    assert engine_core.startswith(f"RuntimeError: Worker failed with error '{BAD_URL_LINE}'")
    assert frontend.startswith("RuntimeError: Engine core initialization failed. See root cause above.")
