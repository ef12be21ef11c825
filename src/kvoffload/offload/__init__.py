"""The KV offloading system's control plane (the product): keys and jobs, the CPU manager, its
eviction policies, the scheduler. Public API: the names in ``__all__``. The bytes move in the data
plane, :mod:`kvoffload.dataplane`, which imports this package's ``types`` and ``errors`` and nothing
else of it. Nothing here imports a checker: the explorer reads the scheduler and the manager through
``clone()`` and ``view()``.

The public names are imported on first use, so that importing the shared vocabulary (``types``,
``errors``), as the data plane does, does not load the scheduler, the manager and the policies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvoffload.offload.errors import LifecycleViolation
    from kvoffload.offload.manager import CPUOffloadingManager, ManagerState
    from kvoffload.offload.policies import POLICIES, EvictionPolicy, make_policy
    from kvoffload.offload.scheduler import OffloadingScheduler, RequestTracker, SchedulerState, UnknownJob
    from kvoffload.offload.types import (
        ConnectorMetadata,
        ConnectorUpdate,
        OffloadConfig,
        OffloadEvent,
        SchedulerOutput,
        StorePlan,
        TransferJob,
        WorkerOutput,
    )

# Each public name -> the module that defines it.
_MODULE_OF = {
    "LifecycleViolation": "errors",
    "CPUOffloadingManager": "manager",
    "ManagerState": "manager",
    "POLICIES": "policies",
    "EvictionPolicy": "policies",
    "make_policy": "policies",
    "OffloadingScheduler": "scheduler",
    "RequestTracker": "scheduler",
    "SchedulerState": "scheduler",
    "UnknownJob": "scheduler",
    "ConnectorMetadata": "types",
    "ConnectorUpdate": "types",
    "OffloadConfig": "types",
    "OffloadEvent": "types",
    "SchedulerOutput": "types",
    "StorePlan": "types",
    "TransferJob": "types",
    "WorkerOutput": "types",
}

__all__ = [
    "POLICIES",
    "CPUOffloadingManager",
    "ConnectorMetadata",
    "ConnectorUpdate",
    "EvictionPolicy",
    "LifecycleViolation",
    "ManagerState",
    "OffloadConfig",
    "OffloadEvent",
    "OffloadingScheduler",
    "RequestTracker",
    "SchedulerOutput",
    "SchedulerState",
    "StorePlan",
    "TransferJob",
    "UnknownJob",
    "WorkerOutput",
    "make_policy",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later reads find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
