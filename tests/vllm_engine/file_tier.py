"""An integration over a small CPU tier and a file tier, as the model kinds' engine tests run it
(test_vllm_mla.py, test_vllm_gpt_oss.py, test_vllm_mamba.py, test_vllm_hybrid_tiers.py), and what
shows that a run's second turns came back from the file tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.engine import EngineReport, connector_transfer_config, spec_transfer_config

# Holds every chunk a test run writes (a Qwen3-Next state chunk is the largest): a file tier that
# evicted the first turns before the second turns came would test nothing.
FILE_TIER_BYTES = 64 << 20


def file_tier_config(
    integration: str, cpu_chunks: int, directory: Path | None, more_tiers: dict[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """``kv_transfer_config`` of ``integration`` (``"connector"`` or ``"spec"``, with its
    ``options``) over an LRU CPU tier of ``cpu_chunks`` chunks, a file tier in ``directory`` (None:
    none) and ``more_tiers`` (a ``redis_tier``)."""
    tiers = dict(more_tiers or {})
    if directory is not None:
        tiers["file_tier"] = {"path": str(directory / "kv.tier"), "size_bytes": FILE_TIER_BYTES}
    build = {"connector": connector_transfer_config, "spec": spec_transfer_config}[integration]
    return build(cpu_chunks, "lru", tiers=tiers, **options)


def assert_loaded_from_file_tier(report: EngineReport, chunks: int) -> None:
    """At least ``chunks`` chunks were read from the file tier and then loaded, none corrupt."""
    file_tier = report.kvoffload["tiers"]["file"]
    assert file_tier["loaded_keys"] >= chunks, f"the file tier served too little: {report.kvoffload['tiers']}"
    assert file_tier["checksum_failures"] == 0 and file_tier["faults"] == 0, file_tier
