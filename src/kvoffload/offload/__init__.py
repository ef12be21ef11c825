"""The KV offloading system: keys and jobs, the CPU manager, the scheduler, the worker, the mover."""

from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import POLICIES, EvictionPolicy, make_policy
from kvoffload.offload.scheduler import OffloadingScheduler, RequestTracker, UnknownJob
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
    "OffloadConfig",
    "OffloadEvent",
    "OffloadingScheduler",
    "RequestTracker",
    "SchedulerOutput",
    "StorePlan",
    "TransferJob",
    "UnknownJob",
    "WorkerOutput",
    "make_policy",
]
