"""The cluster backend of the vLLM Redis tier against a real 3-master Redis Cluster (no vLLM):
chunks round-trip and verify across nodes, a slot migration keeps them readable, and a killed
master turns its chunks into faults or misses, never an exception."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytest.importorskip("redis", reason="the tiers' extra is not installed: pip install -e '.[tiers]'")

from kvoffload.tiers.protocol import FAULT, MISS, OK, TierJob
from kvoffload.tiers.record import Namespace
from kvoffload.vllm.redis_cluster_tier import RedisClusterTier
from loopback_servers import LoopbackCluster, started_cluster

KEYS = tuple(range(1000, 1064))
CHUNK = 4096


@pytest.fixture
def cluster() -> Iterator[LoopbackCluster]:
    yield from started_cluster()


def _job(kind: str, job_id: int) -> TierJob:
    return TierJob(job_id, kind, "redis", "r", KEYS, tuple(range(len(KEYS))) if kind != "probe" else ())


def test_chunks_survive_a_migration_and_a_killed_master_only_costs_hits(cluster: LoopbackCluster) -> None:
    tier = RedisClusterTier(cluster.url, Namespace("m", "l"), None, 1.0, 600, writer=1)
    payloads = [memoryview(os.urandom(CHUNK)) for _ in KEYS]
    try:
        assert tier.write(_job("cascade", 1), payloads, [False] * len(KEYS)) == (OK,) * len(KEYS)
        cluster.migrate(2000)
        outs = [memoryview(bytearray(CHUNK)) for _ in KEYS]
        results, foreign = tier.read(_job("promote", 2), outs)
        assert results == (OK,) * len(KEYS) and foreign == 0
        assert [bytes(o) for o in outs] == [bytes(p) for p in payloads]
        cluster.kill(2)
        probed = tier.probe(_job("probe", 3))
        results, _ = tier.read(_job("promote", 4), [memoryview(bytearray(CHUNK)) for _ in KEYS])
    finally:
        tier.close()
    assert set(probed) <= {OK, MISS, FAULT} and FAULT in probed + results
    assert set(results) <= {OK, MISS, FAULT}
    assert tier.stats()["outages"] >= 1
