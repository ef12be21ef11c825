"""The KV offloading system's control plane (the product): keys and jobs, the CPU manager, its
eviction policies, the scheduler. Public API: the names in ``__all__``. The bytes move in the data
plane, :mod:`kvoffload.dataplane`, which imports this package's ``types`` and nothing else of it.
Nothing here imports a checker: the explorer reads the scheduler and the manager through
``clone()`` and ``view()``.
"""

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
