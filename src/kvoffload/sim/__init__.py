"""A small vLLM-shaped engine loop and workloads, for the demo, the tests and the benchmarks."""

from kvoffload.sim.engine import Engine, EngineConfig, StepReport
from kvoffload.sim.request import SimRequest
from kvoffload.sim.workload import MultiTurnWorkload, WorkloadConfig

__all__ = ["Engine", "EngineConfig", "MultiTurnWorkload", "SimRequest", "StepReport", "WorkloadConfig"]
