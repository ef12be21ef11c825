"""The ``kv_transfer_config`` of each server a comparison runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The movers copy with torch, not the numba kernel: vLLM 0.32 scans every module's attributes when
# an engine starts and crashes on llvmlite's objects once numba is imported.
_EXTRA_DEFAULTS = {"cpu_kernel": False}


def _extra(num_cpu_blocks: int, policy: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    chosen = {} if policy is None else {"eviction_policy": policy}
    return {"num_cpu_blocks": num_cpu_blocks, **chosen, **_EXTRA_DEFAULTS, **extra}


def connector_config(num_cpu_blocks: int, policy: str | None, **extra: Any) -> dict[str, Any]:
    """``KVOffloadConnector`` with ``num_cpu_blocks`` CPU chunks and ``policy`` (None: its default)."""
    return {
        "kv_connector": "KVOffloadConnector", "kv_connector_module_path": "kvoffload.vllm.connector",
        "kv_role": "kv_both", "kv_connector_extra_config": _extra(num_cpu_blocks, policy, extra),
    }


def spec_config(num_cpu_blocks: int, policy: str | None, **extra: Any) -> dict[str, Any]:
    """``KVOffloadSpec`` inside vLLM's ``OffloadingConnector``, as :func:`connector_config`."""
    return {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_module_path": "kvoffload.vllm.spec", "spec_name": "KVOffloadSpec",
            **_extra(num_cpu_blocks, policy, extra),
        },
    }


# vLLM's own CPU manager behind its OffloadingConnector, given its policy (lru, its default, or
# arc): built by the caller, whose spec module (scripts/measure/vllm_own_offloading_spec.py) is
# outside the package.
OwnConfig = Callable[[int, str], dict[str, Any]]


def server_configs(names: list[str], num_cpu_blocks: int, own: OwnConfig | None) -> dict[str, dict[str, Any] | None]:
    """``name -> kv_transfer_config`` (None: no offloading) for ``names`` among :data:`SERVERS`."""
    builders: dict[str, Callable[[], dict[str, Any] | None]] = {
        "baseline": lambda: None,
        "connector": lambda: connector_config(num_cpu_blocks, None),
        "connector-lru": lambda: connector_config(num_cpu_blocks, "lru"),
        "spec": lambda: spec_config(num_cpu_blocks, None),
        "spec-lru": lambda: spec_config(num_cpu_blocks, "lru"),
        "vllm-own-lru": lambda: _own(own, num_cpu_blocks, "lru"),
        "vllm-own-arc": lambda: _own(own, num_cpu_blocks, "arc"),
    }
    unknown = [name for name in names if name not in builders]
    if unknown:
        raise ValueError(f"unknown server(s) {', '.join(unknown)}: known {', '.join(builders)}")
    return {name: builders[name]() for name in names}


def _own(own: OwnConfig | None, num_cpu_blocks: int, policy: str) -> dict[str, Any]:
    if own is None:
        raise ValueError("vLLM's own manager needs its spec module (scripts/measure/vllm_own_offloading_spec.py)")
    return own(num_cpu_blocks, policy)


SERVERS = ("baseline", "connector", "connector-lru", "spec", "spec-lru", "vllm-own-lru", "vllm-own-arc")
